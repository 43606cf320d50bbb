"""The aten reductions through vkumd.torch.load_exported against float64 torch: sum, mean,
amax, amin, prod, var, std (corrections), logsumexp over one axis, several, every axis,
keepdim; argmax/argmin on other axes, with no fallback to torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

import vkumd.torch  # noqa: E402


class Reductions(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x.sum(dim=(0, 2)), x.mean(dim=1, keepdim=True), x.sum(),
                torch.amax(x, dim=(1, 3)), torch.amin(x, dim=-1, keepdim=True),
                torch.prod(x, dim=2), x.var(dim=(1, 3)), x.std(dim=0, correction=0),
                torch.logsumexp(x, dim=(2, 3)), x.mean(), torch.var(x))


class Picks(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.argmin(x, dim=1), torch.argmax(x, dim=2, keepdim=True), torch.argmin(x))


@torch.no_grad()
def test_reductions_match_float64(recwarn: pytest.WarningsRecorder) -> None:
    x = torch.rand(3, 7, 5, 9) + 0.5
    compiled = vkumd.torch.load_exported(torch.export.export(Reductions(), (x,)))
    wanted = Reductions()(x.double())
    for i, (got, want) in enumerate(zip(compiled(x), wanted, strict=True)):
        assert got.shape == want.shape, i
        err = float(torch.linalg.vector_norm(got.double() - want) /
                    torch.linalg.vector_norm(want))
        assert err < 1e-5, (i, err)
    picks = vkumd.torch.load_exported(torch.export.export(Picks(), (x,)))
    for got, want in zip(picks(x), Picks()(x), strict=True):
        assert got.dtype == torch.int64 and torch.equal(got, want)
    found = [w for w in recwarn if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not found, [str(w.message) for w in found]


class Truths(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: torch.Tensor, m: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        return (torch.any(x, dim=(0, 2)), torch.all(x, dim=1, keepdim=True), torch.any(x),
                x.all(), torch.all(n, dim=-1), torch.any(n, dim=0), torch.any(m, dim=1),
                torch.all(m, dim=0), torch.all(x > 0, dim=2))


@torch.no_grad()
def test_any_all_match_torch(recwarn: pytest.WarningsRecorder) -> None:
    x = torch.randint(-2, 3, (3, 7, 5)).float() * 0.37  # about one in five is zero
    x[:, 1] = 0
    x[0] = torch.where(x[0] == 0, 1.0, x[0])
    n = torch.randint(0, 3, (4, 6), dtype=torch.int64)
    m = torch.rand(5, 9) < 0.7  # a bool input: torch.bool runs as vkumd's bool
    m[0] = True
    compiled = vkumd.torch.load_exported(torch.export.export(Truths(), (x, n, m)))
    for i, (got, want) in enumerate(zip(compiled(x, n, m), Truths()(x, n, m), strict=True)):
        assert got.dtype == torch.bool and torch.equal(got, want), i
    found = [w for w in recwarn if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not found, [str(w.message) for w in found]

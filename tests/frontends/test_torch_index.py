"""torch's gather, scatter, scatter_add, scatter_reduce, triu and tril exported and run on
vkumd against torch's own results (in-range indices, as torch requires), and a reduction
vkumd lacks falling back to torch with a stated reason."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

import vkumd.torch  # noqa: E402


def _no_fallback(recwarn: pytest.WarningsRecorder) -> None:
    found = [w for w in recwarn if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not found, [str(w.message) for w in found]


class Index(torch.nn.Module):
    def forward(self, x: torch.Tensor, ids: torch.Tensor, src: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        picked = torch.gather(x, 1, ids)
        return (picked, torch.triu(picked, 1), torch.tril(x, -1),
                x.scatter(1, ids, src), x.scatter_add(1, ids, src),
                x.scatter_reduce(1, ids, src, "amax"), x.scatter_reduce(1, ids, src, "prod"))


@torch.no_grad()
def test_index_ops_export(recwarn: pytest.WarningsRecorder) -> None:
    x = torch.randn(4, 9)
    ids = torch.randint(0, 9, (4, 5))  # duplicates too: scatter_add and the reductions
    src = torch.rand(4, 5) + 0.5
    # scatter (replace) with duplicate indices is undefined in torch: distinct ones there.
    distinct = torch.stack([torch.randperm(9)[:5] for _ in range(4)])
    compiled = vkumd.torch.load_exported(torch.export.export(Index(), (x, ids, src)))
    for index in (ids, distinct):
        want = Index()(x, index, src)
        got = compiled(x, index, src)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if i == 3 and index is ids:
                continue
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    _no_fallback(recwarn)


@torch.no_grad()
def test_scatter_mean_falls_back() -> None:
    class Mean(torch.nn.Module):
        def forward(self, x: torch.Tensor, ids: torch.Tensor, src: torch.Tensor
                    ) -> torch.Tensor:
            return x.scatter_reduce(0, ids, src, "mean")

    x, ids, src = torch.randn(5), torch.tensor([0, 2, 2]), torch.randn(3)
    with pytest.warns(vkumd.torch.VkumdFallbackWarning, match="mean"):
        compiled = vkumd.torch.load_exported(torch.export.export(Mean(), (x, ids, src)))
    torch.testing.assert_close(compiled(x, ids, src), Mean()(x, ids, src))

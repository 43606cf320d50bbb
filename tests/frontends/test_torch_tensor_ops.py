"""torch's cutting, joining, filling, comparing and picking ops (slice, select, cat, stack,
split, unbind, roll, zeros/ones/full, comparisons, where, masked_fill, topk, sort, max/min
along a dim, index_select, baddbmm) and the unary math set, exported and run on vkumd against
torch's own results on odd shapes, with no fallback; and the refusals that stay with torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

import vkumd.torch  # noqa: E402


def _fallbacks(recwarn: pytest.WarningsRecorder) -> list[str]:
    return [str(w.message) for w in recwarn
            if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]


def _check(module: torch.nn.Module, *inputs: torch.Tensor, rtol: float = 1e-6,
           atol: float = 1e-6) -> None:
    compiled = vkumd.torch.load_exported(torch.export.export(module, inputs))
    want = module(*inputs)
    got = compiled(*inputs)
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape, (i, g.shape, w.shape)
        if w.dtype == torch.bool:
            assert g.dtype == torch.bool and torch.equal(g, w), i
        elif not w.dtype.is_floating_point:
            assert torch.equal(g.to(w.dtype), w), i
        else:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=f"output {i}")


class Cuts(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b, c = torch.split(x, [2, 4, 1], dim=1)
        rows = torch.unbind(x[:, :3], dim=1)
        return (x[1:4], x[:, 1:6], x[-2:, 2:-1], x[2], x[:, -1], a, b + 1.0, c,
                *torch.split(x, 3, dim=0), rows[2], torch.roll(x, (2, -3), (0, 1)))


@torch.no_grad()
def test_slices_selects_splits_and_rolls(recwarn: pytest.WarningsRecorder) -> None:
    _check(Cuts(), torch.randn(5, 7))
    assert not _fallbacks(recwarn)


class Joins(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.cat([x, y, x], dim=1), torch.cat([x, x * 2.0]), torch.stack([x, y], 1),
                torch.stack([x, y, x], dim=-1), torch.zeros_like(x) + x,
                torch.ones_like(y) * 2.0 + y, torch.full_like(x, 3.5) - x,
                torch.full((3, 5), -1.25) + x)


@torch.no_grad()
def test_joins_and_fills(recwarn: pytest.WarningsRecorder) -> None:
    _check(Joins(), torch.randn(3, 5), torch.randn(3, 5))
    assert not _fallbacks(recwarn)


class Choices(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mask = x > y
        return (torch.where(mask, x, y), x.masked_fill(x < 0.25, -7.0),
                torch.where(x >= 0.5, x, 0.0), mask, x == y, x != 0.5, x <= y,
                torch.logical_not(mask), (x > 0.5).to(torch.float32) * y,
                torch.where(mask, 2.0, -1.0))


@torch.no_grad()
def test_comparisons_where_and_masks(recwarn: pytest.WarningsRecorder) -> None:
    x = torch.rand(4, 7)
    y = torch.rand(4, 7)
    y[0, :3] = x[0, :3]  # some equal entries
    _check(Choices(), x, y)
    assert not _fallbacks(recwarn)


class Picks(torch.nn.Module):
    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        top, where = torch.topk(x, 3, dim=1)
        low, low_at = torch.topk(x, 2, dim=0, largest=False)
        ordered, order = torch.sort(x, dim=1, descending=True)
        mx, mx_at = x.max(dim=0)
        mn, mn_at = torch.min(x, dim=1, keepdim=True)
        return (top, where, low, low_at, ordered, order, mx, mx_at, mn, mn_at,
                torch.index_select(x, 0, ids))


@torch.no_grad()
def test_topk_sort_extremes_and_index_select(recwarn: pytest.WarningsRecorder) -> None:
    x = torch.randn(6, 9)  # distinct values: the indices are unique
    _check(Picks(), x, torch.tensor([4, 0, 4, 5]))
    assert not _fallbacks(recwarn)


class Math(torch.nn.Module):
    def forward(self, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                acc: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pos = x.abs() + 0.1
        return (torch.exp(x), torch.sqrt(pos), torch.rsqrt(pos), torch.tanh(x),
                torch.sigmoid(x), torch.erf(x), x.clamp_min(-0.3), x.clamp(max=0.4),
                torch.baddbmm(acc, a, b, beta=0.5, alpha=2.0))


@torch.no_grad()
def test_unary_math_clamps_and_baddbmm(recwarn: pytest.WarningsRecorder) -> None:
    _check(Math(), torch.randn(5, 7), torch.randn(2, 3, 5), torch.randn(2, 5, 4),
           torch.randn(2, 3, 4), rtol=1e-5, atol=1e-5)
    assert not _fallbacks(recwarn)


@torch.no_grad()
def test_what_vkumd_cannot_take_stays_with_torch() -> None:
    class Long(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sort(x, dim=0).values * 2.0 + 1.0

    class Strided(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, 1::3] * 2.0 + 1.0

    for module, x, why in ((Long(), torch.randn(1500, 2), "sort"),
                           (Strided(), torch.randn(4, 9), "step 3")):
        with pytest.warns(vkumd.torch.VkumdFallbackWarning, match=why):
            compiled = vkumd.torch.load_exported(torch.export.export(module, (x,)))
        torch.testing.assert_close(compiled(x), module(x))

"""torch.compile(backend="vkumd") of the row ops along a dimension (log_softmax, cumsum,
cumprod), each mapped to one vkumd op with no fallback to torch, against torch's output; an
integer cumsum (torch's result is int64) stays with torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

import torch.nn.functional as F  # noqa: E402

import vkumd.torch  # noqa: E402


class Rows(torch.nn.Module):
    """Each row op along a leading, a middle and the last dimension."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (F.log_softmax(x, dim=1) + torch.log_softmax(x, -1) + torch.cumsum(x, 0)
                + torch.cumsum(x, dim=-1) + torch.cumprod(x * 0.1 + 1, dim=1))


def _fallbacks(recwarn: pytest.WarningsRecorder) -> list[str]:
    return [str(w.message) for w in recwarn
            if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]


@torch.no_grad()
def test_row_ops_compile_without_fallback(recwarn: pytest.WarningsRecorder) -> None:
    torch.manual_seed(5)
    model = Rows().eval()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="vkumd")
    for shape in ((3, 5, 7), (2, 9, 300)):
        x = torch.randn(*shape) * 2
        want = model(x)
        got = fast(x)
        assert ((got - want).norm() / want.norm()).item() < 1e-5
    assert not _fallbacks(recwarn)


@torch.no_grad()
def test_integer_cumsum_stays_with_torch(recwarn: pytest.WarningsRecorder) -> None:
    torch._dynamo.reset()
    fast = torch.compile(lambda x: torch.cumsum(x, 0), backend="vkumd")
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    assert torch.equal(fast(x), torch.cumsum(x, 0))
    assert any("cumsum" in message for message in _fallbacks(recwarn))

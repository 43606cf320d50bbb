"""Ops vkumd lacks fall back to torch: partitions, the whole-graph fallback, one warning."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch_models import MLP, rel_err  # noqa: E402

import vkumd.torch  # noqa: E402


class WithLogcumsumexp(nn.Module):
    """Two vkumd-able halves around torch.logcumsumexp, which vkumd has no kernel for."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(32, 32) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.b(F.gelu(self.a(x)))
        h = torch.logcumsumexp(h, dim=-1)
        return self.d(F.relu(self.c(h)))


def _fallbacks(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught
            if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]


@torch.no_grad()
@pytest.mark.parametrize("partition", [True, False])
def test_logcumsumexp_falls_back_and_warns_once(partition: bool) -> None:
    torch.manual_seed(0)
    model = WithLogcumsumexp().eval()
    torch._dynamo.reset()
    fast = torch.compile(model, backend=vkumd.torch.make_backend(partition=partition))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(6, 32)
            assert rel_err(fast(x), model(x)) < 1e-4
    messages = _fallbacks(caught)
    assert len(messages) == 1, messages
    assert "aten.logcumsumexp.default" in messages[0]
    assert ("part(s) on vkumd" in messages[0]) is partition


@torch.no_grad()
def test_exported_partitions() -> None:
    torch.manual_seed(1)
    model = WithLogcumsumexp().eval()
    x = torch.randn(4, 32)
    with pytest.warns(vkumd.torch.VkumdFallbackWarning, match="logcumsumexp"):
        compiled = vkumd.torch.load_exported(torch.export.export(model, (x,)))
    assert rel_err(compiled(x), model(x)) < 1e-4
    parts = [m for name, m in compiled.runner.named_children() if name.startswith("vkumd_")]
    assert len(parts) == 2
    assert all(p.runner.fallback is None and p.runner.builds == 1 for p in parts)


@torch.no_grad()
def test_outputs_are_copies_unless_asked() -> None:
    torch.manual_seed(2)
    model = MLP().eval()
    ep = torch.export.export(model, (torch.randn(4, 64),))
    compiled = vkumd.torch.load_exported(ep)
    x1, x2 = torch.randn(4, 64), torch.randn(4, 64)
    y1 = compiled(x1)
    compiled(x2)
    assert rel_err(y1, model(x1)) < 1e-4  # the second call did not overwrite the first
    views = vkumd.torch.load_exported(ep, copy_outputs=False)
    v1 = views(x1).clone()
    v2 = views(x2)
    assert rel_err(v1, model(x1)) < 1e-4 and rel_err(v2, model(x2)) < 1e-4


@torch.no_grad()
def test_weight_change_converts_again() -> None:
    torch.manual_seed(3)
    model = MLP().eval()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="vkumd")
    x = torch.randn(3, 64)
    fast(x)
    model.fc3.weight.mul_(2.0)
    assert rel_err(fast(x), model(x)) < 1e-4


class WithNonzero(nn.Module):
    """Device work on both sides of torch.nonzero, whose output size depends on the data."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.a(x))
        return torch.nonzero(h), self.b(h) * 2


@torch.no_grad()
@pytest.mark.parametrize("capture", [False, True])
def test_data_dependent_ops_stay_in_torch(capture: bool) -> None:
    torch.manual_seed(2)
    model = WithNonzero().eval()
    torch._dynamo.reset()
    fast = torch.compile(model, backend=vkumd.torch.make_backend())
    with warnings.catch_warnings(record=True) as caught, torch._dynamo.config.patch(
            capture_dynamic_output_shape_ops=capture):
        warnings.simplefilter("always")
        x = torch.randn(5, 16)
        got, want = fast(x), model(x)
    assert torch.equal(got[0], want[0])
    assert rel_err(got[1], want[1]) < 1e-4
    if capture:  # the node reaches the backend, which leaves it to torch and says why
        assert any("aten.nonzero.default (its output size depends on the data" in m
                   for m in _fallbacks(caught)), _fallbacks(caught)

"""torch.compile(backend="vkumd") of the elementwise tail: the activations with parameters
(hardsigmoid, leaky_relu, prelu, elu, selu, celu, softplus with a beta, mish, clamp, hardtanh,
relu6, threshold), the unary math set, remainder, fmod, pow and the bitwise ops, each mapped to
one vkumd op with no fallback to torch, against torch's own output."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

import torch.nn.functional as F  # noqa: E402

import vkumd.torch  # noqa: E402


class Tail(torch.nn.Module):
    """Every mapped activation and math function, summed so each reaches the output."""

    def __init__(self) -> None:
        super().__init__()
        self.prelu = torch.nn.PReLU(5)
        torch.nn.init.uniform_(self.prelu.weight, -0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (F.hardsigmoid(x) + F.leaky_relu(x, 0.2) + F.elu(x, 0.7) + F.elu(x) + F.selu(x)
             + F.celu(x, 1.3) + F.softplus(x) + F.softplus(x, beta=2.0) + F.mish(x)
             + torch.clamp(x, -0.5, 0.8) + torch.clamp(x, min=0.1) + F.hardtanh(x)
             + F.relu6(x) + F.threshold(x, 0.3, 0.0) + self.prelu(x))
        u = x.clamp(-0.9, 0.9)
        z = (torch.abs(x) + torch.ceil(x) + torch.floor(x) + torch.round(x) + torch.sign(x)
             + torch.sin(x) + torch.cos(x) + torch.tan(u) + torch.atan(x) + torch.sinh(u)
             + torch.cosh(u) + torch.asinh(x) + torch.log(x.abs() + 1) + torch.asin(u)
             + torch.acos(u) + torch.atanh(u) + torch.acosh(x.abs() + 1)
             + torch.reciprocal(x + 10))
        return y * z


@torch.no_grad()
def test_the_tail_compiles_without_fallback(recwarn: pytest.WarningsRecorder) -> None:
    torch.manual_seed(3)
    model = Tail().eval()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="vkumd")
    for shape in ((3, 5, 7, 4), (2, 5, 9)):
        x = torch.randn(*shape) * 2
        want = model(x)
        got = fast(x)
        assert ((got - want).norm() / want.norm()).item() < 1e-5
    fallbacks = [str(w.message) for w in recwarn
                 if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not fallbacks, fallbacks


class Arithmetic(torch.nn.Module):
    """torch.remainder, torch.fmod and torch.pow of two tensors and of a tensor and a number."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (torch.remainder(x, y) + torch.fmod(x, y) + torch.pow(x.abs() + 0.5, y)
                + torch.pow(x, 3) + torch.remainder(x, 1.5))


@torch.no_grad()
def test_remainder_fmod_and_pow_compile_without_fallback(
        recwarn: pytest.WarningsRecorder) -> None:
    torch.manual_seed(5)
    model = Arithmetic().eval()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="vkumd")
    for shape in ((3, 7), (5, 2, 9)):
        x = torch.randn(*shape) * 3
        y = (torch.rand(shape[-1]) * 2 + 0.5) * torch.where(torch.rand(shape[-1]) < 0.5, -1, 1)
        want = model(x.double(), y.double())
        got = fast(x, y)
        assert ((got.double() - want).norm() / want.norm()).item() < 1e-5
    fallbacks = [str(w.message) for w in recwarn
                 if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not fallbacks, fallbacks


@torch.no_grad()
def test_bitwise_ops_compile_without_fallback(recwarn: pytest.WarningsRecorder) -> None:
    def bits(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((x & y) | 5) ^ (y | x)

    torch._dynamo.reset()
    fast = torch.compile(bits, backend="vkumd")
    for shape in ((3, 7), (5, 2, 9)):
        x = torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32)
        y = torch.randint(-2**31, 2**31 - 1, shape[-1:], dtype=torch.int32)
        assert torch.equal(fast(x, y), bits(x, y))
    fallbacks = [str(w.message) for w in recwarn
                 if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not fallbacks, fallbacks

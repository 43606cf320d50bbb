"""torch.compile(backend="vkumd") and vkumd.torch.load_exported against torch's own output:
an MLP, a transformer block and all-MiniLM-L6-v2 written in plain torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the torch lane: pip install torch==2.13.0 "
                            "(docs/frameworks_torch.md)")

from torch_models import MLP, Block, cosine, minilm, rel_err  # noqa: E402

import vkumd.torch  # noqa: E402


def _compiled(model: torch.nn.Module) -> object:
    torch._dynamo.reset()
    return torch.compile(model, backend="vkumd")


def _no_fallback(recwarn: pytest.WarningsRecorder) -> None:
    found = [w for w in recwarn if issubclass(w.category, vkumd.torch.VkumdFallbackWarning)]
    assert not found, [str(w.message) for w in found]


def test_import_vkumd_does_not_import_torch() -> None:
    code = "import sys, vkumd; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_backend_is_registered_by_name() -> None:
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("vkumd") is vkumd.torch.backend


@torch.no_grad()
def test_mlp_compile(recwarn: pytest.WarningsRecorder) -> None:
    torch.manual_seed(0)
    model = MLP().eval()
    fast = _compiled(model)
    for rows in (5, 9):  # the second size recompiles with a symbolic dimension
        x = torch.randn(rows, 64)
        assert rel_err(fast(x), model(x)) < 1e-4
    _no_fallback(recwarn)


@torch.no_grad()
def test_mlp_export(recwarn: pytest.WarningsRecorder) -> None:
    torch.manual_seed(1)
    model = MLP().eval()
    batch = torch.export.Dim("batch")
    ep = torch.export.export(model, (torch.randn(4, 64),), dynamic_shapes=({0: batch},))
    compiled = vkumd.torch.load_exported(ep)
    for rows in (4, 7, 16):
        x = torch.randn(rows, 64)
        y = compiled(x)
        assert y.shape == (rows, 8)
        assert rel_err(y, model(x)) < 1e-4
    assert compiled.runner.builds == 1  # one graph, symbolic in the batch
    assert not isinstance(compiled.runner.compiled.graph.inputs[0].shape[0], int)
    _no_fallback(recwarn)


@torch.no_grad()
def test_block_compile_and_export(recwarn: pytest.WarningsRecorder) -> None:
    torch.manual_seed(2)
    model = Block().eval()
    x = torch.randn(2, 12, 64)
    ref = model(x)
    assert rel_err(_compiled(model)(x), ref) < 1e-4
    seq = torch.export.Dim("seq", max=128)
    ep = torch.export.export(model, (x,), dynamic_shapes=({1: seq},))
    compiled = vkumd.torch.load_exported(ep)
    assert rel_err(compiled(x), ref) < 1e-4
    x2 = torch.randn(2, 20, 64)
    assert rel_err(compiled(x2), model(x2)) < 1e-4
    ops = {n.op for n in compiled.runner.compiled.graph.nodes}
    assert "attention" in ops and "matmul" in ops
    _no_fallback(recwarn)


def _bert_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(3)
    ids = torch.randint(1000, 20000, (2, 16))
    ids[:, 0] = 101
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 10:] = 0  # the second sentence is padded
    return ids, mask


def _check_bert(got: tuple[torch.Tensor, ...], ref: tuple[torch.Tensor, ...]) -> None:
    states, pooled = got
    assert rel_err(states, ref[0]) < 1e-4
    assert rel_err(pooled, ref[1]) < 1e-4
    assert cosine(pooled, ref[1]) >= 0.99999
    assert float((pooled - ref[1]).abs().max()) < 1e-4


@torch.no_grad()
def test_minilm_compile(recwarn: pytest.WarningsRecorder) -> None:
    model = minilm()
    ids, mask = _bert_inputs()
    _check_bert(_compiled(model)(ids, mask), model(ids, mask))
    _no_fallback(recwarn)


@torch.no_grad()
def test_minilm_export(recwarn: pytest.WarningsRecorder) -> None:
    model = minilm()
    ids, mask = _bert_inputs()
    batch = torch.export.Dim("batch", max=64)
    ep = torch.export.export(model, (ids, mask), dynamic_shapes=({0: batch}, {0: batch}))
    compiled = vkumd.torch.load_exported(ep)
    _check_bert(compiled(ids, mask), model(ids, mask))
    three = (torch.cat([ids, ids[:1]]), torch.cat([mask, mask[:1]]))
    _check_bert(compiled(*three), model(*three))
    _no_fallback(recwarn)


def _random_bert_inputs(batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(int(torch.randint(1 << 30, ())))
    ids = torch.randint(1000, 20000, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq // 2 + 1:] = 0  # the last sentence is padded
    return ids, mask


@torch.no_grad()
def test_minilm_export_dynamic_sequence(recwarn: pytest.WarningsRecorder) -> None:
    # The sequence length is an IR symbol: torch.arange(seq) (the position ids) becomes an
    # input the runner fills per call, so one conversion serves every length, no fallback.
    model = minilm()
    batch = torch.export.Dim("batch", max=64)
    seq = torch.export.Dim("seq", min=2, max=512)
    ids, mask = _random_bert_inputs(2, 9)
    ep = torch.export.export(model, (ids, mask),
                             dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))
    compiled = vkumd.torch.load_exported(ep)
    for b, s in ((2, 9), (3, 31), (2, 5)):
        x = _random_bert_inputs(b, s)
        _check_bert(compiled(*x), model(*x))
    runner = compiled.runner
    assert runner.builds == 1
    assert any(name.startswith("arange") for name in runner.converted.ranges)
    symbolic = {str(d) for v in runner.compiled.graph.inputs for d in v.shape
                if not isinstance(d, int)}
    assert len(symbolic) == 2, symbolic  # batch and seq, as torch named them
    _no_fallback(recwarn)


@torch.no_grad()
def test_minilm_compile_dynamic_sequence(recwarn: pytest.WarningsRecorder) -> None:
    model = minilm()
    torch._dynamo.reset()
    fast = torch.compile(model, backend="vkumd", dynamic=True)
    for b, s in ((2, 11), (3, 23)):
        x = _random_bert_inputs(b, s)
        _check_bert(fast(*x), model(*x))
    _no_fallback(recwarn)


@torch.no_grad()
def test_argmax_export(recwarn: pytest.WarningsRecorder) -> None:
    """aten.argmax over the last axis, another axis with keepdim, and the flattened tensor:
    int64 indices equal to torch's."""
    class Pick(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (torch.argmax(x, dim=-1), torch.argmax(x, dim=1, keepdim=True),
                    torch.argmax(x))

    x = torch.randn(3, 5, 16)
    compiled = vkumd.torch.load_exported(torch.export.export(Pick(), (x,)))
    for got, want in zip(compiled(x), Pick()(x), strict=True):
        assert got.dtype == torch.int64 and torch.equal(got, want)
    _no_fallback(recwarn)


@torch.no_grad()
def test_maximum_minimum_export(recwarn: pytest.WarningsRecorder) -> None:
    """aten.maximum and aten.minimum with broadcasting; a NaN propagates as torch's does."""
    class Clamp(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.minimum(torch.maximum(x, y), y + 1.0)

    x, y = torch.randn(3, 5, 7), torch.randn(5, 1)
    x[1, 2, 3] = float("nan")
    compiled = vkumd.torch.load_exported(torch.export.export(Clamp(), (x, y)))
    torch.testing.assert_close(compiled(x, y), Clamp()(x, y), equal_nan=True)
    _no_fallback(recwarn)

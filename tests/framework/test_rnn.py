"""``ops.rnn`` (ONNX's simple RNN) against a float64 numpy reference written here (step by
step, one hidden unit at a time), on odd sizes, batch 1, 3 and 6, one and seven steps, every
direction, each activation (and a different one per direction), with and without biases,
initial states, clip and sequence_lens; both per-step projections (GEMM and matvec); outputs
poisoned first; float32 and float16; a compiled graph; bad calls refused."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_close, assert_each_raises, poisoned, sample, tensor

import vkumd.compiler.kernels.recurrent_plan as recurrent_plan
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate

FUNCTIONS = {"tanh": np.tanh, "relu": lambda v: max(v, 0.0),
             "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v))}


def rnn64(x, w, r, b, h0, lens, direction, clip, activations):
    """ONNX's RNN in float64, each output unit's sum written out."""
    seq, batch, inp = x.shape
    dirs, hid = r.shape[0], r.shape[2]
    acts = list(activations) * (dirs // len(activations))
    y = np.zeros((seq, dirs, batch, hid))
    y_h = np.zeros((dirs, batch, hid))
    for d in range(dirs):
        back = direction == "reverse" or d == 1
        for n in range(batch):
            steps = seq if lens is None else min(max(int(lens[n]), 0), seq)
            h = np.zeros(hid) if h0 is None else h0[d, n].astype(np.float64)
            for t in (range(steps - 1, -1, -1) if back else range(steps)):
                new = np.zeros(hid)
                for j in range(hid):
                    v = sum(float(x[t, n, k]) * float(w[d, j, k]) for k in range(inp))
                    v += sum(h[k] * float(r[d, j, k]) for k in range(hid))
                    if b is not None:
                        v += float(b[d, j]) + float(b[d, hid + j])
                    if clip is not None:
                        v = min(max(v, -clip), clip)
                    new[j] = FUNCTIONS[acts[d]](v)
                h = new
                y[t, d, n] = h
            y_h[d, n] = h
    return y, y_h


def _case(rng, dtype, seq, batch, inp, hid, dirs, full):
    s = 1 / np.sqrt(hid)
    a = {"x": sample(rng, dtype, (seq, batch, inp)), "w": sample(rng, dtype, (dirs, hid, inp), s),
         "r": sample(rng, dtype, (dirs, hid, hid), s)}
    if full:
        a["b"] = sample(rng, dtype, (dirs, 2 * hid), 0.5)
        a["initial_h"] = sample(rng, dtype, (dirs, batch, hid), 0.5)
    return a


def _check(ctx, a, dtype, direction, clip, activations, lens=None):
    want = rnn64(a["x"], a["w"], a["r"], a.get("b"), a.get("initial_h"), lens, direction,
                 clip, activations)
    out = tuple(poisoned(ctx, v.shape, dtype) for v in want)
    t = {k: tensor(ctx, v, dtype) for k, v in a.items()}
    got = ops.rnn(t["x"], t["w"], t["r"], t.get("b"), initial_h=t.get("initial_h"),
                  sequence_lens=None if lens is None else ctx.tensor(lens),
                  direction=direction, clip=clip, activations=activations, out=out)
    assert all(g is o for g, o in zip(got, out, strict=True))
    for name, g, v in zip(("Y", "Y_h"), got, want, strict=True):
        assert_close(g.numpy().astype(np.float64), v, dtype,
                     f"{name} {direction} {activations} clip={clip}")


@pytest.mark.parametrize("direction,activations", [
    ("forward", ("tanh",)), ("forward", ("relu",)), ("reverse", ("sigmoid",)),
    ("bidirectional", ("tanh",)), ("bidirectional", ("relu", "sigmoid"))], ids=str)
@pytest.mark.parametrize("seq,batch,full,clip", [(1, 1, False, None), (7, 3, True, None),
                                                 (7, 1, True, 0.6), (2, 6, True, 0.8)],
                         ids=str)
def test_matches_float64(ctx, direction: str, activations, seq: int, batch: int, full: bool,
                         clip) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    a = _case(np.random.default_rng(), "float32", seq, batch, 5, 7, dirs, full)
    _check(ctx, a, "float32", direction, clip, activations)


@pytest.mark.parametrize("step", ["gemm", "matvec"])
def test_each_step_path(ctx, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    matvec = step == "matvec"
    monkeypatch.setattr(recurrent_plan, "MATVEC_MAX_BATCH", 8 if matvec else 0)
    monkeypatch.setattr(recurrent_plan, "MATVEC_ON_GPU", matvec)
    a = _case(np.random.default_rng(), "float32", 5, 3, 6, 9, 2, True)
    _check(ctx, a, "float32", "bidirectional", 0.9, ("sigmoid", "tanh"))


def test_sequence_lens(ctx) -> None:
    a = _case(np.random.default_rng(), "float32", 6, 4, 5, 7, 2, True)
    lens = np.array([6, 0, 3, 9], np.int32)  # whole, none, part, past the end (clamped)
    _check(ctx, a, "float32", "bidirectional", None, ("relu",), lens)


def test_float16(ctx) -> None:
    if not ctx.caps.storage_16bit:
        pytest.skip("the device has no 16-bit storage")
    a = _case(np.random.default_rng(), "float16", 6, 3, 9, 11, 2, True)
    _check(ctx, a, "float16", "bidirectional", None, ("tanh", "relu"))


def test_compiled_graph(ctx) -> None:
    rng = np.random.default_rng()
    a = _case(rng, "float32", 5, 3, 4, 6, 1, True)
    b = GraphBuilder("rnn")
    x = b.input("x", a["x"].shape)
    weights = [b.constant(a[k].astype(np.float32)) for k in ("w", "r", "b", "initial_h")]
    weights.insert(3, None)  # no sequence_lens
    y, y_h = b.op("rnn", x, *weights, direction="reverse", activations=("relu",))
    b.output(y, y_h)
    built = b.build()
    graph = CompiledGraph(built, ctx)
    for _ in range(2):  # a replay computes the same
        x_new = sample(rng, "float32", a["x"].shape).astype(np.float32)
        want = rnn64(x_new, a["w"], a["r"], a["b"], a["initial_h"], None, "reverse", None,
                     ("relu",))
        got = graph(x=x_new)
        ref = evaluate(built, {"x": x_new})
        for g, r_, v in zip(got, ref, want, strict=True):
            assert_close(np.asarray(g, np.float64), v, "float32", "compiled")
            assert_close(np.asarray(r_, np.float64), v, "float32", "reference")


def test_bad_calls_are_refused(ctx) -> None:
    x, w, r = ctx.zeros((3, 2, 5)), ctx.zeros((1, 7, 5)), ctx.zeros((1, 7, 7))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.rnn(x, w, r, activations=("gelu",))),
        (VkumdValueError, lambda: ops.rnn(x, w, r, activations=("tanh", "relu"))),
        (VkumdValueError, lambda: ops.rnn(x, w, r, activations=())),
        (VkumdValueError, lambda: ops.rnn(x, w, r, activations=3)),
        (VkumdValueError, lambda: ops.rnn(x, ctx.zeros((1, 21, 5)), ctx.zeros((1, 21, 7)))),
        (VkumdValueError, lambda: ops.rnn(x, w, r, ctx.zeros((1, 7)))),
        (VkumdValueError, lambda: ops.rnn(x, w, r, direction="bidirectional")),
        (VkumdValueError, lambda: ops.rnn(x, w, r, clip=-1.0)),
        (VkumdValueError, lambda: ops.rnn(x, w, r, initial_h=ctx.zeros((1, 2, 6)))),
        (VkumdValueError, lambda: ops.rnn(ctx.zeros((0, 2, 5)), w, r)),
        (VkumdTypeError, lambda: ops.rnn(x, w, r, sequence_lens=ctx.zeros((2,)))),
        (VkumdTypeError, lambda: ops.rnn(ctx.zeros((3, 2, 5), "int32"),
                                         ctx.zeros((1, 7, 5), "int32"),
                                         ctx.zeros((1, 7, 7), "int32"))),
    ], "rnn")

"""``ops.lstm`` and ``ops.gru`` against a float64 numpy reference written here (step by step,
ONNX's equations), on odd sizes, batch 1 and 3, one and seven steps, every direction, with
and without initial states, biases, peepholes, clip, input_forget and linear_before_reset;
outputs poisoned first; float32 and float16; a compiled graph; bad calls refused."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_close, assert_each_raises, poisoned, sample, tensor

import vkumd.compiler.kernels.recurrent_plan as recurrent_plan
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate


def _sig(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _order(direction: str, d: int, seq: int) -> list[int]:
    back = direction == "reverse" or (direction == "bidirectional" and d == 1)
    return list(range(seq))[::-1] if back else list(range(seq))


def lstm64(x, w, r, b, h0, c0, p, direction, clip, input_forget):
    """The ONNX LSTM in float64, one unit at a time where the gates mix."""
    seq, batch, _ = x.shape
    dirs, hid = r.shape[0], r.shape[2]
    cl = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
    y = np.zeros((seq, dirs, batch, hid))
    hs, cs = np.zeros((dirs, batch, hid)), np.zeros((dirs, batch, hid))
    for d in range(dirs):
        h = np.zeros((batch, hid)) if h0 is None else h0[d]
        c = np.zeros((batch, hid)) if c0 is None else c0[d]
        wi, wo, wf, wc = np.split(w[d], 4)
        ri, ro, rf, rc = np.split(r[d], 4)
        bb = np.zeros((8, hid)) if b is None else b[d].reshape(8, hid)
        pp = np.zeros((3, hid)) if p is None else p[d].reshape(3, hid)
        for t in _order(direction, d, seq):
            xt = x[t]
            i = _sig(cl(xt @ wi.T + h @ ri.T + bb[0] + bb[4] + pp[0] * c))
            f = 1 - i if input_forget else _sig(cl(xt @ wf.T + h @ rf.T + bb[2] + bb[6]
                                                   + pp[2] * c))
            c = f * c + i * np.tanh(cl(xt @ wc.T + h @ rc.T + bb[3] + bb[7]))
            o = _sig(cl(xt @ wo.T + h @ ro.T + bb[1] + bb[5] + pp[1] * c))
            h = o * np.tanh(c)
            y[t, d] = h
        hs[d], cs[d] = h, c
    return [y, hs, cs]


def gru64(x, w, r, b, h0, direction, clip, linear_before_reset):
    """The ONNX GRU in float64."""
    seq, batch, _ = x.shape
    dirs, hid = r.shape[0], r.shape[2]
    cl = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
    y = np.zeros((seq, dirs, batch, hid))
    hs = np.zeros((dirs, batch, hid))
    for d in range(dirs):
        h = np.zeros((batch, hid)) if h0 is None else h0[d]
        wz, wr, wh = np.split(w[d], 3)
        rz, rr, rh = np.split(r[d], 3)
        bb = np.zeros((6, hid)) if b is None else b[d].reshape(6, hid)
        for t in _order(direction, d, seq):
            xt = x[t]
            z = _sig(cl(xt @ wz.T + h @ rz.T + bb[0] + bb[3]))
            g = _sig(cl(xt @ wr.T + h @ rr.T + bb[1] + bb[4]))
            if linear_before_reset:
                n = np.tanh(cl(xt @ wh.T + g * (h @ rh.T + bb[5]) + bb[2]))
            else:
                n = np.tanh(cl(xt @ wh.T + (g * h) @ rh.T + bb[5] + bb[2]))
            h = (1 - z) * n + z * h
            y[t, d] = h
        hs[d] = h
    return [y, hs]


def _case(rng, cell, dtype, seq, batch, inp, hid, direction, full):
    dirs = 2 if direction == "bidirectional" else 1
    g = 4 if cell == "lstm" else 3
    s = 1 / np.sqrt(hid)
    arrays = {"x": sample(rng, dtype, (seq, batch, inp)),
              "w": sample(rng, dtype, (dirs, g * hid, inp), s),
              "r": sample(rng, dtype, (dirs, g * hid, hid), s)}
    if full:
        arrays["b"] = sample(rng, dtype, (dirs, 2 * g * hid), 0.5)
        arrays["initial_h"] = sample(rng, dtype, (dirs, batch, hid), 0.5)
        if cell == "lstm":
            arrays["initial_c"] = sample(rng, dtype, (dirs, batch, hid))
            arrays["p"] = sample(rng, dtype, (dirs, 3 * hid), 0.5)
    return arrays


def _expected(cell, a, direction, clip, extra):
    if cell == "lstm":
        return lstm64(a["x"], a["w"], a["r"], a.get("b"), a.get("initial_h"),
                      a.get("initial_c"), a.get("p"), direction, clip, extra)
    return gru64(a["x"], a["w"], a["r"], a.get("b"), a.get("initial_h"), direction, clip,
                 extra)


def _call(ctx, cell, a, dtype, direction, clip, extra, out):
    t = {k: tensor(ctx, v, dtype) for k, v in a.items()}
    keys = {k: t.get(k) for k in ("initial_h", "initial_c", "p") if k in t}
    if cell == "lstm":
        return ops.lstm(t["x"], t["w"], t["r"], t.get("b"), **keys, direction=direction,
                        clip=clip, input_forget=extra, out=out)
    return ops.gru(t["x"], t["w"], t["r"], t.get("b"), **keys, direction=direction,
                   clip=clip, linear_before_reset=extra, out=out)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("seq,batch,full", [(1, 1, False), (7, 3, True), (7, 1, True),
                                            (1, 3, True)], ids=str)
@pytest.mark.parametrize("cell,extra,clip", [("lstm", False, None), ("lstm", True, 0.7),
                                             ("gru", False, None), ("gru", True, None),
                                             ("gru", False, 0.6)], ids=str)
def test_matches_float64(ctx, cell: str, extra: bool, clip: float | None, seq: int,
                         batch: int, full: bool, direction: str) -> None:
    rng = np.random.default_rng()
    a = _case(rng, cell, "float32", seq, batch, 5, 7, direction, full)
    want = _expected(cell, a, direction, clip, extra)
    out = tuple(poisoned(ctx, w.shape, "float32") for w in want)
    got = _call(ctx, cell, a, "float32", direction, clip, extra, out)
    assert all(g is o for g, o in zip(got, out, strict=True))
    for name, g, w in zip(("Y", "Y_h", "Y_c"), got, want, strict=False):
        assert_close(g.numpy().astype(np.float64), w, "float32", f"{cell} {name}")


@pytest.mark.parametrize("step", ["gemm", "matvec"])
@pytest.mark.parametrize("direction", ["reverse", "bidirectional"])
@pytest.mark.parametrize("cell,extra", [("lstm", True), ("gru", False), ("gru", True)])
def test_each_step_path(ctx, monkeypatch: pytest.MonkeyPatch, cell: str, extra: bool,
                        direction: str, step: str) -> None:
    # The planner's choice of the per-step projection forced each way, on a batch the other
    # rule would take.
    matvec = step == "matvec"
    monkeypatch.setattr(recurrent_plan, "MATVEC_MAX_BATCH", 8 if matvec else 0)
    monkeypatch.setattr(recurrent_plan, "MATVEC_ON_GPU", matvec)
    rng = np.random.default_rng()
    a = _case(rng, cell, "float32", 5, 3, 6, 9, direction, True)
    want = _expected(cell, a, direction, 0.9, extra)
    out = tuple(poisoned(ctx, w.shape, "float32") for w in want)
    got = _call(ctx, cell, a, "float32", direction, 0.9, extra, out)
    for g, w in zip(got, want, strict=True):
        assert_close(g.numpy().astype(np.float64), w, "float32", f"{cell} {step}")


@pytest.mark.parametrize("cell,extra", [("lstm", False), ("gru", False), ("gru", True)])
def test_float16(ctx, cell: str, extra: bool) -> None:
    rng = np.random.default_rng()
    a = _case(rng, cell, "float16", 6, 3, 9, 11, "bidirectional", True)
    want = _expected(cell, a, "bidirectional", None, extra)
    got = _call(ctx, cell, a, "float16", "bidirectional", None, extra, None)
    for g, w in zip(got, want, strict=True):
        assert g.dtype.name == "float16"
        assert_close(g.numpy().astype(np.float64), w, "float16", cell)


def _per_row(cell, a, lens, direction, clip, extra):
    """The expected outputs with ``lens``: each batch row is its own layer over its first
    ``lens[i]`` steps (this file's references), zeros after them."""
    seq, batch, _ = a["x"].shape
    outs = None
    for i, n in enumerate(lens):
        row = {k: v[:, i:i + 1] if k in ("x", "initial_h", "initial_c") else v
               for k, v in a.items()}
        row["x"] = row["x"][:n]
        got = _expected(cell, row, direction, clip, extra)
        if outs is None:
            outs = [np.zeros((seq,) + got[0].shape[1:2] + (batch,) + got[0].shape[3:])]
            outs += [np.zeros(g.shape[:1] + (batch,) + g.shape[2:]) for g in got[1:]]
        outs[0][:n, :, i] = got[0][:, :, 0]
        for o, g in zip(outs[1:], got[1:], strict=False):
            o[:, i] = g[:, 0]
    return outs


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("cell,extra", [("lstm", False), ("gru", False), ("gru", True)])
def test_sequence_lens(ctx, cell: str, extra: bool, direction: str) -> None:
    rng = np.random.default_rng()
    a = _case(rng, cell, "float32", 6, 4, 5, 7, direction, True)
    lens = [6, 2, 5, 1]
    want = _per_row(cell, a, lens, direction, None, extra)
    out = tuple(poisoned(ctx, w.shape, "float32") for w in want)
    t = {k: tensor(ctx, v, "float32") for k, v in a.items()}
    keys = {k: t[k] for k in ("initial_h", "initial_c", "p") if k in t}
    seq_lens = ctx.tensor(np.asarray(lens, np.int32))
    fn = ops.lstm if cell == "lstm" else ops.gru
    flag = {"input_forget" if cell == "lstm" else "linear_before_reset": extra}
    got = fn(t["x"], t["w"], t["r"], t["b"], sequence_lens=seq_lens, **keys,
             direction=direction, out=out, **flag)
    for g, w in zip(got, want, strict=True):
        assert_close(g.numpy().astype(np.float64), w, "float32", cell)


def test_larger_layer_uses_the_gemm_tiles(ctx) -> None:
    # Sizes past one GEMM tile on every side, so the projections are real tiled GEMMs.
    rng = np.random.default_rng()
    a = _case(rng, "lstm", "float32", 9, 5, 67, 45, "bidirectional", True)
    want = _expected("lstm", a, "bidirectional", None, False)
    got = _call(ctx, "lstm", a, "float32", "bidirectional", None, False, None)
    for g, w in zip(got, want, strict=True):
        assert_close(g.numpy().astype(np.float64), w, "float32")


def test_record_reference_agrees_with_this_one() -> None:
    # The op record's reference (what the graph evaluator and constant folding use).
    rng = np.random.default_rng()
    for cell, extra in (("lstm", True), ("gru", False), ("gru", True)):
        a = _case(rng, cell, "float32", 4, 2, 3, 5, "bidirectional", True)
        b = GraphBuilder(cell)
        ins = [b.input(k, v.shape) for k, v in a.items()]
        ins.insert(4, None)  # no sequence_lens
        attrs = {"input_forget" if cell == "lstm" else "linear_before_reset": extra}
        outs = b.op(cell, *ins, direction="bidirectional", clip=0.8, **attrs)
        b.output(*outs)
        got = evaluate(b.build(), {k: v.astype(np.float32) for k, v in a.items()})
        want = _expected(cell, a, "bidirectional", 0.8, extra)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_compiled_graph(ctx) -> None:
    rng = np.random.default_rng()
    a = _case(rng, "gru", "float32", 5, 3, 4, 6, "reverse", True)
    b = GraphBuilder("gru")
    x = b.input("x", a["x"].shape)
    weights = [b.constant(a[k].astype(np.float32)) for k in ("w", "r", "b", "initial_h")]
    weights.insert(3, None)  # no sequence_lens
    y, y_h = b.op("gru", x, *weights, direction="reverse")
    b.output(b.relu(y), y_h)
    graph = CompiledGraph(b.build(), ctx)
    for _ in range(2):  # a replay computes the same
        x_new = sample(rng, "float32", a["x"].shape)
        got = graph(x=x_new.astype(np.float32))
        want = gru64(x_new, a["w"], a["r"], a["b"], a["initial_h"], "reverse", None, False)
        assert_close(np.asarray(got[0], np.float64), np.maximum(want[0], 0), "float32")
        assert_close(np.asarray(got[1], np.float64), want[1], "float32")


def test_bad_calls_are_refused(ctx) -> None:
    x, w, r = ctx.zeros((3, 2, 5)), ctx.zeros((1, 28, 5)), ctx.zeros((1, 28, 7))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.lstm(x, ctx.zeros((1, 28, 4)), r)),
        (VkumdValueError, lambda: ops.lstm(x, w, r, hidden_size=8)),
        (VkumdValueError, lambda: ops.lstm(x, w, r, direction="bidirectional")),
        (VkumdValueError, lambda: ops.lstm(x, w, r, direction="sideways")),
        (VkumdValueError, lambda: ops.lstm(x, w, r, clip=0.0)),
        (VkumdValueError, lambda: ops.lstm(x, w, r, ctx.zeros((1, 28)))),
        (VkumdValueError, lambda: ops.lstm(x, w, r, p=ctx.zeros((1, 20)))),
        (VkumdValueError, lambda: ops.lstm(x, w, r, initial_h=ctx.zeros((1, 3, 7)))),
        (VkumdValueError, lambda: ops.lstm(ctx.zeros((0, 2, 5)), w, r)),
        (VkumdValueError, lambda: ops.lstm(x, w, r, out=(ctx.zeros((3, 1, 2, 7)),))),
        (VkumdTypeError, lambda: ops.lstm(x, w, r, input_forget=1)),
        (VkumdTypeError, lambda: ops.gru(ctx.zeros((3, 2, 5), "float16"),
                                         ctx.zeros((1, 21, 5)), ctx.zeros((1, 21, 7)))),
        (VkumdTypeError, lambda: ops.gru(ctx.zeros((3, 2, 5), "int32"),
                                         ctx.zeros((1, 21, 5), "int32"),
                                         ctx.zeros((1, 21, 7), "int32"))),
        (VkumdValueError, lambda: ops.gru(x, w, r)),  # LSTM's 4 gates for GRU's 3
    ], "")

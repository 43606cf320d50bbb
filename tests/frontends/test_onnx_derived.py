"""Values computed from the symbolic sizes (``Range(0, seq)``, a slice of a constant to
``seq``, a ``GatherND`` grid over a mask): computed on the host per call, fed as graph inputs,
checked against ONNX's reference evaluator at several sizes; and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_models import Net  # noqa: E402

import vkumd.errors  # noqa: E402
import vkumd.onnx  # noqa: E402
from vkumd.testing.numerics import rel_error  # noqa: E402

RTOL = 1e-5


def _size(n: Net, x: str, axis: int) -> str:
    return n.op("Squeeze", n.op("Shape", x, start=axis, end=axis + 1))


def _positions_and_mask_model() -> onnx.ModelProto:
    """``x + table[0:seq]`` (positions by Range and by a sliced constant) and a key mask
    ``[batch, 1, 1, seq]`` gathered from ``mask`` as torch exports it, applied by Where."""
    n = Net(3)
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 4])
    mask = helper.make_tensor_value_info("mask", T.INT64, ["batch", "seq"])
    table = n.weight(512, 4)
    batch, seq = _size(n, "x", 0), _size(n, "x", 1)
    zero, one = n.init(np.int64(0), "zero"), n.init(np.int64(1), "one")
    by_range = n.op("Gather", table, n.op("Range", zero, seq, one), axis=0)
    ids = n.init(np.arange(512, dtype=np.int64)[None], "position_ids")
    sliced = n.op("Slice", ids, n.init(np.array([0], np.int64)),
                  n.op("Unsqueeze", seq, n.init(np.array([0], np.int64))),
                  n.init(np.array([1], np.int64)))
    h = n.op("Add", n.op("Add", "x", by_range), n.op("Gather", table, sliced, axis=0))
    rows = n.op("Unsqueeze", n.op("Range", zero, batch, one), n.init(np.array([1, 2, 3],
                                                                            np.int64)))
    cols = n.op("Unsqueeze", n.op("Range", zero, seq, one), n.init(np.array([0, 1, 2],
                                                                          np.int64)))
    grid = n.op("Shape", n.op("Add", rows, cols))
    last = n.init(np.array([-1], np.int64))
    index = n.op("Concat", n.op("Unsqueeze", n.op("Expand", rows, grid), last),
                 n.op("Unsqueeze", n.op("Expand", cols, grid), last), axis=-1)
    keep = n.op("GatherND", n.op("Cast", "mask", to=T.BOOL), index)  # [batch, 1, 1, seq]
    # Scaled, so the where fuses into one elementwise kernel (alone it has none yet).
    bias = n.op("Mul", n.op("Where", keep, n.init(np.float32(0.0)), n.init(np.float32(-1e4))),
                n.init(np.float32(0.5)))
    flat = n.op("Reshape", bias, n.op("Concat", n.op("Unsqueeze", batch, n.init(
        np.array([0], np.int64))), n.init(np.array([1], np.int64)), n.op(
        "Unsqueeze", seq, n.init(np.array([0], np.int64))), axis=0))
    out = n.op("MatMul", flat, h)
    return n.model([x, mask], [out, h])


def test_size_derived_values_match_the_reference(ctx: object) -> None:
    model = _positions_and_mask_model()
    loaded = vkumd.onnx.load(model, ctx=ctx)
    assert loaded.input_names == ["x", "mask"]  # the derived inputs are filled, not asked for
    assert loaded.imported.derived
    rng = np.random.default_rng()
    for batch, seq in ((2, 5), (3, 11), (1, 7)):
        x = rng.standard_normal((batch, seq, 4)).astype(np.float32)
        mask = (rng.random((batch, seq)) < 0.7).astype(np.int64)
        mask[:, 0] = 1
        mask[:, -1] = 0  # one masked key at least: an all-ones mask makes the output all zeros
        want = ReferenceEvaluator(model).run(None, {"x": x, "mask": mask})
        got = loaded(x=x, mask=mask)
        for name, w in zip(loaded.output_names, want, strict=True):
            g = got[name].astype(np.float64)
            err = rel_error(g, w, floor=1e-30)
            assert err < RTOL, (name, batch, seq, err)


def test_gather_nd_of_other_indices_is_refused(ctx: object) -> None:
    n = Net()
    data = helper.make_tensor_value_info("data", T.FLOAT, ["batch", 3])
    index = n.init(np.array([[0, 2], [0, 1]], np.int64))  # not every element in order
    model = n.model([data], [n.op("GatherND", "data", index)])
    with pytest.raises(vkumd.onnx.UnsupportedModelError, match="GatherND.*every element"):
        vkumd.onnx.load(model, ctx=ctx)


def test_a_size_expression_that_is_no_symbol_is_refused(ctx: object) -> None:
    # arange(seq - 1) read by a device node: its length is seq - 1, which probing cannot
    # name (only plain symbols are).
    n = Net()
    x = helper.make_tensor_value_info("x", T.FLOAT, ["seq", 4])
    seq = _size(n, "x", 0)
    short = n.op("Sub", seq, n.init(np.int64(1)))
    rows = n.op("Gather", n.weight(8, 4), n.op("Range", n.init(np.int64(0)), short,
                                                 n.init(np.int64(1))), axis=0)
    model = n.model([x], [n.op("Relu", rows)])
    with pytest.raises(vkumd.onnx.UnsupportedModelError, match="not one symbol"):
        vkumd.onnx.load(model, ctx=ctx)
    # The context is still usable afterwards.
    assert ctx.tensor(np.ones(3, np.float32)).numpy().sum() == 3.0


def test_lp_normalization_p3_is_refused(ctx: object) -> None:
    n = Net()
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 4])
    model = n.model([x], [n.op("LpNormalization", "x", axis=-1, p=3)])
    with pytest.raises(vkumd.onnx.UnsupportedModelError, match="p=3"):
        vkumd.onnx.load(model, ctx=ctx)


def test_sizes_past_a_sliced_table_are_refused_per_call(ctx: object) -> None:
    # position_ids[:, 0:seq] of a 120-long table: probed at 101 and 109 it follows seq, but a
    # sequence of 130 would be clamped to 120; the call says so instead of misreading.
    n = Net()
    x = helper.make_tensor_value_info("x", T.FLOAT, ["seq", 4])
    ids = n.init(np.arange(120, dtype=np.int64), "position_ids")
    end = n.op("Unsqueeze", _size(n, "x", 0), n.init(np.array([0], np.int64)))
    sliced = n.op("Slice", ids, n.init(np.array([0], np.int64)), end)
    out = n.op("Add", "x", n.op("Gather", n.weight(120, 4), sliced, axis=0))
    loaded = vkumd.onnx.load(n.model([x], [out]), ctx=ctx)
    with pytest.raises(vkumd.errors.VkumdValueError, match="does not take these sizes"):
        loaded(x=np.ones((130, 4), np.float32))
    x = np.random.default_rng().standard_normal((9, 4)).astype(np.float32)
    want = ReferenceEvaluator(n.model([helper.make_tensor_value_info("x", T.FLOAT, ["seq", 4])],
                                      [out])).run(None, {"x": x})[0]
    np.testing.assert_allclose(loaded(x=x)[loaded.output_names[0]], want, rtol=1e-6)

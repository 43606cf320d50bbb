"""ONNX control flow (If, Scan, Loop) inlined at import time, against ONNX's reference
evaluator on models whose subgraphs read outer values and run device work; conditions and
trip counts fed as graph inputs specialized per value; what cannot be inlined refused with
the reason."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.frontends.onnx import ops_control  # noqa: E402
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError  # noqa: E402

F = np.float32


def info(name: str, elem: int = T.FLOAT, shape: list | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes: list, inputs: list, outputs: list, inits: list | None = None,
          opset: int = 16) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def expected(m: onnx.ModelProto, feeds: dict[str, np.ndarray], runtime: bool) -> list:
    """ONNX's reference evaluator; onnxruntime for Loop (the evaluator concatenates a Loop's
    scan outputs along their first axis, where ONNX stacks them on a new one)."""
    if not runtime:
        return ReferenceEvaluator(m).run(None, feeds)
    ort = pytest.importorskip("onnxruntime", reason="Loop is checked against onnxruntime")
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check(ctx, m: onnx.ModelProto, feeds: dict[str, np.ndarray], runtime: bool = False
          ) -> None:
    want = expected(m, feeds, runtime)
    got = vkumd.onnx.load(m, ctx=ctx)(**feeds)
    for name, w in zip([o.name for o in m.graph.output], want, strict=True):
        assert got[name].shape == np.asarray(w).shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)


def branch(name: str, op: str, out: str) -> onnx.GraphProto:
    """A branch computing ``op(x, x)`` of the outer ``x`` then a tanh."""
    return helper.make_graph([helper.make_node(op, ["x", "x"], [f"{name}_t"]),
                              helper.make_node("Tanh", [f"{name}_t"], [out])],
                             name, [], [info(out)])


def if_model(cond: onnx.TensorProto | None) -> onnx.ModelProto:
    inputs = [info("x", shape=[3, 5])] + ([] if cond is not None else [info("c", T.BOOL, [])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "Add", "ty"),
                              else_branch=branch("else", "Mul", "ey"))]
    return model(nodes, inputs, [info("y")], [cond] if cond is not None else [])


@pytest.mark.parametrize("taken", [True, False])
def test_if_with_a_constant_condition_folds(ctx, taken: bool) -> None:
    x = np.random.default_rng().standard_normal((3, 5)).astype(F)
    check(ctx, if_model(numpy_helper.from_array(np.array(taken), "c")), {"x": x})


def test_if_with_a_condition_input_is_specialized(ctx) -> None:
    m = if_model(None)
    loaded = vkumd.onnx.load(m, ctx=ctx)
    x = np.random.default_rng().standard_normal((3, 5)).astype(F)
    for taken in (True, False, True):
        want = ReferenceEvaluator(m).run(None, {"x": x, "c": np.array(taken)})[0]
        got = loaded(x=x, c=np.array(taken))["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "c" in loaded.specialized_on


def scan_body() -> onnx.GraphProto:
    """state' = state + x_t * w (w an outer value); scan outputs state' and relu(x_t)."""
    nodes = [helper.make_node("Mul", ["x_t", "w"], ["xw"]),
             helper.make_node("Add", ["s_in", "xw"], ["s_out"]),
             helper.make_node("Relu", ["x_t"], ["r_out"]),
             helper.make_node("Identity", ["s_out"], ["s_scan"])]
    return helper.make_graph(nodes, "body", [info("s_in", shape=[4]), info("x_t", shape=[4])],
                             [info("s_out", shape=[4]), info("s_scan", shape=[4]),
                              info("r_out", shape=[4])])


@pytest.mark.parametrize("axes", [
    {},
    {"scan_input_directions": [1], "scan_output_directions": [0, 1]},
    {"scan_input_axes": [1], "scan_output_axes": [1, 0]},
], ids=str)
def test_scan_unrolls(ctx, axes: dict) -> None:
    rng = np.random.default_rng()
    x_shape = [4, 7] if axes.get("scan_input_axes") == [1] else [7, 4]
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "scan", "relus"], body=scan_body(),
                            num_scan_inputs=1, **axes)
    w = numpy_helper.from_array(rng.standard_normal(4).astype(F), "w")
    m = model([node], [info("s0", shape=[4]), info("xs", shape=x_shape)],
              [info("s"), info("scan"), info("relus")], [w])
    s0 = rng.standard_normal(4).astype(F)
    xs = rng.standard_normal(x_shape).astype(F)
    # ONNX's reference evaluator scans forward along axis 0 only: the loop written here.
    steps = np.moveaxis(xs.astype(np.float64), axes.get("scan_input_axes", [0])[0], 0)
    if axes.get("scan_input_directions") == [1]:
        steps = steps[::-1]
    state, scans, relus = s0.astype(np.float64), [], []
    for x_t in steps:
        state = state + x_t * numpy_helper.to_array(w)
        scans.append(state)
        relus.append(np.maximum(x_t, 0))
    out_dirs = axes.get("scan_output_directions", [0, 0])
    out_axes = axes.get("scan_output_axes", [0, 0])
    want = [state] + [np.stack(p[::-1] if d else p, axis=a)
                      for p, d, a in zip((scans, relus), out_dirs, out_axes, strict=True)]
    got = vkumd.onnx.load(m, ctx=ctx)(s0=s0, xs=xs)
    for name, expected in zip(("s", "scan", "relus"), want, strict=True):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


def loop_model(trip: int | None, cond_from_data: bool = False) -> onnx.ModelProto:
    """y' = y * 0.5 + slice of a constant at the iteration; scans y'. The condition is
    passed through, or (``cond_from_data``) computed from y' on the device."""
    table = numpy_helper.from_array(np.arange(30, dtype=F).reshape(10, 3), "table")
    nodes = [helper.make_node("Unsqueeze", ["i", "zero"], ["i1"]),
             helper.make_node("Add", ["i1", "one"], ["i2"]),
             helper.make_node("Slice", ["table", "i1", "i2"], ["row"]),
             helper.make_node("Mul", ["y_in", "half"], ["y_half"]),
             helper.make_node("Add", ["y_half", "row"], ["y_out"]),
             helper.make_node("Identity", ["y_out"], ["y_scan"])]
    if cond_from_data:
        nodes += [helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
                  helper.make_node("Less", ["total", "hundred"], ["c_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    body = helper.make_graph(nodes, "body", [info("i", T.INT64, []), info("c_in", T.BOOL, []),
                                             info("y_in", shape=[1, 3])],
                             [info("c_out", T.BOOL, []), info("y_out", shape=[1, 3]),
                              info("y_scan", shape=[1, 3])])
    consts = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
              numpy_helper.from_array(np.array([1], np.int64), "one"),
              numpy_helper.from_array(np.array(0.5, F), "half"),
              numpy_helper.from_array(np.array(100.0, F), "hundred"),
              numpy_helper.from_array(np.array(True), "cond"), table]
    inputs = [info("y", shape=[1, 3])]
    if trip is None:
        inputs.append(info("m", T.INT64, []))
    else:
        consts.append(numpy_helper.from_array(np.array(trip, np.int64), "m"))
    node = helper.make_node("Loop", ["m", "cond", "y"], ["y_last", "ys"], body=body)
    return model([node], inputs, [info("y_last"), info("ys")], consts)


@pytest.mark.parametrize("trip", [1, 6])
def test_loop_with_a_constant_trip_count_unrolls(ctx, trip: int) -> None:
    y = np.random.default_rng().standard_normal((1, 3)).astype(F)
    check(ctx, loop_model(trip), {"y": y}, runtime=True)


def test_loop_trip_count_input_is_specialized(ctx) -> None:
    m = loop_model(None)
    loaded = vkumd.onnx.load(m, ctx=ctx)
    y = np.random.default_rng().standard_normal((1, 3)).astype(F)
    for trip in (3, 5):
        feeds = {"y": y, "m": np.array(trip, np.int64)}
        want = expected(m, feeds, runtime=True)
        got = loaded(**feeds)
        np.testing.assert_allclose(got["ys"], want[1], rtol=1e-5, atol=1e-6)
        assert got["ys"].shape == (trip, 1, 3)


def test_loop_whose_condition_is_computed_on_the_device_is_refused() -> None:
    with pytest.raises(UnsupportedModelError, match="condition on the device at run time"):
        vkumd.onnx.load(loop_model(4, cond_from_data=True))


def test_scan_over_a_symbolic_length_is_refused() -> None:
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "scan", "relus"], body=scan_body(),
                            num_scan_inputs=1)
    w = numpy_helper.from_array(np.ones(4, F), "w")
    m = model([node], [info("s0", shape=[4]), info("xs", shape=["n", 4])],
              [info("s"), info("scan"), info("relus")], [w])
    with pytest.raises(UnsupportedModelError, match="the scan length is symbolic"):
        vkumd.onnx.load(m)


def test_unrolling_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(ops_control, "MAX_UNROLLED_NODES", 20)
    with pytest.raises(UnsupportedModelError, match="would unroll into"):
        vkumd.onnx.load(loop_model(6))


def test_a_refused_node_inside_a_branch_is_named() -> None:
    then = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["t"])], "then", [],
                             [info("t")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then,
                            else_branch=branch("else", "Mul", "ey"))
    m = model([node], [info("x", shape=[2])], [info("y")],
              [numpy_helper.from_array(np.array(True), "c")])
    with pytest.raises(UnsupportedModelError, match="then_branch's NoSuchOp"):
        vkumd.onnx.load(m)

"""One input-conversion rule (:func:`vkumd.framework.dtypes.host_array`): ``ctx.tensor``,
compiled calls (``vkumd.compile`` and ``CompiledGraph``), the ONNX runner and the torch bridge
refuse the same data with the same words, and nothing is narrowed silently: no float64 or
bool into a float32 input, no float ids truncated to rows, no id past int32 wrapped."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph

TABLE = np.arange(12, dtype=np.float32).reshape(6, 2)
BIG_ID = 2**33 + 1  # wrapped to int32 it is 1, a valid row


def _refusal(call: Any) -> tuple[type, str]:
    with pytest.raises((VkumdTypeError, VkumdValueError)) as info:
        call()
    return info.type, str(info.value)


def _doubled(ctx: Any) -> Any:
    return vkumd.compile(lambda x: x * 2, {"x": ctx.tensor(np.ones(3, np.float32))})


def _rows(ctx: Any) -> Any:
    table = ctx.tensor(TABLE)
    return vkumd.compile(lambda ids: ops.embedding(ids, table),
                         {"ids": ctx.tensor(np.array([0, 1], np.int32))})


@pytest.mark.parametrize("data", [np.ones(3), np.ones(3, np.complex64)],
                         ids=["float64", "complex"])
def test_compiled_call_refuses_what_ctx_tensor_refuses(ctx: Any, data: np.ndarray) -> None:
    kind, message = _refusal(lambda: ctx.tensor(data))
    got_kind, got = _refusal(lambda: _doubled(ctx)(data))
    assert got_kind is kind is VkumdTypeError
    assert got.startswith("input 'x': "), got
    # The same sentence about the data, then each caller's advice.
    assert got.split(";")[0][len("input 'x': "):] == message.split(";")[0][len("ctx.tensor(): "):]


def test_compiled_call_refuses_bool_into_a_float_input(ctx: Any) -> None:
    # ctx.tensor makes a bool tensor of a bool array; a float32 input does not convert it.
    with pytest.raises(VkumdTypeError, match="input 'x': arrays of bool are not converted "
                       "silently; the graph takes float32"):
        _doubled(ctx)(np.ones(3, bool))


def test_compiled_call_refuses_float_ids(ctx: Any) -> None:
    rows = _rows(ctx)
    for ids in (np.array([1.7, 2.2]), np.array([1.0, 2.0], np.float32)):
        with pytest.raises(VkumdTypeError, match="input 'ids': arrays of float.* are not "
                           "converted silently; the graph takes int32"):
            rows(ids)


def test_compiled_call_refuses_ids_past_int32(ctx: Any) -> None:
    rows = _rows(ctx)
    with pytest.raises(VkumdValueError, match=r"input 'ids': .*8589934593.* do not fit in "
                       r"int32 \(-2147483648 to 2147483647\)"):
        rows(np.array([BIG_ID, 0], np.int64))
    # int64 ids that fit are exact, so they are taken.
    np.testing.assert_array_equal(rows(np.array([3, 0], np.int64)).numpy(), TABLE[[3, 0]])


def test_compiled_call_refuses_a_tensor_of_another_dtype(ctx: Any) -> None:
    with pytest.raises(VkumdTypeError, match="input 'x' is float16; the graph takes float32"):
        _doubled(ctx)(ctx.tensor(np.ones(3, np.float16)))


def test_compiled_graph_applies_the_rule_itself(ctx: Any) -> None:
    compiled = _doubled(ctx)
    graph = CompiledGraph(compiled.graph, ctx)
    try:
        name = compiled.graph.inputs[0].name
        with pytest.raises(VkumdTypeError, match=f"input '{name}': arrays of float64 are not "
                           "converted silently"):
            graph(**{name: np.ones(3)})
        with pytest.raises(VkumdTypeError, match=f"input '{name}' is int32; the graph takes"):
            graph(**{name: ctx.tensor(np.ones(3, np.int32))})
        out, = graph(**{name: np.ones(3, np.float32)})
        np.testing.assert_array_equal(out.numpy(), 2.0)
    finally:
        graph.release()


def test_ctx_tensor_never_wraps_or_truncates_into_an_integer_type(ctx: Any) -> None:
    with pytest.raises(VkumdValueError, match="do not fit in int32"):
        ctx.tensor(np.array([BIG_ID]), dtype="int32")
    with pytest.raises(VkumdValueError, match="do not fit in uint8"):
        ctx.tensor(np.array([-1, 3]), dtype="uint8")
    with pytest.raises(VkumdValueError, match="holds whole numbers"):
        ctx.tensor(np.array([1.5]), dtype="int32")
    with pytest.raises(VkumdValueError, match="holds whole numbers"):
        ctx.tensor(np.array([np.nan]), dtype="int8")
    with pytest.raises(VkumdValueError, match="do not fit in int32"):
        ctx.tensor(np.array([np.inf]), dtype="int32")
    t = ctx.tensor(np.array([2.0, -3.0]), dtype="int32")
    np.testing.assert_array_equal(t.numpy(), [2, -3])
    with pytest.raises(VkumdValueError, match="do not fit in int32"):
        t.write(np.array([BIG_ID, 0]))
    np.testing.assert_array_equal(t.numpy(), [2, -3])


def _gather_model() -> Any:
    onnx = pytest.importorskip("onnx", reason="the ONNX runner needs the onnx package")
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    ids = helper.make_tensor_value_info("ids", T.INT64, [2])
    out = helper.make_tensor_value_info("rows", T.FLOAT, [2, 2])
    node = helper.make_node("Gather", ["table", "ids"], ["rows"])
    graph = helper.make_graph([node], "g", [ids], [out],
                              [numpy_helper.from_array(TABLE, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert onnx.checker.check_model(model) is None
    return model


def test_onnx_runner_refuses_as_compiled_calls_do(ctx: Any) -> None:
    model = _gather_model()
    import vkumd.onnx

    loaded = vkumd.onnx.load(model, ctx=ctx)
    with pytest.raises(VkumdValueError, match="input 'ids': .*do not fit in int32"):
        loaded(ids=np.array([BIG_ID, 0], np.int64))
    with pytest.raises(VkumdTypeError, match="input 'ids': arrays of float64 are not "
                       "converted silently"):
        loaded(ids=np.array([1.7, 2.2]))
    got = loaded(ids=np.array([3, 0], np.int64))["rows"]
    np.testing.assert_array_equal(got, TABLE[[3, 0]])


def test_torch_bridge_refuses_ids_past_int32(ctx: Any) -> None:
    torch = pytest.importorskip("torch", reason="the torch bridge needs torch")
    from vkumd.framework.frontends.torch.runner import _to_host

    with pytest.raises(VkumdValueError, match="input 'ids': .*do not fit in int32"):
        _to_host(torch.tensor([BIG_ID, 0]), "ids")
    np.testing.assert_array_equal(_to_host(torch.tensor([3, 0]), "ids"), [3, 0])

"""An op's contract is written once: the eager function refuses what the graph refuses, with
the same message, because both run the op record's rule (eager on concrete shapes, through a
memo of verdicts)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import GraphBuilder, GraphError, GraphTypeError

# The modules, not the functions of the same name that vkumd.framework.ops exports.
matmul_module = importlib.import_module("vkumd.framework.opset.matmul")
attention_module = importlib.import_module("vkumd.framework.opset.attention")

F32 = "float32"
Spec = tuple[tuple[int, ...], str] | None

# (op, input specs in the record's order, attributes): each refused by the rule.
REFUSED: dict[str, tuple[str, list[Spec], dict[str, Any]]] = {
    "matmul inner": ("matmul", [((2, 3), F32), ((4, 2), F32)], {}),
    "matmul inner transposed": ("matmul", [((3, 2), F32), ((2, 4), F32)],
                                {"trans_a": True, "trans_b": True}),
    "matmul dtypes": ("matmul", [((2, 2), F32), ((2, 2), "float16")], {}),
    "matmul int32": ("matmul", [((2, 2), "int32"), ((2, 2), "int32")], {}),
    "matmul bias dtype": ("matmul", [((2, 2), F32), ((2, 2), F32), ((2,), "float16")], {}),
    "matmul bias shape": ("matmul", [((2, 3), F32), ((3, 4), F32), ((3,), F32)], {}),
    "matmul residual shape": ("matmul", [((2, 3), F32), ((3, 4), F32), None, ((4, 2), F32)],
                              {}),
    "matmul batch": ("matmul", [((2, 2, 3), F32), ((3, 3, 2), F32)], {}),
    "matmul 1-D": ("matmul", [((3,), F32), ((3, 2), F32)], {}),
    "matmul int8 alpha": ("matmul", [((2, 2), "int8"), ((2, 2), "int8")], {"alpha": 2.0}),
    "matmul activation": ("matmul", [((2, 2), F32), ((2, 2), F32)], {"activation": "tanh"}),
    "matmul trans_a int": ("matmul", [((2, 2), F32), ((2, 2), F32)], {"trans_a": 1}),
    "matmul alpha inf": ("matmul", [((2, 2), F32), ((2, 2), F32)], {"alpha": float("inf")}),
    "matmul alpha bool": ("matmul", [((2, 2), F32), ((2, 2), F32)], {"alpha": True}),
    "attention 3-D": ("attention", [((2, 4, 8), F32)] * 3, {}),
    "attention 3-D bshd": ("attention", [((2, 4, 8), F32)] * 3, {"layout": "bshd"}),
    "attention int32": ("attention", [((1, 2, 4, 8), "int32")] * 3, {}),
    "attention dtypes": ("attention", [((1, 2, 4, 8), F32)] + [((1, 2, 4, 8), "float16")] * 2,
                         {}),
    "attention heads": ("attention", [((1, 3, 4, 8), F32)] + [((1, 2, 4, 8), F32)] * 2, {}),
    "attention head_dim": ("attention", [((1, 2, 4, 8), F32)] + [((1, 2, 4, 16), F32)] * 2,
                           {}),
    "attention batch": ("attention", [((2, 2, 4, 8), F32)] + [((1, 2, 4, 8), F32)] * 2, {}),
    "attention k v": ("attention", [((1, 2, 4, 8), F32)] * 2 + [((1, 2, 5, 8), F32)], {}),
    "attention lengths dtype": ("attention", [((1, 2, 4, 8), F32)] * 3 + [((1,), F32)], {}),
    "attention lengths shape": ("attention", [((1, 2, 4, 8), F32)] * 3 + [((2,), "int32")],
                                {}),
    "attention mask shape": ("attention", [((1, 2, 4, 8), F32)] * 3 + [None, ((3, 4), F32)],
                             {}),
    "attention mask dtype": ("attention", [((1, 2, 4, 8), F32)] * 3 + [None, ((4,), "int32")],
                             {}),
    "attention layout": ("attention", [((1, 2, 4, 8), F32)] * 3, {"layout": "sbhd"}),
    "attention out_layout": ("attention", [((1, 2, 4, 8), F32)] * 3, {"out_layout": "BHSD"}),
    "attention causal": ("attention", [((1, 2, 4, 8), F32)] * 3, {"causal": "yes"}),
    "attention scale": ("attention", [((1, 2, 4, 8), F32)] * 3, {"scale": float("nan")}),
    "layer_norm int32": ("layer_norm", [((2, 3), "int32")], {}),
    "layer_norm 0-d": ("layer_norm", [((), F32)], {}),
    "layer_norm weight dtype": ("layer_norm", [((2, 3), F32), ((3,), "float16")], {}),
    "layer_norm bias shape": ("layer_norm", [((2, 3), F32), None, ((2,), F32)], {}),
    "layer_norm eps nan": ("layer_norm", [((2, 3), F32)], {"eps": float("nan")}),
    "layer_norm eps inf": ("layer_norm", [((2, 3), F32)], {"eps": float("inf")}),
    "layer_norm eps string": ("layer_norm", [((2, 3), F32)], {"eps": "1e-5"}),
    "rms_norm eps negative": ("rms_norm", [((2, 3), F32)], {"eps": -1.0}),
    "rms_norm weight shape": ("rms_norm", [((2, 3), F32), ((2,), F32)], {}),
    "add_layer_norm residual dtype": ("add_layer_norm", [((2, 3), F32), ((2, 3), "float16")],
                                      {}),
    "add_layer_norm residual shape": ("add_layer_norm", [((2, 3), F32), ((3,), F32)], {}),
    "softmax int32": ("softmax", [((2, 3), "int32")], {}),
    "softmax mask dtype": ("softmax", [((2, 3), F32), ((2, 3), "float16")], {}),
    "softmax mask grows x": ("softmax", [((2, 3), F32), ((4, 2, 3), F32)], {}),
    "softmax mask mismatch": ("softmax", [((2, 3), F32), ((2, 4), F32)], {}),
    "softmax scale string": ("softmax", [((2, 3), F32)], {"scale": "2"}),
    "sum bfloat16 0-d": ("sum", [((), "bfloat16")], {}),
    "sum keepdims int": ("sum", [((2, 3), F32)], {"keepdims": 1}),
    "mean empty rows": ("mean", [((2, 0), F32)], {}),
    "max int32": ("max", [((2, 3), "int32")], {}),
}

# How each op's eager function takes the record's inputs, in the record's order.
_EAGER: dict[str, Any] = {
    "matmul": lambda i, at: ops.matmul(i[0], i[1], bias=i[2], residual=i[3], **at),
    "attention": lambda i, at: ops.attention(i[0], i[1], i[2], key_lengths=i[3],
                                             attn_mask=i[4], **at),
    "layer_norm": lambda i, at: ops.layer_norm(i[0], i[1], i[2], **at),
    "rms_norm": lambda i, at: ops.rms_norm(i[0], i[1], **at),
    "add_layer_norm": lambda i, at: ops.add_layer_norm(i[0], i[1], i[2], i[3], **at),
    "softmax": lambda i, at: ops.softmax(i[0], mask=i[1], **at),
    "sum": lambda i, at: ops.sum(i[0], **at),
    "mean": lambda i, at: ops.mean(i[0], **at),
    "max": lambda i, at: ops.max(i[0], **at),
}
_ARITY = {"matmul": 4, "attention": 5, "layer_norm": 3, "rms_norm": 2, "add_layer_norm": 4,
          "softmax": 2, "sum": 1, "mean": 1, "max": 1}


def _graph_refusal(op: str, specs: list[Spec], attrs: dict[str, Any]) -> GraphError:
    b = GraphBuilder("contract")
    values = [None if s is None else b.input(f"x{i}", s[0], s[1]) for i, s in enumerate(specs)]
    with pytest.raises(GraphError) as info:
        b.op(op, *values, **attrs)
    return info.value


def _eager_refusal(ctx, op: str, specs: list[Spec], attrs: dict[str, Any]) -> Exception:
    tensors = [None if s is None else ctx.zeros(s[0], s[1]) for s in specs]
    tensors += [None] * (_ARITY[op] - len(tensors))
    with pytest.raises((VkumdTypeError, VkumdValueError)) as info:
        _EAGER[op](tensors, attrs)
    return info.value


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_eager_and_graph_refuse_alike(ctx, case: str) -> None:
    op, specs, attrs = REFUSED[case]
    graph = _graph_refusal(op, specs, attrs)
    for _ in range(2):  # a refusal is never remembered: the second call is refused again
        eager = _eager_refusal(ctx, op, specs, attrs)
        assert isinstance(eager, VkumdTypeError) == isinstance(graph, GraphTypeError), (
            eager, graph)
        assert str(eager) == f"{op}: {str(graph).split(': ', 1)[1]}"


def test_remembered_verdicts_tell_bools_from_numbers(ctx) -> None:
    a, b = ctx.zeros((2, 2)), ctx.zeros((2, 2))
    ops.matmul(a, b, trans_a=True, alpha=1.0)
    ops.matmul(a, b, trans_a=False, alpha=1)
    # True == 1 == 1.0 and they hash alike; the memo must not hand 1 the verdict of True.
    with pytest.raises(VkumdTypeError, match="trans_a must be a bool"):
        ops.matmul(a, b, trans_a=1, alpha=1.0)
    with pytest.raises(VkumdTypeError, match="alpha must be a real number"):
        ops.matmul(a, b, alpha=True)
    q = ctx.zeros((1, 2, 4, 8))
    ops.attention(q, q, q, causal=True)
    with pytest.raises(VkumdTypeError, match="causal must be a bool"):
        ops.attention(q, q, q, causal=1)


def test_repeated_calls_are_remembered_and_bounded(ctx, monkeypatch) -> None:
    a, b = ctx.zeros((2, 3)), ctx.zeros((3, 4))
    q = ctx.zeros((1, 2, 4, 8))
    for module, call in ((matmul_module, lambda: ops.matmul(a, b)),
                         (attention_module, lambda: ops.attention(q, q, q))):
        monkeypatch.setattr(module, "_VERDICTS", {})
        call()
        assert len(module._VERDICTS) == 1
        call()
        assert len(module._VERDICTS) == 1
    monkeypatch.setattr("vkumd.framework.ops.contract._KNOWN_VERDICTS", 3)
    for n in range(1, 8):
        ops.matmul(ctx.zeros((n, 3)), b)
        assert len(matmul_module._VERDICTS) <= 3


def test_unhashable_attributes_are_checked_not_remembered(ctx, monkeypatch) -> None:
    monkeypatch.setattr(matmul_module, "_VERDICTS", {})
    a = ctx.zeros((2, 2))
    with pytest.raises(VkumdValueError, match=r"activation=\['relu'\] is unknown"):
        ops.matmul(a, a, activation=["relu"])
    assert not matmul_module._VERDICTS

"""Which FX nodes vkumd takes: the one test the whole-graph check and the partitioner share.

A node is taken when its target has a handler whose check passes, or when it computes a
constant (every tensor it reads is a weight or another constant, and its sizes are static):
those run once, in torch, while the graph is converted (``arange`` for positions, a weight
transposed or sliced), and become weights.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch import fx

# Importing the aten modules registers their handlers.
from vkumd.framework.frontends.torch import (
    aten_activation,  # noqa: F401
    aten_cnn,  # noqa: F401
    aten_index,  # noqa: F401
    aten_layout,  # noqa: F401
    aten_reduce,  # noqa: F401
    aten_rows,  # noqa: F401
    aten_tensor,  # noqa: F401
    aten_vision,  # noqa: F401
)
from vkumd.framework.frontends.torch.aten_map import CHECKS, HANDLERS, MULTI_OUTPUT, meta
from vkumd.framework.frontends.torch.dims import IR_DTYPES, is_static

# Placeholder kinds: a tensor passed on every call, or one read once and kept (parameters,
# buffers, lifted constants).
INPUT = "input"
WEIGHT = "weight"


def _static_meta(node: fx.Node) -> bool:
    val = meta(node)
    if isinstance(val, torch.Tensor):
        return is_static(val.shape)
    if isinstance(val, (tuple, list)):
        return all(not isinstance(v, torch.Tensor) or is_static(v.shape) for v in val)
    return not isinstance(val, torch.SymInt)


def _foldable_target(target: Any) -> bool:
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    # Random ops give a new value per call; in-place ops change their input.
    return (torch.Tag.nondeterministic_seeded not in target.tags
            and not target._schema.is_mutable)


def constant_nodes(gm: fx.GraphModule, kinds: dict[str, str]) -> set[fx.Node]:
    """The nodes whose values are fixed once the weights are: weight placeholders, get_attr,
    and pure static-shaped ops over those only."""
    found: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if kinds.get(node.name) == WEIGHT:
                found.add(node)
        elif node.op == "get_attr":
            found.add(node)
        elif node.op == "call_function" and _foldable_target(node.target):
            if all(n in found for n in node.all_input_nodes) and _static_meta(node):
                found.add(node)
    return found


DATA_DEPENDENT = "its output size depends on the data: runs in torch"
"""Why ``nonzero``, ``unique``, ``masked_select``... stay in torch. Dynamo already breaks the
graph before them unless ``capture_dynamic_output_shape_ops`` is set; then the partitioner
leaves them to torch, whose own kernel is the same synchronisation a vkumd host step is
(``vkumd.ops.nonzero`` and the rest are eager ops; a graph's sizes are fixed before it runs)."""


def _data_dependent(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and (
        torch.Tag.dynamic_output_shape in target.tags)


def refusal(node: fx.Node, constants: set[fx.Node]) -> str | None:
    """Why vkumd does not take ``node`` (a call), or None when it does."""
    if node in constants:
        return None
    if node.op != "call_function":
        return f"{node.op} {node.target}"
    target = node.target
    if target is operator.getitem:
        source = node.args[0]
        if isinstance(source, fx.Node):
            wanted = MULTI_OUTPUT.get(source.target)
            if wanted is not None and node.args[1] not in wanted:
                return f"result {node.args[1]} of {source.target}"
        return None
    if target not in HANDLERS:
        if _data_dependent(target):
            return DATA_DEPENDENT
        return "no vkumd counterpart"
    wanted = MULTI_OUTPUT.get(target)
    if wanted is not None:
        extra = [u for u in node.users if u.target is not operator.getitem
                 or u.args[1] not in wanted]
        if extra:
            return "its other results are used (a training graph)"
    val = meta(node)
    for v in val if isinstance(val, (tuple, list)) else [val]:
        if isinstance(v, torch.Tensor) and v.dtype not in IR_DTYPES:
            return f"computes {v.dtype}"
    check = CHECKS.get(target)
    return check(node) if check is not None else None


def op_name(node: fx.Node) -> str:
    """A node's target as users know it: ``aten.logcumsumexp.default``, ``operator.mul``."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__qualname__", None) or str(target)


def refusals(gm: fx.GraphModule, kinds: dict[str, str]) -> dict[fx.Node, str]:
    """Every call node vkumd does not take, with the reason."""
    constants = constant_nodes(gm, kinds)
    out = {}
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module"):
            why = refusal(node, constants)
            if why is not None:
                out[node] = why
    return out


def describe(refused: Iterable[tuple[fx.Node, str]]) -> str:
    """``aten.logcumsumexp.default (no vkumd counterpart), ...``, one entry per op and reason."""
    seen: dict[str, None] = {}
    for node, why in refused:
        seen[f"{op_name(node)} ({why})"] = None
    return ", ".join(seen)

"""Lowering: each IR op to a call of its ``vkumd.ops`` function, on the one path.

:data:`LOWERINGS` maps an op name to a function ``(node, inputs, outputs) -> None`` that
calls the matching op with ``out=`` the node's output tensor; ``inputs`` has one entry per
declared input (None where an optional input is absent). An op without an entry cannot be
compiled; a new fused op registers one entry here (``LOWERINGS["fused_elementwise"] = ...``).
``reshape`` has no entry: the executor makes its output a view of its input (no launch).

Windows (``slice``, ``split``, ``concat``) lower to :func:`vkumd.ops.slice` and
:func:`vkumd.ops.concat`, the strided copies eager code runs; ``where`` lowers to a
one-step ``fused_elementwise`` program, the generated kernel elementwise fusion also puts
``where`` into. A node the executor cannot record (see :func:`unsupported_reason`) makes
:func:`check_lowerable` raise, so ``vkumd.compile`` runs that graph eagerly instead.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

from vkumd.framework import ops
from vkumd.framework.execute.arena import view
from vkumd.framework.graph.errors import UnsupportedOpError
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.shapes import op_info
from vkumd.framework.tensor import Tensor

Lowering = Callable[[Node, list[Any], list[Tensor]], None]
"""``(node, input tensors, output tensors)``: record the node's launches into the outputs."""

# Ops whose output is its input's bytes under another shape: a view, zero launches.
VIEW_OPS = frozenset({"reshape"})


def attrs_of(node: Node) -> dict[str, Any]:
    """The node's attributes with every default filled in."""
    return op_info(node.op).full_attrs(node.attrs)


def _binary(fn: Callable[..., Tensor]) -> Lowering:
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        fn(ins[0], ins[1], out=outs[0])
    return lower


def _unary(fn: Callable[..., Tensor]) -> Lowering:
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        fn(ins[0], out=outs[0])
    return lower


def _reduce(fn: Callable[..., Tensor]) -> Lowering:
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        fn(ins[0], keepdims=attrs_of(node)["keepdims"], out=outs[0])
    return lower


def _div(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.div(ins[0], ins[1], rounding=attrs_of(node)["rounding"], out=outs[0])


def _scale(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.scale(ins[0], attrs_of(node)["alpha"], out=outs[0])


def _cast(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.cast(ins[0], attrs_of(node)["dtype"], out=outs[0])


def _rows(a: Tensor, b: Tensor, residual: Tensor | None, out: Tensor, trans_a: bool) -> bool:
    """Whether ``a``'s batch can join its rows: a batched ``a`` (not transposed) times one
    2-D matrix shared by the batch is a single GEMM of ``batch * M`` rows."""
    return (a.ndim > 2 and b.ndim == 2 and not trans_a
            and (residual is None or residual.shape == out.shape))


def _matmul(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    a, b, bias, residual = ins
    at = attrs_of(node)
    out = outs[0]
    if _rows(a, b, residual, out, at["trans_a"]):
        # One GEMM, not batch entries of M rows each: short entries leave row tiles part
        # empty (bert.py measured batch entries 1.5x slower for short sentences on lavapipe).
        a = view(a, (a.size // a.shape[-1], a.shape[-1]))
        out = view(out, (out.size // out.shape[-1], out.shape[-1]))
        if residual is not None:
            residual = view(residual, out.shape)
    ops.matmul(a, b, bias=bias, activation=at["activation"], residual=residual,
               alpha=at["alpha"], trans_a=at["trans_a"], trans_b=at["trans_b"], out=out)


def _attention(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    q, k, v, key_lengths, mask = ins
    at = attrs_of(node)
    ops.attention(q, k, v, causal=at["causal"], key_lengths=key_lengths, attn_mask=mask,
                  scale=at["scale"], out=outs[0], layout=at["layout"],
                  out_layout=at["out_layout"])


def _softmax(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    # Shape inference admits only the last axis, which is what the kernel normalises.
    ops.softmax(ins[0], scale=attrs_of(node)["scale"], mask=ins[1], out=outs[0])


def _layer_norm(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.layer_norm(ins[0], ins[1], ins[2], eps=attrs_of(node)["eps"], out=outs[0])


def _rms_norm(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.rms_norm(ins[0], ins[1], eps=attrs_of(node)["eps"], out=outs[0])


def _transpose(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    ops.transpose(ins[0], at["dim0"], at["dim1"], out=outs[0])


def _permute(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.permute(ins[0], attrs_of(node)["dims"], out=outs[0])


def _embedding(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.embedding(ins[0], ins[1], out=outs[0])


def _window(node: Node, x: Tensor) -> tuple[int, int, int, int]:
    """``(axis, start, stop, step)`` of a slice node on ``x``, clamped as Python clamps."""
    at = attrs_of(node)
    axis = at["axis"] % x.ndim
    start, stop, step = builtins.slice(at["start"], at["stop"], at["step"]).indices(
        x.shape[axis])
    return axis, start, max(start, stop), step


def _slice(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    x = ins[0]
    axis, start, stop, step = _window(node, x)
    if step == 1:
        ops.slice(x, [start], [stop], [axis], out=outs[0])
        return
    # Eager only (check_lowerable keeps it out of recordings, whose lowerings may not own
    # temporaries): one unit window per kept index, joined. The copy kernel reads unit
    # steps, so a strided read has no single launch yet.
    picked = [ops.slice(x, [i], [i + 1], [axis]) for i in range(start, stop, step)]
    ops.concat(picked, axis, out=outs[0])


def _concat(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.concat(ins, attrs_of(node)["axis"], out=outs[0])


def _split(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    # ops.split allocates its pieces; the graph's pieces already have their tensors, so
    # each is the same window copy written into its own output.
    x = ins[0]
    axis = attrs_of(node)["axis"] % x.ndim
    start = 0
    for piece in outs:
        stop = start + piece.shape[axis]
        ops.slice(x, [start], [stop], [axis], out=piece)
        start = stop


_WHERE = (("where", 0, 1, 2),)


def _where(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.fused_elementwise(ins, _WHERE, out=outs[0])


def _math(op: str) -> Lowering:
    """exp, sqrt, tanh, erf, sigmoid: no kernel of their own, a one-step generated program
    (what elementwise fusion makes of them inside a chain)."""
    program = ((op, 0),)

    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        ops.fused_elementwise(ins, program, out=outs[0])

    return lower


def _fused_elementwise(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    ops.fused_elementwise(ins, at["program"], dtype=at["dtype"], out=outs[0])


def _add_layer_norm(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    x, residual, weight, bias = ins
    ops.add_layer_norm(x, residual, weight, bias, eps=attrs_of(node)["eps"], out=outs[0])


LOWERINGS: dict[str, Lowering] = {
    "add": _binary(ops.add), "sub": _binary(ops.sub), "mul": _binary(ops.mul), "div": _div,
    "scale": _scale, "cast": _cast,
    "relu": _unary(ops.relu), "gelu": _unary(ops.gelu), "gelu_tanh": _unary(ops.gelu_tanh),
    "silu": _unary(ops.silu),
    "sum": _reduce(ops.sum), "mean": _reduce(ops.mean), "max": _reduce(ops.max),
    "softmax": _softmax, "layer_norm": _layer_norm, "rms_norm": _rms_norm,
    "matmul": _matmul, "attention": _attention,
    "transpose": _transpose, "permute": _permute, "embedding": _embedding,
    "fused_elementwise": _fused_elementwise, "add_layer_norm": _add_layer_norm,
    "slice": _slice, "concat": _concat, "split": _split, "where": _where,
    **{op: _math(op) for op in ("exp", "sqrt", "tanh", "erf", "sigmoid")},
}

# The generated kernel stores floats only (FUSED_OUTPUT_CODES; the framework cannot ask the
# compiler's table at graph level without a context).
_WHERE_RESULTS = ("float32", "float16", "bfloat16")


def unsupported_reason(node: Node) -> str | None:
    """Why ``node``'s op, though it has a lowering, cannot be recorded; None if it can."""
    if node.op == "slice" and attrs_of(node)["step"] != 1:
        return (f"slice with step {attrs_of(node)['step']} has no recorded form yet (the "
                "copy kernel reads unit steps); it runs eagerly")
    if node.op == "where" and node.outputs[0].dtype.name not in _WHERE_RESULTS:
        return (f"where on {node.outputs[0].dtype.name} values has no kernel (the generated "
                f"select stores {', '.join(_WHERE_RESULTS)})")
    return None



def lowering_for(node: Node) -> Lowering:
    """The lowering of ``node``'s op.

    Raises:
        UnsupportedOpError: the op has no lowering; the message names the node and lists the
            ops that have one.
    """
    found = LOWERINGS.get(node.op)
    if found is None:
        raise UnsupportedOpError(
            f"op {node.op!r} has no lowering to vkumd.ops, so the graph cannot be compiled; "
            f"ops with one: {', '.join(sorted(LOWERINGS))} (and reshape, a view). Register "
            "one in vkumd.framework.execute.lower.LOWERINGS", node.describe())
    return found


def check_lowerable(nodes: list[Node]) -> None:
    """Raise :class:`UnsupportedOpError` for the first node without a lowering, or whose
    lowering cannot be recorded (:func:`unsupported_reason`)."""
    for node in nodes:
        if node.op in VIEW_OPS:
            continue
        lowering_for(node)
        reason = unsupported_reason(node)
        if reason is not None:
            raise UnsupportedOpError(reason, node.describe())

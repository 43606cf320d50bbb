"""GEMM epilogue fusion: the ops after a ``matmul`` that its kernel can apply on the way out.

The GEMM computes ``act(alpha * A @ B + bias) + residual``. Walking down from a float
``matmul`` through values with one reader each (no graph outputs), each op joins while the
result stays exactly that form -- the order matters, as in ONNX Runtime's BiasGelu and
MatMul+Add fusions:

* ``scale`` (or ``mul`` by a one-element constant) multiplies ``alpha`` while there is no
  bias, activation or residual yet (``s * (x + bias)`` would need the bias scaled too);
* ``add`` of a 1-D ``[N]`` value is the bias while there is no bias, activation or residual
  yet;
* ``relu``, ``gelu``, ``gelu_tanh``, ``silu`` is the activation while there is none and no
  residual yet;
* ``add`` of a value of the output's shape (or ``[M, N]`` under a batched output) is the
  residual while there is none.

Anything else ends the walk; a ``scale`` after the activation, for instance, stays its own
node (elementwise fusion may take it later). Every joined op keeps the output's shape and
dtype, so the fused ``matmul`` is a drop-in replacement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vkumd.compiler.kernels.limits import ACTIVATIONS as KERNEL_ACTIVATIONS
from vkumd.framework.graph.fusion_rewrite import replace_group, scalar_weight, sole_user
from vkumd.framework.graph.ir import Graph, Node, Value
from vkumd.framework.graph.rules_elementwise import FLOATS

# The activations a GEMM epilogue applies (None, the identity, is no op to absorb).
ACTIVATIONS = tuple(a for a in KERNEL_ACTIVATIONS if a is not None)


@dataclass(frozen=True)
class Epilogue:
    """A matmul's epilogue so far."""

    alpha: float
    bias: Value | None
    activation: str | None
    residual: Value | None

    @property
    def bare(self) -> bool:
        """Nothing but alpha yet."""
        return self.bias is None and self.activation is None and self.residual is None


def _other(node: Node, y: Value) -> Value | None:
    """The operand of binary ``node`` that is not ``y``."""
    a, b = node.inputs[0], node.inputs[1]
    return b if a is y else a


def _absorb(graph: Graph, epilogue: Epilogue, y: Value, user: Node) -> Epilogue | None:
    """``epilogue`` with ``user`` (the one reader of ``y``) folded in, or None."""
    out = user.outputs[0]
    if out.dtype is not y.dtype or not graph.dims.same_shape(out.shape, y.shape):
        return None
    op = user.op
    if op == "scale" and epilogue.bare:
        return replace(epilogue, alpha=epilogue.alpha * float(user.attrs.get("alpha", 1.0)))
    if op == "mul" and epilogue.bare:
        factor = scalar_weight(_other(user, y))
        return None if factor is None else replace(epilogue, alpha=epilogue.alpha * factor)
    if op in ACTIVATIONS and epilogue.activation is None and epilogue.residual is None:
        return replace(epilogue, activation=op)
    if op != "add":
        return None
    v = _other(user, y)
    assert v is not None
    dims = graph.dims
    if epilogue.bare and v.type.ndim == 1 and dims.same(v.shape[0], y.shape[-1]):
        return replace(epilogue, bias=v)
    rows_cols = y.type.ndim > 2 and dims.same_shape(v.shape, y.shape[-2:])
    if epilogue.residual is None and (dims.same_shape(v.shape, y.shape) or rows_cols):
        return replace(epilogue, residual=v)
    return None


def fuse_epilogue(graph: Graph) -> Graph:
    """A copy of ``graph`` where each float ``matmul`` takes the scale, bias, activation and
    residual ops after it that its epilogue computes exactly (see the module docstring).

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for node in list(g.nodes):
        if node.op != "matmul" or node.outputs[0].dtype.name not in FLOATS:
            continue
        attrs = node.attrs
        epilogue = Epilogue(float(attrs.get("alpha", 1.0)), node.inputs[2],
                            attrs.get("activation"), node.inputs[3])
        members, last = [node], node
        while True:
            user = sole_user(g, last.outputs[0])
            grown = None if user is None else _absorb(g, epilogue, last.outputs[0], user)
            if grown is None:
                break
            epilogue, last = grown, user  # type: ignore[assignment]
            members.append(last)
        if len(members) == 1:
            continue
        new_attrs = {k: v for k, v in attrs.items() if k in ("trans_a", "trans_b")}
        new_attrs.update(alpha=epilogue.alpha, activation=epilogue.activation)
        replace_group(g, last, members, "matmul",
                      [node.inputs[0], node.inputs[1], epilogue.bias, epilogue.residual],
                      new_attrs)
    return g

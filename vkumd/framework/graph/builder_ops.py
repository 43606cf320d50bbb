"""The builder's op methods: every registered op is one, mirroring ``vkumd.ops``' signatures.

The ops whose arguments need more than the registry's record says (numbers lifted to
constants, shapes, windows) have a method here; every other op's method comes from its
record (:meth:`OpMethods.__getattr__`). Each method appends one node and returns its output
value. Arguments, defaults and
errors are those of the op of the same name in ``vkumd.ops`` (without ``out=``, which a
graph has no use for); ops vkumd has no kernel for yet (reshape, concat, split, slice,
where, the comparisons) follow numpy. Errors are ``GraphError``/``GraphTypeError`` naming
the node.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError
from vkumd.framework.graph.dims import Dim, as_dim
from vkumd.framework.graph.einsum import einsum_graph
from vkumd.framework.graph.ir import Value
from vkumd.framework.graph.registry import OPS, OpDef


def shape_attr(shape: Iterable[object]) -> tuple[int | Dim, ...]:
    """A reshape target as the IR stores it: ints (``-1`` kept) and Dims."""
    return tuple(d if isinstance(d, int) and d == -1 else as_dim(d) for d in shape)



def _as_float(value: Any) -> Any:
    """A real ``value`` as a float attribute; anything else (a string, a bool, an int past
    float64) as it is, for the op's rule or :func:`~vkumd.framework.graph.registry.check_floats`
    to refuse by name rather than ``float()`` to convert silently or raise untyped."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        try:
            return float(value)
        except OverflowError:
            return value
    if hasattr(value, "__float__") and not isinstance(value, (bool, np.bool_)):
        return float(value)  # a symbolic dimension says here that it has no value yet
    return value

class OpMethods:
    """Mixin of op methods over ``_apply(op, inputs, attrs)`` and ``operand(x, like)``.

    Every method returns the new node's output value and raises, naming the node,
    ``GraphError`` for shapes or attributes its op refuses and ``GraphTypeError`` for
    dtypes; number operands (``b.add(x, 1.0)``) become constants of the other's dtype.
    """

    def _apply(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        # Every registered op without a method of its own (relu, exp, hardswish, ...) is one:
        # its inputs positionally (optional ones also by name), its attributes by name.
        record = OPS.get(name) if not name.startswith("_") else None
        if record is None:
            raise AttributeError(f"{type(self).__name__} has no op or attribute {name!r}")
        return functools.partial(self._registered, record)

    def _registered(self, record: OpDef, *inputs: Value | None, **named: Any) -> Any:
        slots = [n.rstrip("?*") for n in record.inputs]
        given = list(inputs)
        for i, slot in enumerate(slots):
            if slot in named and not record.inputs[i].endswith("*"):
                given += [None] * (i + 1 - len(given))
                given[i] = named.pop(slot)
        return self._apply(record.name, given, named)

    def operand(self, x: object, like: Value) -> Value:
        raise NotImplementedError

    def _pair(self, a: Any, b: Any) -> tuple[Value, Value]:
        if isinstance(a, Value):
            return a, self.operand(b, a)
        if isinstance(b, Value):
            return self.operand(a, b), b
        raise VkumdTypeError(f"at least one operand must be a graph value, got {a!r} and {b!r}")

    # -- linear algebra ----------------------------------------------------------------------

    def matmul(self, a: Value, b: Value, *, bias: Value | None = None,
               activation: str | None = None, residual: Value | None = None,
               alpha: float = 1.0, trans_a: bool = False, trans_b: bool = False) -> Value:
        """``act(alpha * op(a) @ op(b) + bias) + residual`` (as ``vkumd.ops.matmul``).

        Args:
            a: ``[..., M, K]`` (``[..., K, M]`` with ``trans_a``).
            b: ``[K, N]`` (``[N, K]`` with ``trans_b``), shared by a's batch, or with a's
                batch dimensions; either side may be 2-D while the other is batched.
            bias: ``[N]``, added before the activation.
            activation: None, ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or ``"silu"``.
            residual: the output's shape or ``[M, N]``, added after the activation.
            alpha: scales the product.
            trans_a: use a's last two dimensions transposed.
            trans_b: use b's last two dimensions transposed (``x @ W.T``).

        Returns:
            ``batch + [M, N]``, a's dtype (int32 for int8, which takes no epilogue).

        Raises:
            GraphError: inner or batch dimensions that differ, a bias or residual of the
                wrong shape, an unknown activation. GraphTypeError: dtypes that differ.
        """
        return self._apply("matmul", [a, b, bias, residual],
                           {"activation": activation, "alpha": alpha, "trans_a": trans_a,
                            "trans_b": trans_b})

    def attention(self, q: Value, k: Value, v: Value, *, causal: bool = False,
                  key_lengths: Value | None = None, attn_mask: Value | None = None,
                  scale: float | None = None, layout: str = "bhsd",
                  out_layout: str | None = None) -> Value:
        """``softmax(q @ k^T * scale + attn_mask) @ v`` over ``[b, h, s, d]`` (or
        ``[b, s, h, d]`` operands, ``layout="bshd"``).

        Args:
            q: ``[batch, q_heads, q_len, head_dim]``, float32 or float16.
            k: ``[batch, kv_heads, k_len, head_dim]``; kv_heads divides q_heads.
            v: k's shape and dtype.
            causal: mask keys after each query, aligned bottom-right.
            key_lengths: int32 ``[batch]``; keys at or past the length are masked.
            attn_mask: additive, broadcastable to ``[batch, q_heads, q_len, k_len]``.
            scale: multiplies the scores (default ``1 / sqrt(head_dim)``).
            layout: ``"bhsd"`` (the shapes above) or ``"bshd"``: q, k and v are
                ``[batch, seq, heads, head_dim]``; the mask's meaning is unchanged.
            out_layout: the output's layout (None: ``layout``).

        Returns:
            q's dtype; ``[batch, q_heads, q_len, head_dim]`` or in ``out_layout``.

        Raises:
            GraphError: not 4-D, batch/head_dim mismatch, heads not divisible, a bad
                key_lengths or mask. GraphTypeError: dtypes other than float32/float16.
        """
        return self._apply("attention", [q, k, v, key_lengths, attn_mask],
                           {"causal": causal, "scale": scale, "layout": layout,
                            "out_layout": out_layout})

    # -- elementwise -----------------------------------------------------------------------

    def add(self, a: Any, b: Any) -> Value:
        """``a + b`` with numpy broadcasting (a number operand becomes a constant)."""
        return self._apply("add", self._pair(a, b), {})

    def sub(self, a: Any, b: Any) -> Value:
        """``a - b`` with numpy broadcasting."""
        return self._apply("sub", self._pair(a, b), {})

    def mul(self, a: Any, b: Any) -> Value:
        """``a * b`` with numpy broadcasting."""
        return self._apply("mul", self._pair(a, b), {})

    def div(self, a: Any, b: Any, *, rounding: str | None = None) -> Value:
        """``a / b``; ``rounding`` None, ``"floor"`` or ``"trunc"`` (int32 needs one)."""
        return self._apply("div", self._pair(a, b), {"rounding": rounding})

    def compare(self, op: str, a: Any, b: Any) -> Value:
        """``a <op> b`` for op in eq, ne, lt, le, gt, ge: bool, broadcast."""
        return self._apply(op, self._pair(a, b), {})

    def eq(self, a: Any, b: Any) -> Value:
        """``a == b`` as bool."""
        return self.compare("eq", a, b)

    def ne(self, a: Any, b: Any) -> Value:
        """``a != b`` as bool."""
        return self.compare("ne", a, b)

    def lt(self, a: Any, b: Any) -> Value:
        """``a < b`` as bool."""
        return self.compare("lt", a, b)

    def le(self, a: Any, b: Any) -> Value:
        """``a <= b`` as bool."""
        return self.compare("le", a, b)

    def gt(self, a: Any, b: Any) -> Value:
        """``a > b`` as bool."""
        return self.compare("gt", a, b)

    def ge(self, a: Any, b: Any) -> Value:
        """``a >= b`` as bool."""
        return self.compare("ge", a, b)

    def where(self, cond: Value, a: Any, b: Any) -> Value:
        """``a`` where ``cond`` is nonzero, else ``b`` (broadcast over all three)."""
        a, b = self._pair(a, b)
        return self._apply("where", [cond, a, b], {})

    def scale(self, x: Value, alpha: float) -> Value:
        """``x * alpha`` for a real ``alpha``."""
        return self._apply("scale", [x], {"alpha": _as_float(alpha)})

    def cast(self, x: Value, dtype: Any, *, saturate: bool = True, round_mode: str = "up"
             ) -> Value:
        """``x`` converted to ``dtype`` (float32, float16, bfloat16, int32 or a float8 format;
        ``saturate`` clamps what a float8 format cannot hold, as ONNX's Cast)."""
        attrs = {"dtype": dtype, "saturate": bool(saturate)}
        if round_mode != "up":  # float8_e8m0's rounding (vkumd/framework/packed.py)
            attrs["round_mode"] = round_mode
        return self._apply("cast", [x], attrs)

    # -- row-wise --------------------------------------------------------------------------

    def softmax(self, x: Value, *, scale: float | None = None, mask: Value | None = None,
                axis: int = -1) -> Value:
        """``softmax(x * scale + mask)`` over ``axis`` (the last by default).

        Args:
            x: a float tensor, at least 1-D.
            scale: multiplies x before the mask is added (default 1).
            mask: additive, x's dtype, broadcastable to x without growing it (with the last
                axis only).
            axis: the dimension normalised.

        Returns:
            x's shape and dtype.

        Raises:
            GraphError: a mask that does not broadcast. GraphTypeError: non-float x.
        """
        return self._apply("softmax", [x, mask], {"scale": scale, "axis": axis})

    def layer_norm(self, x: Value, weight: Value | None = None, bias: Value | None = None, *,
                   eps: float = 1e-5) -> Value:
        """Layer normalisation over the last axis (biased variance)."""
        return self._apply("layer_norm", [x, weight, bias], {"eps": _as_float(eps)})

    def rms_norm(self, x: Value, weight: Value | None = None, *, eps: float = 1e-6) -> Value:
        """``x / sqrt(mean(x**2) + eps) * weight`` over the last axis."""
        return self._apply("rms_norm", [x, weight], {"eps": _as_float(eps)})

    def sum(self, x: Value, *, dim: Any = -1, keepdims: bool = False) -> Value:
        """The sum over ``dim`` (an axis, a tuple of axes or None: all; default the last)."""
        return self._apply("sum", [x], {"dim": _axes(dim), "keepdims": keepdims})

    def mean(self, x: Value, *, dim: Any = -1, keepdims: bool = False) -> Value:
        """The mean over ``dim`` (an axis, a tuple of axes or None: all; default the last)."""
        return self._apply("mean", [x], {"dim": _axes(dim), "keepdims": keepdims})

    def max(self, x: Value, *, dim: Any = -1, keepdims: bool = False) -> Value:
        """The maximum over ``dim`` (an axis, a tuple of axes or None: all; default the last)."""
        return self._apply("max", [x], {"dim": _axes(dim), "keepdims": keepdims})

    # -- layout ----------------------------------------------------------------------------

    def transpose(self, x: Value, dim0: int, dim1: int) -> Value:
        """``x`` with dimensions ``dim0`` and ``dim1`` swapped."""
        return self._apply("transpose", [x], {"dim0": dim0, "dim1": dim1})

    def permute(self, x: Value, dims: Sequence[int]) -> Value:
        """``x`` with its dimensions reordered (numpy's ``transpose(x, dims)``)."""
        return self._apply("permute", [x], {"dims": tuple(dims)})

    def reshape(self, x: Value, shape: Iterable[object]) -> Value:
        """``x`` viewed as ``shape``.

        Args:
            x: any value (row-major; reshape moves no data).
            shape: ints, at most one ``-1`` (solved from the element count: ``(-1, 384)`` of
                ``[batch, seq, 384]`` is ``[batch*seq, 384]``), symbol names and Dims.

        Returns:
            A value of the new shape and x's dtype.

        Raises:
            GraphError: element counts that differ, or a ``-1`` that cannot be solved.
        """
        return self._apply("reshape", [x], {"shape": shape_attr(shape)})

    def embedding(self, ids: Value, table: Value) -> Value:
        """Rows of ``table`` (``[vocab, dim]``) picked by int32 ``ids``."""
        return self._apply("embedding", [ids, table], {})

    def concat(self, xs: Sequence[Value], axis: int) -> Value:
        """``xs`` joined along ``axis``.

        Args:
            xs: values of one dtype whose shapes agree off ``axis``.
            axis: the axis (negative counts from the end).

        Returns:
            The joined value; its axis is the sum (``past + 1`` for symbolic dims).

        Raises:
            GraphError: shapes that differ off the axis. GraphTypeError: dtypes that differ.
        """
        return self._apply("concat", list(xs), {"axis": axis})

    def einsum(self, equation: str, *xs: Value) -> Value:
        """Einstein summation over ``xs`` (``vkumd.ops.einsum``): sums, permutes, reshapes
        and one matmul per pair of operands (:mod:`vkumd.framework.graph.einsum`)."""
        return einsum_graph(self, equation, xs)

    def split(self, x: Value, sizes: Sequence[object], axis: int) -> tuple[Value, ...]:
        """``x`` cut along ``axis`` into pieces of ``sizes``.

        Args:
            x: the value to cut.
            sizes: the pieces' lengths (ints or symbolic dims) adding up to the axis.
            axis: the axis (negative counts from the end).

        Returns:
            One value per piece.

        Raises:
            GraphError: sizes that do not add up, an axis out of range.
        """
        out = self._apply("split", [x], {"axis": axis,
                                         "sizes": tuple(as_dim(s) for s in sizes)})
        return out if isinstance(out, tuple) else (out,)

    def slice(self, x: Value, axis: int, start: int = 0, stop: int | None = None,
              step: int = 1) -> Value:
        """``x[..., start:stop:step, ...]`` along ``axis``.

        Args:
            x: the value to slice.
            axis: the axis (negative counts from the end).
            start: first index (negative counts from the end).
            stop: end index (None: the axis' end).
            step: >= 1; only 1 along a symbolic axis, where the slice is taken to lie
                inside the axis (it cannot be clamped as numpy clamps).

        Returns:
            The slice.

        Raises:
            GraphError: an axis out of range, a bad step, an empty or reversed slice.
        """
        return self._apply("slice", [x], {"axis": axis, "start": start, "stop": stop,
                                          "step": step})


def _axes(dim: Any) -> Any:
    """A reduction's ``dim`` with a list made a tuple (attributes are hashed)."""
    return tuple(dim) if isinstance(dim, list) else dim

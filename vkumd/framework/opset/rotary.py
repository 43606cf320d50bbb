"""Rotary position embedding (RoPE) with a per-sequence position offset: ``rope``.

``x`` is ``[batch, seq, heads, head_dim]`` (attention's ``layout="bshd"``); token ``s`` of
row ``b`` sits at position ``positions[b] + s``, so one call serves a prefill (``positions``
0, ``seq`` the prompt) and a batched decode step (``seq`` 1, each row at its own length).
Pair ``i`` of every head turns by ``p * theta ** (-2 i / head_dim)`` radians; the pairs are
``(2i, 2i + 1)`` (``pairs="adjacent"``, GGUF and llama.cpp) or ``(i, i + head_dim / 2)``
(``"halves"``, Hugging Face's ``rotate_half``). The kernel reduces the angle exactly before
any float32 rounding (``shaders/rope.comp``), so large positions keep full accuracy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import ROPE_DTYPES, ROPE_PAIRS
from vkumd.compiler.kernels.rope import ROPE_CODES, rope_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, real
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor

# x's type by (x's shape and dtype name, positions' shape and dtype name, theta, pairs).
_VERDICTS: Verdicts = {}


def rope(x: Tensor, positions: Tensor, *, theta: float, pairs: str = "adjacent",
         out: Tensor | None = None) -> Tensor:
    """Rotate pairs of ``x``'s last dimension by their tokens' positions (rotary embedding).

    Token ``s`` of row ``b`` is at position ``positions[b] + s``; pair ``i`` turns by
    ``position * theta ** (-2 i / head_dim)``: ``(x0, x1) -> (x0 cos - x1 sin,
    x0 sin + x1 cos)``. Computed in float32 (angles reduced exactly first, so a position of
    10^6 is as accurate as 0) and rounded once to x's type.

    Args:
        x: ``[batch, seq, heads, head_dim]`` float32, float16 or bfloat16; head_dim even.
        positions: int32 ``[batch]``, the position of each row's first token (negative
            positions turn the other way).
        theta: the frequency base (10000 in Llama 2, 100000 in SmolLM2), finite and > 1.
        pairs: ``"adjacent"`` rotates ``(x[2i], x[2i+1])`` (GGUF, llama.cpp);
            ``"halves"`` rotates ``(x[i], x[i + head_dim/2])`` (Hugging Face).
        out: optional output of x's shape and dtype; may be x itself (in place).

    Returns:
        The rotated tensor.

    Raises:
        VkumdTypeError: x not a float tensor; positions not int32; theta not a number;
            out of another dtype.
        VkumdValueError: x not 4-D or of an odd head_dim; positions not ``[batch]``; theta
            not finite or not above 1; an unknown ``pairs``; out of another shape; tensors of
            other contexts.
    """
    x = check_tensor("rope", x, "x")
    positions = check_tensor("rope", positions, "positions")
    check_context("rope", x, positions, "positions")
    key = (x.shape, x.dtype.name, positions.shape, positions.dtype.name, theta, type(theta),
           pairs)
    known = recall(_VERDICTS, key)
    if known is None:
        concrete_rule("rope", (x, positions), {"theta": theta, "pairs": pairs})
        known = remember(_VERDICTS, key, True)
    if x.dtype.itemsize < 4:
        check_storage("rope", x.dtype, x.context)
    # out may be x (each element is read before it is written), not positions.
    out = output("rope", x.context, out, x.shape, x.dtype, (positions,))
    if out.size == 0:
        return out
    batch, seq, heads, head_dim = x.shape
    plan = rope_plan(x.context.caps, ROPE_CODES[x.dtype.name], batch, seq, heads, head_dim,
                     float(theta), pairs)
    x.context.run(plan, (x, positions, out))
    return out


def _rope_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, positions = ins
    assert x is not None and positions is not None  # required inputs
    if x.dtype.name not in ROPE_DTYPES:
        raise VkumdTypeError(f"rope: x is {x.dtype.name}; rope takes "
                             f"{', '.join(ROPE_DTYPES)} (cast() converts)")
    if x.ndim != 4:
        raise VkumdValueError(f"rope: x has shape {format_shape(x.shape)}; rope takes "
                              "[batch, seq, heads, head_dim] (attention's layout='bshd')")
    if positions.dtype is not dtypes.int32:
        raise VkumdTypeError(f"rope: positions is {positions.dtype.name}; it must be int32 "
                             f"[{x.shape[0]}] (cast() converts)")
    if positions.ndim != 1 or not dims.same(positions.shape[0], x.shape[0]):
        raise VkumdValueError(f"rope: positions has shape {format_shape(positions.shape)}; "
                              f"expected [{x.shape[0]}], the first position of each of x's "
                              "rows")
    check_rotation("rope", dims.resolve(x.shape[3]), attrs["theta"], attrs["pairs"])
    return [x]


def check_rotation(op: str, head_dim: Any, theta: Any, pairs: Any, prefix: str = "") -> None:
    """Refuse an odd head_dim, a theta that is not a finite number above 1 and an unknown pair
    convention (``prefix`` names the attributes: ``kv_write``'s ``rope_theta``)."""
    if isinstance(head_dim, int) and head_dim % 2:
        raise VkumdValueError(f"{op}: head_dim {head_dim} is odd; rotary embedding turns "
                              "pairs of elements, so head_dim must be even")
    value = real(op, theta, f"{prefix}theta")
    if not value > 1.0:
        raise VkumdValueError(f"{op}: {prefix}theta={theta!r}; the frequency base must be "
                              "above 1 (10000 in Llama 2)")
    if pairs not in ROPE_PAIRS:
        raise VkumdValueError(f"{op}: {prefix}pairs={pairs!r}; use "
                              f"{' or '.join(map(repr, ROPE_PAIRS))}")


def rope_reference(x: np.ndarray, positions: np.ndarray, theta: float, pairs: str
                   ) -> np.ndarray:
    """The float64 rotary embedding of ``x[batch, seq, heads, head_dim]``."""
    batch, seq, _, head_dim = x.shape
    half = head_dim // 2
    pos = positions.astype(np.float64)[:, None] + np.arange(seq, dtype=np.float64)[None, :]
    inv_freq = float(theta) ** (-2.0 * np.arange(half, dtype=np.float64) / head_dim)
    angles = pos[:, :, None, None] * inv_freq  # [batch, seq, 1, half]
    cos, sin = np.cos(angles), np.sin(angles)
    if pairs == "adjacent":
        x0, x1 = x[..., 0::2], x[..., 1::2]
    else:
        x0, x1 = x[..., :half], x[..., half:]
    r0, r1 = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    out = np.empty(x.shape, np.float64)
    if pairs == "adjacent":
        out[..., 0::2], out[..., 1::2] = r0, r1
    else:
        out[..., :half], out[..., half:] = r0, r1
    return out


def _rope_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    rope(ins[0], ins[1], theta=at["theta"], pairs=at["pairs"], out=outs[0])


define("rope", ("x", "positions"), {"theta": REQUIRED, "pairs": "adjacent"}, rule=_rope_rule,
       reference=lambda a, attrs, s: [rope_reference(a[0], a[1], attrs["theta"],
                                                     attrs["pairs"])],
       inplace=("x",), lower=_rope_lower, eager=rope)

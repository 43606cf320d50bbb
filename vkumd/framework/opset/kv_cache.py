"""The key/value cache update of a decoder: ``kv_write``, written in place.

``cache`` is ``[slots, max_len, kv_heads, head_dim]`` (attention's ``layout="bshd"`` for
the keys or the values, one slot per sequence); ``new`` is ``[slots, seq, kv_heads,
head_dim]``, the keys or values of each slot's next ``seq`` tokens; token ``s`` of slot
``b`` goes to position ``positions[b] + s``. The op's output IS the cache (its record's
``updates``): in a graph, the executors hand the cache's tensor to the kernel, and a
compiled graph reads and writes a cache passed as a vkumd tensor where it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.compiler.kernels.kv_cache import KV_CACHE_CODES, KV_NEW_CODES, kv_write_plan
from vkumd.compiler.kernels.limits import FLOAT_DTYPES, KV_CACHE_DTYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.rotary import check_rotation, rope_reference
from vkumd.framework.opset.unary import copy
from vkumd.framework.tensor import Tensor

# True by (the three tensors' shapes and dtype names): calls the rule accepted.
_VERDICTS: Verdicts = {}


def kv_write(cache: Tensor, new: Tensor, positions: Tensor, *, rope_theta: float | None = None,
             rope_pairs: str = "adjacent", out: Tensor | None = None) -> Tensor:
    """Write each slot's new keys (or values) into the cache at its position, in place.

    ``cache[b, positions[b] + s] = new[b, s]`` for every slot ``b`` and new token ``s``,
    converted to the cache's type (rounded once). A token whose position is outside
    ``[0, max_len)`` is dropped, never written outside the cache: the positions live on the
    device, where this call cannot see them, so keep ``positions[b] + seq <= max_len``
    yourself (``TextGenerator`` refuses a prompt longer than the context).

    With ``rope_theta``, ``new`` is rotated as it is written: the cache receives
    ``rope(new, positions, theta=rope_theta, pairs=rope_pairs)`` (the keys' rotary embedding),
    and the rotated keys never make a trip to memory. The graph pass ``rope_fusion`` makes
    this of a ``rope`` whose only reader is the write.

    Args:
        cache: ``[slots, max_len, kv_heads, head_dim]``, float32 or float16.
        new: ``[slots, seq, kv_heads, head_dim]``, float32, float16 or bfloat16.
        positions: int32 ``[slots]``: where each slot's first new token goes.
        rope_theta: None, or the rotary frequency base to rotate ``new`` with (finite, > 1;
            head_dim even), as :func:`~vkumd.ops.rope`.
        rope_pairs: ``"adjacent"`` or ``"halves"``, as :func:`~vkumd.ops.rope`.
        out: None (the default) updates ``cache`` itself and returns it. Another tensor of
            the cache's shape and dtype receives a copy of the cache with the update (the
            cache is left as it was): what a graph executor asks for where it cannot give
            the cache's own memory.

    Returns:
        The updated cache (``cache`` itself unless ``out`` is given).

    Raises:
        VkumdTypeError: a cache that is not float32 or float16, a new that is not a float
            tensor, positions not int32, out of another dtype.
        VkumdValueError: tensors that are not 4-D, new's slots, kv_heads or head_dim unlike
            the cache's, positions not ``[slots]``, out of another shape or sharing memory
            with new or positions, tensors of other contexts; with rope_theta, a theta not
            finite or not above 1, an odd head_dim, an unknown rope_pairs.
    """
    cache = check_tensor("kv_write", cache, "cache")
    new = check_tensor("kv_write", new, "new")
    positions = check_tensor("kv_write", positions, "positions")
    check_context("kv_write", cache, new, "new")
    check_context("kv_write", cache, positions, "positions")
    key = (cache.shape, cache.dtype.name, new.shape, new.dtype.name, positions.shape,
           positions.dtype.name, rope_theta, type(rope_theta), rope_pairs)
    if recall(_VERDICTS, key) is None:
        concrete_rule("kv_write", (cache, new, positions),
                      {"rope_theta": rope_theta, "rope_pairs": rope_pairs})
        remember(_VERDICTS, key, True)
    for t in (cache, new):
        if t.dtype.itemsize < 4:
            check_storage("kv_write", t.dtype, t.context)
    if out is None or out is cache:
        target = cache
    else:
        target = output("kv_write", cache.context, out, cache.shape, cache.dtype,
                        (new, positions))
        if target.allocation is not cache.allocation:
            copy(cache, out=target)
    if new.size == 0:
        return target
    slots, max_len, heads, head_dim = cache.shape
    rope = None if rope_theta is None else (float(rope_theta), rope_pairs)
    plan = kv_write_plan(cache.context.caps, KV_CACHE_CODES[cache.dtype.name],
                         KV_NEW_CODES[new.dtype.name], slots, max_len, new.shape[1], heads,
                         head_dim, rope)
    cache.context.run(plan, (target, new, positions))
    return target


def _kv_write_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    cache, new, positions = ins
    assert cache is not None and new is not None and positions is not None  # required
    if cache.dtype.name not in KV_CACHE_DTYPES:
        raise VkumdTypeError(f"kv_write: the cache is {cache.dtype.name}; caches are "
                             f"{' or '.join(KV_CACHE_DTYPES)}")
    if new.dtype.name not in FLOAT_DTYPES:
        raise VkumdTypeError(f"kv_write: new is {new.dtype.name}; it must be one of "
                             f"{', '.join(FLOAT_DTYPES)} (converted to the cache's type)")
    for name, t in (("cache", cache), ("new", new)):
        if t.ndim != 4:
            raise VkumdValueError(f"kv_write: {name} has shape {format_shape(t.shape)}; "
                                  f"expected [slots, {'max_len' if name == 'cache' else 'seq'}"
                                  ", kv_heads, head_dim]")
    for axis, what in ((0, "slots"), (2, "kv_heads"), (3, "head_dim")):
        if not dims.same(cache.shape[axis], new.shape[axis]):
            raise VkumdValueError(f"kv_write: the cache {format_shape(cache.shape)} and new "
                                  f"{format_shape(new.shape)} differ in {what} "
                                  f"({cache.shape[axis]} and {new.shape[axis]}); new must be "
                                  "[slots, seq, kv_heads, head_dim] of the cache's")
    if positions.dtype is not dtypes.int32:
        raise VkumdTypeError(f"kv_write: positions is {positions.dtype.name}; it must be "
                             f"int32 [{cache.shape[0]}] (cast() converts)")
    if positions.ndim != 1 or not dims.same(positions.shape[0], cache.shape[0]):
        raise VkumdValueError(f"kv_write: positions has shape "
                              f"{format_shape(positions.shape)}; expected [{cache.shape[0]}], "
                              "one start position per slot")
    if attrs["rope_theta"] is not None:
        check_rotation("kv_write", dims.resolve(new.shape[3]), attrs["rope_theta"],
                       attrs["rope_pairs"], "rope_")
    return [cache]


def kv_write_reference(cache: np.ndarray, new: np.ndarray, positions: np.ndarray,
                       rope_theta: float | None = None, rope_pairs: str = "adjacent"
                       ) -> np.ndarray:
    """The updated cache in float64 (tokens outside the cache dropped; ``new`` rotated
    first with ``rope_theta``)."""
    if rope_theta is not None:
        new = rope_reference(new, positions, rope_theta, rope_pairs)
    out = np.array(cache, np.float64)
    max_len, seq = cache.shape[1], new.shape[1]
    for b in range(cache.shape[0]):
        for s in range(seq):
            p = int(positions[b]) + s
            if 0 <= p < max_len:
                out[b, p] = new[b, s]
    return out


def _kv_write_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    kv_write(ins[0], ins[1], ins[2], rope_theta=at["rope_theta"], rope_pairs=at["rope_pairs"],
             out=outs[0])


define("kv_write", ("cache", "new", "positions"), {"rope_theta": None, "rope_pairs": "adjacent"},
       rule=_kv_write_rule,
       reference=lambda a, attrs, s: [kv_write_reference(a[0], a[1], a[2], attrs["rope_theta"],
                                                         attrs["rope_pairs"])],
       updates="cache", lower=_kv_write_lower, eager=kv_write)

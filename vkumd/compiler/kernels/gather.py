"""The embedding-lookup kernel, ``shaders/gather.comp``: rows of a table picked by ids.

It copies bits (32- or 16-bit elements, any dtype of that width), one workgroup per picked
row, as wide as the row kernels' (:func:`~vkumd.compiler.kernels.rows.row_layout`).
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels import rows
from vkumd.compiler.kernels.elementwise import storage_widths
from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.rows import PLANS, grid, layout_key
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

GATHER_PUSH = PushLayout("units:u32", "count:u32", "vocab:u32")


def _gather_variants(caps: DeviceCaps) -> list[dict]:
    widths = storage_widths(caps)
    width = rows.row_layout(caps)[WORKGROUP]  # through the module: tests swap it
    return [{"WIDTH": w, "VEC": vec, WORKGROUP: width} for w in widths for vec in (1, 4)]


GATHER = register(Kernel(
    name="gather_rows",
    source="gather.comp",
    buffers=3,
    push=GATHER_PUSH,
    defines={"WIDTH": (32, 16), "VEC": (1, 4)},
    spec_constants={WORKGROUP: 0},
    variants=_gather_variants,
))


def gather_plan(caps: DeviceCaps, width: int, dim: int, count: int, vocab: int
                ) -> FixedLaunch:
    """Rows of a ``(vocab, dim)`` table of ``width``-bit elements picked by ``count`` ids.
    Operands: ids, table, out."""
    return _gather_plan(caps, layout_key(caps), width, dim, count, vocab)


@functools.lru_cache(maxsize=PLANS)
def _gather_plan(caps: DeviceCaps, layout: tuple, width: int, dim: int, count: int,
                 vocab: int) -> FixedLaunch:
    vec = 4 if dim % 4 == 0 else 1
    program = GATHER.specialize({"WIDTH": width, "VEC": vec,
                                 WORKGROUP: dict(layout)[WORKGROUP]})
    return FixedLaunch(program, GATHER_PUSH.pack(dim // vec, count, vocab),
                       grid(caps, count, 1), (2,))

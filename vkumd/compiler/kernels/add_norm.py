"""The residual-add + layer-norm kernel, ``shaders/add_norm.comp``.

A row kernel like ``norm``: one workgroup per row, reducing across its lanes as
:func:`~vkumd.compiler.kernels.rows.row_layout` chooses per device class, ``VEC`` 4
loads when the row length allows.
"""

from __future__ import annotations

from vkumd.compiler.kernels.rows import ROW_TYPES, row_layout
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

# norm.comp's block, declared apart so the two kernels can change independently.
ADD_NORM_PUSH = PushLayout("cols:u32", "rows:u32", "eps:f32", "flags:u32")


def _variants(caps: DeviceCaps) -> list[dict]:
    layout = row_layout(caps)
    types = [t for t in ROW_TYPES if caps.storage_16bit or t == "F32"]
    return [{"DTYPE": t, "VEC": vec, **layout} for t in types for vec in (1, 4)]


ADD_LAYER_NORM = register(Kernel(
    name="add_layer_norm",
    source="add_norm.comp",
    buffers=5,
    push=ADD_NORM_PUSH,
    defines={"DTYPE": ROW_TYPES, "VEC": (1, 4), "SUBGROUP_REDUCE": (0, 1)},
    spec_constants={WORKGROUP: 0},
    variants=_variants,
))

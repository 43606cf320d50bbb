"""Transformer kernels: softmax, layer and RMS norm, reductions, activations, gather, permute.

The row-wise kernels (``softmax``, ``norm``, ``reduce_rows``) give one workgroup to each row
and share ``shaders/include/rows.glsl``. :func:`row_layout` picks how a workgroup reduces
across its lanes, per device class: on a CPU driver such as lavapipe one subgroup per row
(no shared memory, which lavapipe makes slow); on a GPU up to 256 lanes, with subgroup sums
combined through one shared slot per subgroup; without subgroup arithmetic, a shared-memory
tree. ``VEC`` 4 variants load four elements at a time when a row's length allows it.
"""

from __future__ import annotations

from collections.abc import Callable

from vkumd.compiler.kernels.elementwise import storage_widths
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, effective_caps, register
from vkumd.vk.caps import DeviceCaps

# Float element types of the row and activation kernels (elementwise_types.glsl codes), and
# the dtype each stands for.
ROW_TYPES = ("F32", "F16", "BF16")
ROW_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
ROW_OPS = {"layer_norm": 0, "rms_norm": 1}
REDUCE_OPS = {"sum": 0, "mean": 1, "max": 2}
# Leading dimensions softmax's mask indexing takes, and outer dimensions permute's.
SOFTMAX_MAX_LEAD = 5
PERMUTE_MAX_OUTER = 5
SOFTMAX_PUSH = PushLayout("cols:u32", "rows:u32", "scale:f32", "mask_mode:u32", "nlead:u32",
                          "lead:u32[5]", "mstride:u32[5]")
NORM_PUSH = PushLayout("cols:u32", "rows:u32", "eps:f32", "flags:u32")
REDUCE_PUSH = PushLayout("cols:u32", "rows:u32")
ACTIVATION_PUSH = PushLayout("units:u32")
GATHER_PUSH = PushLayout("units:u32", "count:u32", "vocab:u32")
PERMUTE_PUSH = PushLayout("rows:u32", "cols:u32", "inner_stride:u32", "chunks:u32",
                          "nouter:u32", "outer:u32[5]", "outer_stride:u32[5]")
# The shared-memory tree reduces at most this many lanes (rows.glsl ROW_MAX_WORKGROUP).
_MAX_TREE = 256


def _types(caps: DeviceCaps) -> list[str]:
    return [t for t in ROW_TYPES if caps.storage_16bit or t == "F32"]


def _power_of_two_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def row_layout(caps: DeviceCaps) -> dict:
    """The reduction path and workgroup width of the row kernels on ``caps``.

    Returns:
        ``{"SUBGROUP_REDUCE": 0 or 1, WORKGROUP: lanes}``. With subgroups the width keeps
        the subgroup count within one subgroup (rows.glsl combines the per-subgroup partial
        results in a single subgroup), using the smallest subgroup size the driver may pick.
    """
    limit = min(_MAX_TREE, caps.max_workgroup_invocations, caps.max_workgroup_size[0])
    if "subgroup_arithmetic" in effective_caps(caps):
        if caps.device_type == "cpu":
            return {"SUBGROUP_REDUCE": 1, WORKGROUP: caps.subgroup_size}
        smallest = max(1, caps.min_subgroup_size)
        return {"SUBGROUP_REDUCE": 1, WORKGROUP: min(limit, smallest * smallest)}
    width = caps.subgroup_size if caps.device_type == "cpu" else limit
    return {"SUBGROUP_REDUCE": 0, WORKGROUP: _power_of_two_at_most(max(1, min(width, limit)))}


def _row_variants(ops: list[int] | None) -> Callable[[DeviceCaps], list[dict]]:
    """Every dtype and vector width, for each ``OP`` (``None``: the kernel has no ``OP``)."""
    def variants(caps: DeviceCaps) -> list[dict]:
        layout = row_layout(caps)
        out = [{"DTYPE": t, "VEC": vec, **layout} for t in _types(caps) for vec in (1, 4)]
        return out if ops is None else [{**v, "OP": op} for v in out for op in ops]
    return variants


_ROW_DEFINES = {"DTYPE": ROW_TYPES, "VEC": (1, 4), "SUBGROUP_REDUCE": (0, 1)}

SOFTMAX = register(Kernel(
    name="softmax",
    source="softmax.comp",
    buffers=3,
    push=SOFTMAX_PUSH,
    defines=_ROW_DEFINES,
    spec_constants={WORKGROUP: 0},
    variants=_row_variants(None),
))

NORM = register(Kernel(
    name="norm",
    source="norm.comp",
    buffers=4,
    push=NORM_PUSH,
    defines=_ROW_DEFINES,
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=_row_variants(list(ROW_OPS.values())),
))

REDUCE_ROWS = register(Kernel(
    name="reduce_rows",
    source="reduce.comp",
    buffers=2,
    push=REDUCE_PUSH,
    defines=_ROW_DEFINES,
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=_row_variants(list(REDUCE_OPS.values())),
))


def _activation_variants(caps: DeviceCaps) -> list[dict]:
    # Codes 1.. of ACTIVATIONS (0 is the identity, which no op launches).
    return [{"DTYPE": t, "VEC": vec, "ACT": act, WORKGROUP: 64}
            for t in _types(caps) for vec in (1, 4) for act in (1, 2, 3, 4)]


ACTIVATION = register(Kernel(
    name="activation",
    source="activation.comp",
    buffers=2,
    push=ACTIVATION_PUSH,
    defines={"DTYPE": ROW_TYPES, "VEC": (1, 4)},
    spec_constants={WORKGROUP: 0, "ACT": 1},
    variants=_activation_variants,
))


def _gather_variants(caps: DeviceCaps) -> list[dict]:
    widths = storage_widths(caps)
    width = row_layout(caps)[WORKGROUP]
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


def permute_workgroup(caps: DeviceCaps, cols: int) -> int:
    """Lanes per output row of ``permute``: enough for ``cols``, from a subgroup up to 64."""
    width = max(1, caps.subgroup_size)
    while width < min(cols, 64):
        width *= 2
    return min(width, caps.max_workgroup_size[0])


def _permute_variants(caps: DeviceCaps) -> list[dict]:
    widths = storage_widths(caps)
    lanes = sorted({permute_workgroup(caps, cols) for cols in (1, 8, 16, 32, 64)})
    return [{"WIDTH": w, "VEC": v, WORKGROUP: n} for w in widths for v in (1, 4) for n in lanes]


PERMUTE = register(Kernel(
    name="permute",
    source="permute.comp",
    buffers=2,
    push=PERMUTE_PUSH,
    defines={"WIDTH": (32, 16), "VEC": (1, 4)},
    spec_constants={WORKGROUP: 0},
    variants=_permute_variants,
))

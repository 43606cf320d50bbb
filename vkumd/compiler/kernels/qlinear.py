"""The linear quantization kernel, ``shaders/qlinear.comp``: ONNX's QuantizeLinear and
DequantizeLinear, per tensor, per axis or blocked, to and from uint8, int8 and the float8
formats (one element per invocation)."""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import QLINEAR_FLOAT_DTYPES, QLINEAR_QUANT_DTYPES
from vkumd.compiler.kernels.rows import grid
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

QLINEAR_QUANT_CODES = type_codes(QLINEAR_QUANT_DTYPES)
QLINEAR_FLOAT_CODES = type_codes(QLINEAR_FLOAT_DTYPES)
QLINEAR_OPS = {"dequantize": 0, "quantize": 1}
QLINEAR_PUSH = PushLayout("n:u32", "inner:u32", "axis_len:u32", "block:u32", "s_outer:u32",
                          "s_axis:u32", "s_inner:u32", "has_zero:u32", "saturate:u32")
_WORKGROUP = 64


def _variants(caps: DeviceCaps) -> list[dict]:
    if not caps.storage_8bit:
        return []
    floats = [c for c in QLINEAR_FLOAT_CODES.values() if caps.storage_16bit or c == "F32"]
    return [{"OP": op, "QTYPE": q, "FTYPE": f, WORKGROUP: _WORKGROUP}
            for op in QLINEAR_OPS.values() for q in QLINEAR_QUANT_CODES.values() for f in floats]


QLINEAR = register(Kernel(
    name="qlinear",
    source="qlinear.comp",
    buffers=4,
    push=QLINEAR_PUSH,
    defines={"OP": tuple(QLINEAR_OPS.values()), "QTYPE": tuple(QLINEAR_QUANT_CODES.values()),
             "FTYPE": tuple(QLINEAR_FLOAT_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_variants,
))


@functools.lru_cache(maxsize=1024)
def qlinear_plan(caps: DeviceCaps, op: str, qtype: str, ftype: str, words: tuple[int, ...]
                 ) -> FixedLaunch:
    """One launch of ``op`` (``"quantize"``, ``"dequantize"``) for dtype names ``qtype`` and
    ``ftype`` with :data:`QLINEAR_PUSH`'s ``words``. Operands: source, scale, zero point (or
    None), out.

    Raises:
        VkumdValueError: more elements than the device's grid dispatches at once.
    """
    program = QLINEAR.specialize({"OP": QLINEAR_OPS[op], "QTYPE": QLINEAR_QUANT_CODES[qtype],
                                  "FTYPE": QLINEAR_FLOAT_CODES[ftype], WORKGROUP: _WORKGROUP})
    return FixedLaunch(program, QLINEAR_PUSH.pack(*words), grid(caps, words[0], _WORKGROUP),
                       (3,))

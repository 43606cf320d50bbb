"""The recurrent cell kernel, ``shaders/recurrent.comp``: one time step of an LSTM, GRU or
RNN layer's gates and state update, every direction at once.

The GEMMs around it (the input projection of every step, each step's recurrent projection)
are the GEMM family's; :mod:`~vkumd.compiler.kernels.recurrent_plan` strings them together.
"""

from __future__ import annotations

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP
from vkumd.compiler.kernels.limits import RECURRENT_DTYPES
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

RECURRENT_CODES = type_codes(RECURRENT_DTYPES)
RECURRENT_PUSH = PushLayout("seq:u32", "batch:u32", "hidden:u32", "dirs:u32", "step:u32",
                            "reverse:u32", "hr_cols:u32", "flags:u32", "clip:f32")
# The shader's MODE values: an LSTM step; a GRU step with linear_before_reset; the two halves
# of a GRU step without it (r * h_prev, then the rest once (r * h_prev) . Rh^T is known).
# ONNX's simple RNN (one gate).
MODES = {"lstm": 1, "gru_linear": 2, "gru_reset": 3, "gru_cell": 4, "rnn": 5}
# The shader's flag bits.
HAS_BIAS, HAS_PEEPHOLES, HAS_H0, HAS_C0, HAS_HR, INPUT_FORGET, CLIP, HAS_LENS = (
    1 << i for i in range(8))
# RNN's activation of direction d: flags bits ACTIVATION_SHIFT + 2d and the next, by its
# index in RNN_ACTIVATIONS.
ACTIVATION_SHIFT = 8
RNN_ACTIVATIONS = ("tanh", "relu", "sigmoid")


def _variants(caps: DeviceCaps) -> list[dict]:
    codes = [c for c in RECURRENT_CODES.values() if caps.storage_16bit or c == "F32"]
    return [{"DTYPE": c, "MODE": m, WORKGROUP: ELEMENTWISE_WORKGROUP}
            for c in codes for m in MODES.values()]


RECURRENT = register(Kernel(
    name="recurrent",
    source="recurrent.comp",
    buffers=11,
    push=RECURRENT_PUSH,
    defines={"DTYPE": tuple(RECURRENT_CODES.values()), "MODE": tuple(MODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_variants,
))

RECURRENT_MATVEC_PUSH = PushLayout("dirs:u32", "batch:u32", "hidden:u32", "cols:u32",
                                   "r_rows:u32", "row0:u32")
# Lanes per workgroup of the matvec kernel (powers of two: the lanes' sums are a tree).
MATVEC_WIDTHS = (8, 64)


def _matvec_variants(caps: DeviceCaps) -> list[dict]:
    codes = [c for c in RECURRENT_CODES.values() if caps.storage_16bit or c == "F32"]
    return [{"DTYPE": c, WORKGROUP: w} for c in codes for w in MATVEC_WIDTHS]


RECURRENT_MATVEC = register(Kernel(
    name="recurrent_matvec",
    source="recurrent_matvec.comp",
    buffers=3,
    push=RECURRENT_MATVEC_PUSH,
    defines={"DTYPE": tuple(RECURRENT_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_matvec_variants,
))

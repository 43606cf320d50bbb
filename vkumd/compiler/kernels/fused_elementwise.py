"""Generated elementwise kernels: one compute shader per fused program.

A program (the ``program`` attribute of the graph's ``fused_elementwise`` op, documented in
:mod:`vkumd.framework.graph.rules_fused`) is a tuple of SSA steps over ``k`` inputs. From it
:func:`fused_kernel` writes GLSL: one storage buffer per input and one for the result, each
input loaded as float32, the steps as straight-line float32 code, one rounding to the output
type at the store. The indexing is ``elementwise_binary.comp``'s (``n, ndim, shape[6]`` and
per-input broadcast strides, packed by
:func:`~vkumd.compiler.kernels.elementwise_plan.shape_words`), generalised to ``k`` inputs.
The activations are ``activation.glsl``'s and bfloat16 rounding is
``elementwise_types.glsl``'s, so a fused step computes what the eager kernel computes.

The text depends only on the program; element types are defines (``T0`` .. ``T{k-1}`` for
the inputs, ``TOUT`` for the result), so a program makes one :class:`Kernel` (memoised here,
never added to the global registry) and one pipeline per distinct program and dtypes. The
SPIR-V cache keys on the text and the defines. :data:`FUSED_ELEMENTWISE_SAMPLE`, a program
with every step op, is registered so the registry-wide SPIR-V validation and push-layout
tests cover the generator.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from typing import Any

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_MAX_DIMS
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

# Inputs a generated kernel takes. Its push block is 8 + 6 * k words: 224 bytes at 8, within
# the 256 bytes lavapipe, NVIDIA, AMD and Intel drivers offer (the spec's minimum is 128;
# the planner checks the device's limit).
FUSED_MAX_INPUTS = 8
# Type codes: elementwise_types.glsl's, plus the 8-bit integers (defined in the preamble).
FUSED_INPUT_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int32": "I32",
                     "int8": "I8", "uint8": "U8"}
FUSED_OUTPUT_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}

# (GLSL element type, expression turning element `e` into a float) per input type code.
_LOADS = {"F32": ("float", "{e}"), "F16": ("float16_t", "float({e})"),
          "BF16": ("uint16_t", "bf16_to_float(uint({e}))"), "I32": ("int", "float({e})"),
          "I8": ("int8_t", "float(int({e}))"), "U8": ("uint8_t", "float(uint({e}))")}
_STORES = {"F32": ("float", "{v}"), "F16": ("float16_t", "float16_t({v})"),
           "BF16": ("uint16_t", "uint16_t(float_to_bf16({v}))")}
_BINARY = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})",
           "div": "({a} / {b})", "div_floor": "floor({a} / {b})", "div_trunc": "trunc({a} / {b})",
           "eq": "({a} == {b} ? 1.0 : 0.0)", "ne": "({a} != {b} ? 1.0 : 0.0)",
           "lt": "({a} < {b} ? 1.0 : 0.0)", "le": "({a} <= {b} ? 1.0 : 0.0)",
           "gt": "({a} > {b} ? 1.0 : 0.0)", "ge": "({a} >= {b} ? 1.0 : 0.0)"}
# relu as activation.glsl writes it; casts round through the stored type's bits (core GLSL,
# no float16 arithmetic needed).
_UNARY = {"relu": "max({a}, 0.0)", "gelu": "vkumd_gelu({a})",
          "gelu_tanh": "vkumd_gelu_tanh({a})", "silu": "vkumd_silu({a})",
          "exp": "exp({a})", "sqrt": "sqrt({a})", "tanh": "vkumd_tanh({a})",
          "erf": "vkumd_erf_accurate({a})", "sigmoid": "vkumd_sigmoid({a})",
          "cast_float32": "{a}", "cast_float16": "unpackHalf2x16(packHalf2x16(vec2({a}, 0.0))).x",
          "cast_bfloat16": "bf16_to_float(float_to_bf16({a}))"}


def fused_push(inputs: int) -> PushLayout:
    """The push block of a kernel with ``inputs`` inputs: ``n, ndim, shape[6]`` and each
    input's six broadcast strides, one after another."""
    dims = ELEMENTWISE_MAX_DIMS
    return PushLayout("n:u32", "ndim:u32", f"shape:u32[{dims}]", f"stride:u32[{dims * inputs}]")


def _literal(value: float) -> str:
    # The float32 bits, so the constant is exactly what float32(value) is (inf included).
    bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
    return f"uintBitsToFloat(0x{bits:08X}u)"


def _expression(step: Sequence[Any], inputs: int, count: int) -> str:
    """The GLSL expression of one step (operands are earlier ``v`` variables or constants).

    Raises:
        VkumdValueError: an op the generator does not know, or an operand out of range.
    """
    op, args = step[0], list(step[1:])
    names = []
    for a in args:
        if isinstance(a, tuple):
            names.append(_literal(a[1]))
        elif isinstance(a, int) and not isinstance(a, bool) and 0 <= a < inputs + count:
            names.append(f"v{a}")
        elif isinstance(a, str):
            op = f"{op}_{a}"  # div's rounding, cast's target
        else:
            raise VkumdValueError(f"fused_elementwise: step {count} {tuple(step)!r} reads "
                                  f"{a!r}, which is not defined before it")
    if op in _BINARY and len(names) == 2:
        return _BINARY[op].format(a=names[0], b=names[1])
    if op in _UNARY and len(names) == 1:
        return _UNARY[op].format(a=names[0])
    if op == "where" and len(names) == 3:
        return f"({names[0]} != 0.0 ? {names[1]} : {names[2]})"
    raise VkumdValueError(f"fused_elementwise: step {count} {tuple(step)!r} is not one the "
                          "kernel generator knows")


def _buffers(inputs: int) -> list[str]:
    lines = ["#define I8 5", "#define U8 6"]
    for i in range(inputs):
        for n, (code, (elem, load)) in enumerate(_LOADS.items()):
            lines.append(f"#{'if' if n == 0 else 'elif'} T{i} == {code}")
            lines.append(f"layout(std430, binding = {i}) readonly buffer In{i} "
                         f"{{ {elem} x{i}[]; }};")
            lines.append(f"#define LOAD{i}(i) {load.format(e=f'x{i}[i]')}")
        lines += ["#else", f'#error "T{i} must be F32, F16, BF16, I32, I8 or U8"', "#endif"]
    for n, (code, (elem, store)) in enumerate(_STORES.items()):
        lines.append(f"#{'if' if n == 0 else 'elif'} TOUT == {code}")
        lines.append(f"layout(std430, binding = {inputs}) writeonly buffer Out "
                     f"{{ {elem} result[]; }};")
        lines.append(f"#define STORE(v) {store.format(v='(v)')}")
    lines += ["#else", '#error "TOUT must be F32, F16 or BF16"', "#endif"]
    return lines


def generate(program: Sequence[Sequence[Any]], inputs: int) -> str:
    """The GLSL text of ``program`` over ``inputs`` inputs.

    Raises:
        VkumdValueError: no steps, too many inputs, or a step the generator does not know.
    """
    if not program:
        raise VkumdValueError("fused_elementwise: the program has no steps")
    if not 1 <= inputs <= FUSED_MAX_INPUTS:
        raise VkumdValueError(f"fused_elementwise: {inputs} inputs; a generated kernel takes "
                              f"1 to {FUSED_MAX_INPUTS}")
    dims = ELEMENTWISE_MAX_DIMS
    steps = [f"    float v{inputs + k} = {_expression(s, inputs, k)};  // {s[0]}"
             for k, s in enumerate(program)]
    args = ", ".join(f"uint i{i}" for i in range(inputs))
    loads = [f"    float v{i} = LOAD{i}(i{i});" for i in range(inputs)]
    last = inputs + len(program) - 1
    flat = ", ".join("index" for _ in range(inputs))
    two_d = ", ".join(f"row * r{i} + col * c{i}" for i in range(inputs))
    strides = [f"        uint r{i} = pc.ndim == 2u ? pc.stride[{i * dims}] : 0u;\n"
               f"        uint c{i} = pc.stride[{i * dims}u + pc.ndim - 1u];" for i in range(inputs)]
    general = "\n".join(f"            i{i} += coord * pc.stride[{i * dims} + d];"
                        for i in range(inputs))
    zeros = " ".join(f"uint i{i} = 0u;" for i in range(inputs))
    listed = ", ".join(f"i{i}" for i in range(inputs))
    return "\n".join([
        "#version 450",
        "// Generated by vkumd.compiler.kernels.fused_elementwise: out = the program below,",
        "// computed in float32 and rounded once to TOUT; inputs broadcast by strides (0 =",
        "// repeated), as in elementwise_binary.comp.",
        "#extension GL_EXT_shader_explicit_arithmetic_types : require",
        "#extension GL_EXT_shader_16bit_storage : require",
        "#extension GL_EXT_shader_8bit_storage : require",
        '#include "common.glsl"',
        '#include "elementwise_types.glsl"',
        '#include "activation.glsl"',
        "",
        "layout(local_size_x_id = 0) in;",
        *_buffers(inputs),
        "",
        "layout(push_constant) uniform Shape {",
        "    uint n;",
        "    uint ndim;",
        f"    uint shape[{dims}];",
        f"    uint stride[{dims * inputs}];",
        "} pc;",
        "",
        f"void apply(uint index, {args}) {{",
        *loads,
        *steps,
        f"    result[index] = STORE(v{last});",
        "}",
        "",
        "void main() {",
        "    uint step = VKUMD_THREAD_COUNT;",
        "    if (pc.ndim == 0u) {",
        "        for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += step) {",
        f"            apply(index, {flat});",
        "        }",
        "        return;",
        "    }",
        "    if (pc.ndim <= 2u) {",
        "        // Carry (row, column) instead of dividing: CPU drivers scalarise division.",
        "        uint cols = pc.shape[pc.ndim - 1u];",
        *strides,
        "        uint first = VKUMD_FIRST_INDEX;",
        "        uint row = first / cols;",
        "        uint col = first - row * cols;",
        "        uint step_rows = step / cols;",
        "        uint step_cols = step - step_rows * cols;",
        "        for (uint index = first; index < pc.n; index += step) {",
        f"            apply(index, {two_d});",
        "            col += step_cols;",
        "            row += step_rows;",
        "            if (col >= cols) {",
        "                col -= cols;",
        "                row += 1u;",
        "            }",
        "        }",
        "        return;",
        "    }",
        "    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += step) {",
        "        uint rest = index;",
        f"        {zeros}",
        "        for (int d = int(pc.ndim) - 1; d >= 0; --d) {",
        "            uint coord = rest % pc.shape[d];",
        "            rest /= pc.shape[d];",
        general,
        "        }",
        f"        apply(index, {listed});",
        "    }",
        "}",
        "",
    ])


def _digest(program: Sequence[Sequence[Any]], inputs: int) -> str:
    return hashlib.sha256(repr((inputs, tuple(map(tuple, program)))).encode()).hexdigest()[:16]


def _defines(inputs: int) -> dict[str, tuple[str, ...]]:
    types = {f"T{i}": tuple(FUSED_INPUT_CODES.values()) for i in range(inputs)}
    return {**types, "TOUT": tuple(FUSED_OUTPUT_CODES.values())}


@functools.lru_cache(maxsize=1024)
def fused_kernel(program: tuple[tuple[Any, ...], ...], inputs: int) -> Kernel:
    """The generated kernel of ``program`` over ``inputs`` inputs (memoised per program).

    Buffers: the inputs, then the result. Variants: ``T0`` .. ``T{inputs-1}`` and ``TOUT``
    (type codes) and the workgroup width.

    Raises:
        VkumdValueError: see :func:`generate`.
    """
    name = f"fused_elementwise_{_digest(program, inputs)}"
    return Kernel(name=name, source=f"{name}.comp", buffers=inputs + 1,
                  push=fused_push(inputs), defines=_defines(inputs),
                  spec_constants={WORKGROUP: 0}, source_code=generate(program, inputs))


# Every step op once, over two float inputs and a condition.
SAMPLE_PROGRAM = (
    ("add", 0, 1), ("sub", 3, ("const", 0.5)), ("mul", 4, 0), ("div", 5, 1),
    ("div", 6, ("const", 3.0), "floor"), ("div", 7, 1, "trunc"), ("eq", 8, 0), ("ne", 9, 1),
    ("lt", 10, 3), ("le", 11, 4), ("gt", 12, 5), ("ge", 13, 6), ("where", 2, 14, 7),
    ("relu", 15), ("gelu", 16), ("gelu_tanh", 17), ("silu", 18), ("cast", 19, "float16"),
    ("cast", 20, "bfloat16"), ("cast", 21, "float32"), ("add", 22, ("const", float("inf"))),
)


def _sample_variants(caps: DeviceCaps) -> list[dict]:
    wide = ["F32"] + (["F16", "BF16"] if caps.storage_16bit else [])
    conds = ["I32"] + (["I8", "U8"] if caps.storage_8bit else [])
    return [{"TOUT": t, "T0": t, "T1": wide[-1 - i % len(wide)], "T2": conds[i % len(conds)],
             WORKGROUP: 64} for i, t in enumerate(wide)]


FUSED_ELEMENTWISE_SAMPLE = register(Kernel(
    name="fused_elementwise_sample",
    source="fused_elementwise_sample.comp",
    buffers=4,
    push=fused_push(3),
    defines=_defines(3),
    spec_constants={WORKGROUP: 0},
    variants=_sample_variants,
    source_code=generate(SAMPLE_PROGRAM, 3),
))

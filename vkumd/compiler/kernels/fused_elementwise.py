"""Generated elementwise kernels: one compute shader per fused program.

A program (the ``program`` attribute of the graph's ``fused_elementwise`` op, documented in
:mod:`vkumd.framework.graph.fused_program`) is a tuple of SSA steps over ``k`` inputs. From it
:func:`fused_kernel` writes GLSL: one storage buffer per input and one for the result, each
input loaded as float32, the steps as straight-line float32 code, one rounding to the output
type at the store. The indexing is ``elementwise_binary.comp``'s (``n, ndim, shape[6]`` and
per-input broadcast strides, packed by
:func:`~vkumd.compiler.kernels.elementwise_plan.shape_words`), generalised to ``k`` inputs.
The activations are ``activation.glsl``'s and bfloat16 rounding is
``elementwise_types.glsl``'s, so a fused step computes what the eager kernel computes.

The program is one GLSL function, ``compute``, called once per element. The ``VEC 4``
variant also declares every buffer as an array of 4-vectors at the same binding and gives
each invocation four consecutive elements: one vector load per input (or one element for an
input whose bit is set in ``BCAST``: a broadcast along the last dimension), ``compute`` per
component, one vector store; the last ``n % 4`` elements go one per invocation. It serves
contiguous operands (``ndim`` 0), ``ndim`` 1 with strides 0 or 1, and rows a multiple of 4
long (``ndim`` 2); the planner decides when it is valid
(:func:`~vkumd.compiler.kernels.elementwise_vector.vector_layout`). Every type is
vectorised (``vec4``, ``f16vec4``, ``u16vec4`` for bfloat16, ``ivec4``, ``i8vec4``,
``u8vec4`` for uint8 and bool), converted componentwise as the scalar loads and stores convert.

The text depends only on the program; element types are defines (``T0`` .. ``T{k-1}`` for
the inputs, ``TOUT`` for the result), so a program makes one :class:`Kernel` (memoised here,
never added to the global registry) and one pipeline per distinct program and dtypes. The
SPIR-V cache keys on the text and the defines. A step is ``(template, *operands)``: a GLSL
float32 expression over ``{a}``, ``{b}``, ``{c}``, written by the op's declaration
(``vkumd.framework.opset``), so the generator knows no op by name.
:data:`FUSED_ELEMENTWISE_SAMPLE` is registered so the registry-wide SPIR-V validation and
push-layout tests cover the generator.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Sequence
from typing import Any

from vkumd.compiler.kernels.limits import (
    ELEMENTWISE_MAX_DIMS,
    FUSED_INPUT_DTYPES,
    FUSED_MAX_INPUTS,
    FUSED_OUTPUT_DTYPES,
)
from vkumd.compiler.kernels.type_codes import CODE_GLSL, type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

# Type codes: elementwise_types.glsl's.
FUSED_INPUT_CODES = type_codes(FUSED_INPUT_DTYPES)
FUSED_OUTPUT_CODES = type_codes(FUSED_OUTPUT_DTYPES)

# (GLSL element type, expression turning element `e` into a float) per input type code.
_LOADS = {code: (CODE_GLSL[code], load) for code, load in (
    ("F32", "{e}"), ("F16", "float({e})"), ("BF16", "bf16_to_float(uint({e}))"),
    ("I32", "float({e})"), ("I8", "float(int({e}))"), ("U8", "float(uint({e}))"),
    ("BOOL", "float(uint({e}))"))}
_STORES = {code: (CODE_GLSL[code], store) for code, store in (
    ("F32", "{v}"), ("F16", "float16_t({v})"), ("BF16", "uint16_t(float_to_bf16({v}))"))}
# The same per four consecutive elements, for the vectorised variant (VEC == 4): one vector
# load or store, converted componentwise (the same conversions as above, so the same bits).
_LOADS4 = {"F32": ("vec4", "{e}"), "F16": ("f16vec4", "vec4({e})"),
           "BF16": ("u16vec4", "bf16_to_float4(uvec4({e}))"),
           "I32": ("ivec4", "vec4({e})"), "I8": ("i8vec4", "vec4(ivec4({e}))"),
           "U8": ("u8vec4", "vec4(uvec4({e}))"), "BOOL": ("u8vec4", "vec4(uvec4({e}))")}
_STORES4 = {"F32": ("vec4", "{v}"), "F16": ("f16vec4", "f16vec4({v})"),
            "BF16": ("u16vec4", "u16vec4(float_to_bf16_4({v}))")}
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
    """The GLSL expression of one step: its template with ``{a}``, ``{b}``, ``{c}`` replaced by
    its operands (earlier ``v`` variables or float32 constants).

    Raises:
        VkumdValueError: a template that is not a string or names an operand the step lacks,
            or an operand out of range.
    """
    template, args = step[0], list(step[1:])
    names = []
    for a in args:
        if isinstance(a, tuple) and len(a) == 2 and a[0] == "const":
            names.append(_literal(a[1]))
        elif isinstance(a, int) and not isinstance(a, bool) and 0 <= a < inputs + count:
            names.append(f"v{a}")
        else:
            raise VkumdValueError(f"fused_elementwise: step {count} {tuple(step)!r} reads "
                                  f"{a!r}, which is not defined before it")
    try:
        return template.format(**dict(zip("abc", names, strict=False)))
    except (AttributeError, KeyError, IndexError, ValueError):
        raise VkumdValueError(f"fused_elementwise: step {count} {tuple(step)!r} is not a GLSL "
                              "template over its operands {a}, {b}, {c}") from None


def _buffers(inputs: int) -> list[str]:
    # With VEC == 4 each buffer is also declared as an array of 4-vectors at the same binding
    # (an alias): lavapipe turns every per-lane load into a gather, so one vector load per
    # four elements costs far less than four scalar ones.
    lines: list[str] = []
    for i in range(inputs):
        for n, (code, (elem, load)) in enumerate(_LOADS.items()):
            vector, load4 = _LOADS4[code]
            lines.append(f"#{'if' if n == 0 else 'elif'} T{i} == {code}")
            lines.append(f"layout(std430, binding = {i}) readonly buffer In{i} "
                         f"{{ {elem} x{i}[]; }};")
            lines.append(f"#define LOAD{i}(i) {load.format(e=f'x{i}[i]')}")
            lines.append("#if VEC == 4")
            lines.append(f"layout(std430, binding = {i}) readonly buffer In{i}v "
                         f"{{ {vector} x{i}v[]; }};")
            lines.append(f"#define LOAD4_{i}(q) {load4.format(e=f'x{i}v[q]')}")
            lines.append("#endif")
        lines += ["#else", f'#error "T{i} must be F32, F16, BF16, I32, I8, U8 or BOOL"', "#endif"]
    for n, (code, (elem, store)) in enumerate(_STORES.items()):
        vector, store4 = _STORES4[code]
        lines.append(f"#{'if' if n == 0 else 'elif'} TOUT == {code}")
        lines.append(f"layout(std430, binding = {inputs}) writeonly buffer Out "
                     f"{{ {elem} result[]; }};")
        lines.append(f"#define STORE(v) {store.format(v='(v)')}")
        lines.append("#if VEC == 4")
        lines.append(f"layout(std430, binding = {inputs}) writeonly buffer Outv "
                     f"{{ {vector} resultv[]; }};")
        lines.append(f"#define STORE4(v) {store4.format(v='(v)')}")
        lines.append("#endif")
    lines += ["#else", '#error "TOUT must be F32, F16 or BF16"', "#endif"]
    return lines


def _vector_paths(inputs: int) -> list[str]:
    """``main``'s vectorised paths (VEC == 4): each invocation computes four consecutive
    output elements. Input ``i`` with bit ``i`` of ``BCAST`` set is one element per row
    (stride 0 along the last dimension), loaded once and used for all four."""
    dims = ELEMENTWISE_MAX_DIMS

    def arg(i: int, vector: str, scalar: str) -> str:
        return f"BCAST{i}(({scalar}), ({vector}))"

    flat = ", ".join(arg(i, "q", "0u") for i in range(inputs))
    tail = ", ".join(arg(i, "t", "0u") for i in range(inputs))
    rows = ", ".join(arg(i, f"row * (r{i} / 4u) + col", f"row * r{i}") for i in range(inputs))
    strides = [f"        uint r{i} = pc.stride[{i * dims}];" for i in range(inputs)]
    return [
        "#if VEC == 4",
        "    // The planner chose this variant: ndim 0, or ndim 1 with strides 0 and 1 only, or",
        "    // ndim 2 with rows a multiple of 4 long, column strides 0 or 1 and row strides of",
        "    // the vector inputs multiples of 4. Elements past the last full four: one each.",
        "    if (pc.ndim <= 1u) {",
        "        uint quads = pc.n / 4u;",
        "        for (uint q = VKUMD_FIRST_INDEX; q < quads; q += step) {",
        f"            apply4(q, {flat});",
        "        }",
        "        uint t = quads * 4u + VKUMD_FIRST_INDEX;",
        "        if (t < pc.n) {",
        f"            apply(t, {tail});",
        "        }",
        "        return;",
        "    }",
        "    if (pc.ndim == 2u) {",
        "        uint cols = pc.shape[1] / 4u;",
        *strides,
        *_row_walk("q", "pc.n / 4u", f"apply4(q, {rows});"),
        "#endif",
    ]


def _row_walk(counter: str, limit: str, call: str) -> list[str]:
    """The 2-D loop: ``counter`` strides over the invocations up to ``limit`` carrying
    (row, column) instead of dividing (CPU drivers scalarise division); ``cols`` is set."""
    return [
        "        uint first = VKUMD_FIRST_INDEX;",
        "        uint row = first / cols;",
        "        uint col = first - row * cols;",
        "        uint step_rows = step / cols;",
        "        uint step_cols = step - step_rows * cols;",
        f"        for (uint {counter} = first; {counter} < {limit}; {counter} += step) {{",
        f"            {call}",
        "            col += step_cols;",
        "            row += step_rows;",
        "            if (col >= cols) {",
        "                col -= cols;",
        "                row += 1u;",
        "            }",
        "        }",
        "        return;",
        "    }",
    ]


def _vector_apply(inputs: int) -> list[str]:
    """``apply4``: four elements from one vector load per input (or one broadcast element),
    the program per component, one vector store."""
    args = ", ".join(f"uint a{i}" for i in range(inputs))
    loads = [f"    vec4 w{i} = BCAST{i}(vec4(LOAD{i}(a{i})), LOAD4_{i}(a{i}));"
             for i in range(inputs)]
    comps = ", ".join(f"compute({', '.join(f'w{i}.{c}' for i in range(inputs))})"
                      for c in "xyzw")
    bcast = []
    for i in range(inputs):
        bcast += [f"#if (BCAST & {1 << i}) != 0", f"#define BCAST{i}(s, v) s", "#else",
                  f"#define BCAST{i}(s, v) v", "#endif"]
    return ["#if VEC == 4", *bcast,
            f"void apply4(uint q, {args}) {{", *loads,
            f"    resultv[q] = STORE4(vec4({comps}));", "}", "#endif"]


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
    steps = [f"    float v{inputs + k} = {_expression(s, inputs, k)};"
             for k, s in enumerate(program)]
    args = ", ".join(f"uint i{i}" for i in range(inputs))
    params = ", ".join(f"float v{i}" for i in range(inputs))
    loads = ", ".join(f"LOAD{i}(i{i})" for i in range(inputs))
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
        "#ifndef VEC",
        "#define VEC 1",
        "#endif",
        "#ifndef BCAST",
        "#define BCAST 0",
        "#endif",
        *_buffers(inputs),
        "",
        "layout(push_constant) uniform Shape {",
        "    uint n;",
        "    uint ndim;",
        f"    uint shape[{dims}];",
        f"    uint stride[{dims * inputs}];",
        "} pc;",
        "",
        "// The program, shared by the scalar and vector paths (so they compute the same bits).",
        f"float compute({params}) {{",
        *steps,
        f"    return v{last};",
        "}",
        "",
        f"void apply(uint index, {args}) {{",
        f"    result[index] = STORE(compute({loads}));",
        "}",
        "",
        *_vector_apply(inputs),
        "",
        "void main() {",
        "    uint step = VKUMD_THREAD_COUNT;",
        *_vector_paths(inputs),
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
        *_row_walk("index", "pc.n", f"apply(index, {two_d});"),
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


def _defines(inputs: int) -> dict[str, tuple[Any, ...]]:
    types = {f"T{i}": tuple(FUSED_INPUT_CODES.values()) for i in range(inputs)}
    return {**types, "TOUT": tuple(FUSED_OUTPUT_CODES.values()), "VEC": (1, 4),
            "BCAST": tuple(range(1 << inputs))}


@functools.lru_cache(maxsize=1024)
def fused_kernel(program: tuple[tuple[Any, ...], ...], inputs: int) -> Kernel:
    """The generated kernel of ``program`` over ``inputs`` inputs (memoised per program).

    Buffers: the inputs, then the result. Variants: ``T0`` .. ``T{inputs-1}`` and ``TOUT``
    (type codes), ``VEC`` (1, or 4 for four elements per invocation), ``BCAST`` (with
    ``VEC`` 4: a bit per input broadcast along the last dimension) and the workgroup width.

    Raises:
        VkumdValueError: see :func:`generate`.
    """
    name = f"fused_elementwise_{_digest(program, inputs)}"
    return Kernel(name=name, source=f"{name}.comp", buffers=inputs + 1,
                  push=fused_push(inputs), defines=_defines(inputs),
                  spec_constants={WORKGROUP: 0}, source_code=generate(program, inputs))


# Arithmetic, constants (an infinite one too), a select on an integer condition and the
# shared functions of activation.glsl and elementwise_types.glsl, over three inputs: a kernel
# the registry-wide SPIR-V and push-layout checks cover. Each op's own expression is checked
# where the op is declared (tests/framework/test_fused_elementwise.py runs every step op).
SAMPLE_PROGRAM = (
    ("({a} + {b})", 0, 1), ("({a} * {b})", 3, ("const", 0.5)), ("floor({a} / {b})", 4, 1),
    ("({a} < {b} ? 1.0 : 0.0)", 5, 0), ("({a} != 0.0 ? {b} : {c})", 2, 6, 4),
    ("vkumd_gelu({a})", 7), ("vkumd_erf_accurate({a})", 8), ("vkumd_sigmoid({a})", 9),
    ("vkumd_tanh({a})", 10), ("vkumd_silu({a})", 11), ("vkumd_gelu_tanh({a})", 12),
    ("bf16_to_float(float_to_bf16({a}))", 13), ("({a} + {b})", 14, ("const", float("inf"))),
)


def _sample_variants(caps: DeviceCaps) -> list[dict]:
    wide = ["F32"] + (["F16", "BF16"] if caps.storage_16bit else [])
    conds = ["I32"] + (["I8", "U8"] if caps.storage_8bit else [])
    scalar = [{"TOUT": t, "T0": t, "T1": wide[-1 - i % len(wide)], "T2": conds[i % len(conds)],
               WORKGROUP: 64} for i, t in enumerate(wide)]
    # The vector variant with every input type (each vector alias), and with broadcasts.
    vector = [{**v, "VEC": 4, "BCAST": 0 if i % 2 else 5} for i, v in enumerate(scalar)]
    vector += [{"TOUT": "F32", "T0": "I32", "T1": c, "T2": c, "VEC": 4, "BCAST": 2,
                WORKGROUP: 64} for c in conds[1:]]
    return scalar + vector


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

"""The generated elementwise kernel's vector variant against its scalar one, in the same run.

Usage: LP_NUM_THREADS=0 python bench/fused_vec.py [--repeats N] [--only CASE ...] [--json PATH]

Each case runs one generated kernel (``vkumd.ops.fused_elementwise``'s plan) twice over the
same tensors: ``scalar`` is the plan with ``vector=False`` (one element per invocation),
``vec4`` the plan the op picks (four consecutive elements per invocation, one vector load
per input). Cases:

* ``scale``: ``x * 1.5`` over 4M floats;
* ``chain``: bench/graph.py's chain (x*1.5, +0.25, relu, -x, silu, *x, gelu, /3) over 4M
  floats, the program its fusion pass produces;
* ``row``: ``x + b`` with ``x`` 1024 x 4096 and ``b`` a 4096-long row (the 2-D path), fused
  and with the eager kernel (``elementwise_binary.comp``);
* ``add``: ``a + b`` over 4M floats, fused and eager: ``eager scalar`` is ``binary_plan``
  with ``vector=False``, ``eager vec4`` is ``vkumd.ops.add`` itself (which picks the vector
  variant);
* ``scalar+``: ``x + 2.0`` over 4M floats, eager (a broadcast one-element operand);
* ``cast``: 4M floats to float16, the eager unary kernel (``elementwise_unary.comp``),
  ``unary_plan`` with ``vector=False`` and as the planner picks;
* ``act``: the eager activation kernels (``vkumd.ops.gelu``, ``gelu_tanh``, ``silu``) and
  the fused one-step ``sigmoid``, 4M floats each; no scalar/vector pair;
* ``sigmoid``, ``silu``, ``gelu_tanh``, ``gelu``: a vec4 kernel applying the activation as
  ``activation.glsl`` writes it (``one division``) against the forms it had until
  2026-12-01 (``two divisions``, :data:`TWO_DIVISION_FORMS`, whose bits
  tests/framework/test_activation_bits.py proves equal), 4M floats.

Times: process CPU time of a dispatch and its wait with ``LP_NUM_THREADS=0`` (lavapipe then
runs on one thread, and CPU time does not grow when other processes share the cores), wall
time otherwise. Paths alternate within each repeat, so drift hits both; the table gives
medians, ranges (min-max) and the ratio of medians to the case's first path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

import vkumd
from vkumd import ops
from vkumd.compiler.kernels.elementwise_plan import (
    ELEMENTWISE_WORKGROUP,
    FixedLaunch,
    binary_plan,
    looped_grid,
    unary_plan,
)
from vkumd.compiler.kernels.fused_elementwise import FUSED_INPUT_CODES, FUSED_OUTPUT_CODES
from vkumd.compiler.kernels.fused_elementwise_plan import fused_elementwise_plan
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel

N = 1 << 22
# activation.glsl's selects until 2026-12-01: each arm its own quotient (or product); gelu's
# erfc is today's, as the selects are what is compared.
TWO_DIVISION_FORMS = """
float old_sigmoid(float x) {
    float e = exp(-abs(x));
    return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
float old_silu(float x) {
    float e = exp(-abs(x));
    float sig = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    return x * sig;
}
float old_gelu_tanh(float x) {
    float u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
    float e = exp(-2.0 * abs(u));
    return u >= 0.0 ? x / (1.0 + e) : x * e / (1.0 + e);
}
float old_gelu(float x) {
    float c = vkumd_erfc_nonneg_scaled(abs(x));
    return x >= 0.0 ? 0.5 * x * (2.0 - c) : 0.5 * x * c;
}
"""
FORMS = ("sigmoid", "silu", "gelu_tanh", "gelu")
FORMS_PUSH = PushLayout("quads:u32")
FORMS_KERNEL = Kernel(
    name="bench_activation_forms", source="bench_activation_forms.comp", buffers=2,
    push=FORMS_PUSH, defines={"ACT": FORMS, "OLD": (0, 1)}, spec_constants={WORKGROUP: 0},
    source_code="\n".join([
        "#version 450", '#include "common.glsl"', '#include "activation.glsl"',
        "layout(local_size_x_id = 0) in;",
        "layout(std430, binding = 0) readonly buffer In { vec4 x[]; };",
        "layout(std430, binding = 1) writeonly buffer Out { vec4 r[]; };",
        "layout(push_constant) uniform P { uint quads; } pc;", TWO_DIVISION_FORMS,
        "#define PASTE2(a, b) a##b", "#define PASTE(a, b) PASTE2(a, b)",
        "#if OLD == 1", "#define F(v) PASTE(old_, ACT)(v)", "#else",
        "#define F(v) PASTE(vkumd_, ACT)(v)", "#endif",
        "void main() {",
        "    for (uint q = VKUMD_FIRST_INDEX; q < pc.quads; q += VKUMD_THREAD_COUNT) {",
        "        vec4 a = x[q];",
        "        r[q] = vec4(F(a.x), F(a.y), F(a.z), F(a.w));",
        "    }", "}", ""]))
CHAIN = (("mul", 0, ("const", 1.5)), ("add", 1, ("const", 0.25)), ("relu", 2), ("sub", 3, 0),
         ("silu", 4), ("mul", 5, 0), ("gelu", 6), ("div", 7, ("const", 3.0)))
CASES = ("scale", "chain", "row", "add", "scalar+", "cast", "act", *FORMS)


def _clock() -> Callable[[], float]:
    return time.process_time if os.environ.get("LP_NUM_THREADS") == "0" else time.perf_counter


def _fused(ctx: vkumd.Context, inputs: list[vkumd.Tensor], program: tuple, out: vkumd.Tensor,
           vector: bool) -> Callable[[], None]:
    plan = fused_elementwise_plan(ctx.caps, program,
                                  tuple(FUSED_INPUT_CODES[t.dtype.name] for t in inputs),
                                  FUSED_OUTPUT_CODES[out.dtype.name],
                                  tuple(t.shape for t in inputs), out.shape, vector)
    stream = ctx.current_stream()

    def run() -> None:
        ctx.run(plan, (*inputs, out))
        stream.synchronize()
    return run


def _binary(ctx: vkumd.Context, a: vkumd.Tensor, b: vkumd.Tensor, out: vkumd.Tensor,
            vector: bool) -> Callable[[], None]:
    """The eager ``a + b`` kernel's plan, scalar or the variant the planner picks."""
    plan = binary_plan(ctx.caps, "add", "F32", a.shape, b.shape, out.shape, vector)
    stream = ctx.current_stream()

    def run() -> None:
        ctx.run(plan, (a, b, out))
        stream.synchronize()
    return run


def _form(ctx: vkumd.Context, act: str, old: int, x: vkumd.Tensor, out: vkumd.Tensor
          ) -> Callable[[], None]:
    # ACT and OLD pick the function through the preprocessor: F is old_ACT or vkumd_ACT.
    variant = FORMS_KERNEL.specialize({"ACT": act, "OLD": old, WORKGROUP: ELEMENTWISE_WORKGROUP})
    quads = x.size // 4
    plan = FixedLaunch(variant, FORMS_PUSH.pack(quads),
                       looped_grid(ctx.caps, -(-quads // ELEMENTWISE_WORKGROUP)), (1,))
    stream = ctx.current_stream()

    def run() -> None:
        ctx.run(plan, (x, out))
        stream.synchronize()
    return run


def _paths(ctx: vkumd.Context, case: str, rng: np.random.Generator
           ) -> dict[str, Callable[[], None]]:
    def tensor(*shape: int) -> vkumd.Tensor:
        return ctx.tensor(rng.standard_normal(shape).astype(np.float32))

    x = tensor(N)
    out = ctx.empty((N,), "float32")
    if case in FORMS:
        return {label: _form(ctx, case, old, x, out)
                for label, old in (("two divisions", 1), ("one division", 0))}
    if case in ("scale", "chain"):
        program = (("mul", 0, ("const", 1.5)),) if case == "scale" else CHAIN
        return {"scalar": _fused(ctx, [x], program, out, False),
                "vec4": _fused(ctx, [x], program, out, True)}
    if case == "row":
        a, b, wide = tensor(1024, 4096), tensor(4096), ctx.empty((1024, 4096), "float32")
        return {"scalar": _fused(ctx, [a, b], (("add", 0, 1),), wide, False),
                "vec4": _fused(ctx, [a, b], (("add", 0, 1),), wide, True),
                "eager scalar": _binary(ctx, a, b, wide, False),
                "eager vec4": _binary(ctx, a, b, wide, True)}
    stream = ctx.current_stream()
    if case == "add":
        y = tensor(N)

        def eager() -> None:
            ops.add(x, y, out=out)
            stream.synchronize()
        return {"eager scalar": _binary(ctx, x, y, out, False), "eager vec4": eager,
                "scalar": _fused(ctx, [x, y], (("add", 0, 1),), out, False),
                "vec4": _fused(ctx, [x, y], (("add", 0, 1),), out, True)}
    if case == "cast":
        half = ctx.empty((N,), "float16")

        def cast(vector: bool) -> Callable[[], None]:
            plan = unary_plan(ctx.caps, "convert", "F32", "F16", x.shape, half.shape, 0, vector)

            def run() -> None:
                ctx.run(plan, (x, half))
                stream.synchronize()
            return run
        return {"eager scalar": cast(False), "eager vec4": cast(True)}
    if case == "scalar+":
        two = ctx.tensor(np.float32(2.0))
        return {"eager scalar": _binary(ctx, x, two, out, False),
                "eager vec4": _binary(ctx, x, two, out, True)}

    def eager_op(name: str) -> Callable[[], None]:
        def run() -> None:
            getattr(ops, name)(x, out=out)
            stream.synchronize()
        return run
    paths = {name: eager_op(name) for name in ("gelu", "gelu_tanh", "silu")}
    paths["fused sigmoid"] = _fused(ctx, [x], (("sigmoid", 0),), out, True)
    return paths


def measure(ctx: vkumd.Context, case: str, repeats: int) -> dict[str, dict]:
    """Per path of ``case``: median, min and max milliseconds over ``repeats`` rounds."""
    paths = _paths(ctx, case, np.random.default_rng(0))
    for run in paths.values():
        run()  # pipelines compiled before anything is timed
    clock = _clock()
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, run in paths.items():
            start = clock()
            run()
            samples[name].append((clock() - start) * 1e3)
    return {name: {"median": statistics.median(s), "min": min(s), "max": max(s)}
            for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", nargs="*", choices=CASES, default=list(CASES))
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    ctx = vkumd.Context()
    clock = "process CPU" if _clock() is time.process_time else "wall"
    print(f"device: {ctx.caps.name}; {args.repeats} alternating repeats; {clock} ms as "
          "median [min-max]; ratio = the case's first path / this path (medians)")
    print(f"{'case':<7} {'path':<14} {'ms':>22} {'ratio':>7}")
    report = {}
    for case in args.only:
        rows = measure(ctx, case, args.repeats)
        first = next(iter(rows.values()))["median"]
        for name, r in rows.items():
            spread = f"{r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]"
            print(f"{case:<7} {name:<14} {spread:>22} {first / r['median']:>6.2f}x")
        report[case] = rows
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"lp_num_threads": os.environ.get("LP_NUM_THREADS"), "cases": report},
                      fh, indent=2)
    ctx.close()


if __name__ == "__main__":
    main()

"""Where kernel compile time goes: glslang, the SPIR-V cache, pipeline creation, first dispatch.

Per kernel (all its variants together):

* ``cold``: GLSL -> SPIR-V through glslang into a fresh, empty cache directory;
* ``memory`` / ``disk``: the same lookups answered by the in-memory dict, then by a new
  :class:`SpirvCache` reading the disk entries;
* ``pipe``/``pipe+pc``: ``vkCreateComputePipelines`` with no pipeline cache, then with a
  :class:`PipelineCache` warmed by creating the same pipelines once (device-usable kernels only).

Then the driver's own compile at the first dispatch of ``vkumd.framework.ops.add``, run in a
fresh process per repeat, with ``MESA_SHADER_CACHE_DISABLE=true`` (cold) and with a warmed
Mesa shader cache. Medians over ``--repeats``. Usage::

    python bench/compile.py [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("VKUMD_VALIDATION", "0")

from vkumd.compiler.kernels import WORKGROUP  # noqa: E402 - registers the shipped kernels
from vkumd.compiler.pipeline_cache import PipelineCache  # noqa: E402
from vkumd.compiler.program import LayoutSignature, Program  # noqa: E402
from vkumd.compiler.registry import KERNELS, Kernel  # noqa: E402
from vkumd.compiler.spirv_cache import SpirvCache  # noqa: E402
from vkumd.runtime.context import RuntimeContext  # noqa: E402
from vkumd.vk.binding import NULL  # noqa: E402
from vkumd.vk.caps import CoopMatShape, DeviceCaps  # noqa: E402

_FIRST_DISPATCH = r"""
import json, time
import numpy as np
import vkumd
from vkumd.framework.ops import add
t0 = time.perf_counter()
ctx = vkumd.Context(validation=False)
a = ctx.tensor(np.ones(4096, dtype=np.float32))
t1 = time.perf_counter()
add(a, a).numpy()
t2 = time.perf_counter()
add(a, a).numpy()
t3 = time.perf_counter()
ctx.close()
print(json.dumps({"startup": t1 - t0, "first": t2 - t1, "second": t3 - t2}))
"""


def _median(run: Callable[[], float], repeats: int) -> float:
    return statistics.median(run() for _ in range(repeats))


def _all_caps(caps: DeviceCaps) -> DeviceCaps:
    """``caps`` with every capability, so glslang timings cover every variant."""
    shapes = tuple(CoopMatShape(m=s, n=s, k=s, a_type="float16", b_type="float16",
                                c_type="float32", result_type="float32", scope="subgroup")
                   for s in (8, 16))
    return dataclasses.replace(caps, cooperative_matrix=True, cooperative_matrix_shapes=shapes,
                               shader_float16=True, storage_16bit=True, shader_int8=True,
                               storage_8bit=True)


def _define_sets(kernel: Kernel, caps: DeviceCaps) -> list[dict]:
    found: dict[tuple, dict] = {}
    for variant in kernel.variants(caps):
        defines = {k: v for k, v in variant.items() if k in kernel.defines}
        found[tuple(sorted((k, str(v)) for k, v in defines.items()))] = defines
    return list(found.values())


def _spirv_times(kernel: Kernel, define_sets: list[dict], repeats: int) -> dict[str, float]:
    source = kernel.source_text()

    def compile_all(cache: SpirvCache) -> float:
        start = time.perf_counter()
        for defines in define_sets:
            cache.get_or_compile(source, name=kernel.source, defines=defines)
        return time.perf_counter() - start

    cold, memory, disk = [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="vkumd-bench-") as directory:
            first = SpirvCache(Path(directory), disk=True)
            cold.append(compile_all(first))
            memory.append(compile_all(first))
            disk.append(compile_all(SpirvCache(Path(directory), disk=True)))
    return {"cold": statistics.median(cold), "memory": statistics.median(memory),
            "disk": statistics.median(disk)}


def _pipeline_times(context: RuntimeContext, kernel: Kernel, spirv_cache: SpirvCache,
                    repeats: int, scratch: Path) -> dict[str, float]:
    registry = context.kernels
    layout = registry.layouts.get(LayoutSignature(kernel.buffers, kernel.push_bytes,
                                                  registry.push_descriptors))
    source = kernel.source_text()
    jobs = []
    for variant in kernel.variants(context.caps):
        defines = {k: v for k, v in variant.items() if k in kernel.defines}
        spec = {kernel.spec_constants[k]: int(v) for k, v in variant.items()
                if k in kernel.spec_constants}
        jobs.append((spirv_cache.get_or_compile(source, name=kernel.source, defines=defines),
                     spec))

    def create_all(cache_handle: object) -> float:
        start = time.perf_counter()
        programs = [Program(context.device.handle, spirv, layout, pipeline_cache=cache_handle,
                            specialization=spec, name=kernel.name) for spirv, spec in jobs]
        elapsed = time.perf_counter() - start
        for program in programs:
            program.release()
        return elapsed

    without = _median(lambda: create_all(NULL), repeats)
    cache = PipelineCache(context.device.handle, context.caps, path=scratch / "pc.bin")
    try:
        create_all(cache.handle)  # warm it
        with_cache = _median(lambda: create_all(cache.handle), repeats)
        cache_bytes = len(cache.data())
    finally:
        cache.release()
    return {"pipelines": len(jobs), "pipe": without, "pipe_pc": with_cache,
            "pipeline_cache_bytes": cache_bytes}


def _first_dispatch(repeats: int, scratch: Path) -> dict[str, dict[str, float]]:
    base = dict(os.environ, VKUMD_CACHE_DIR=str(scratch / "vkumd-cache"),
                MESA_SHADER_CACHE_DIR=str(scratch / "mesa-cache"), VKUMD_VALIDATION="0")
    base.pop("MESA_SHADER_CACHE_DISABLE", None)

    def run(env: dict[str, str]) -> dict[str, float]:
        done = subprocess.run([sys.executable, "-c", _FIRST_DISPATCH], env=env, check=True,
                              capture_output=True, text=True, timeout=120)
        return json.loads(done.stdout.strip().splitlines()[-1])

    run(base)  # fills the SPIR-V cache and the Mesa shader cache
    results = {}
    for label, env in (("cold", dict(base, MESA_SHADER_CACHE_DISABLE="true")), ("warm", base)):
        samples = [run(env) for _ in range(repeats)]
        results[label] = {key: statistics.median(s[key] for s in samples)
                          for key in samples[0]}
    return results


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args(argv)

    report: dict = {"kernels": {}, "first_dispatch": {}}
    with tempfile.TemporaryDirectory(prefix="vkumd-bench-") as tmp:
        scratch = Path(tmp)
        os.environ["VKUMD_CACHE_DIR"] = str(scratch / "cache")
        with RuntimeContext(validation=False) as context:
            caps = context.caps
            report["device"] = f"{caps.name} ({caps.driver_info})"
            spirv_cache = SpirvCache(scratch / "spirv", disk=False)
            for name, kernel in sorted(KERNELS.items()):
                define_sets = _define_sets(kernel, _all_caps(caps))
                row: dict = {"spirv_modules": len(define_sets)}
                row.update(_spirv_times(kernel, define_sets, args.repeats))
                if context.kernels.supports(kernel) and kernel.variants(caps):
                    row.update(_pipeline_times(context, kernel, spirv_cache, args.repeats,
                                               scratch))
                report["kernels"][name] = row
        report["first_dispatch"] = _first_dispatch(args.repeats, scratch)

    print(f"device: {report['device']}; medians of {args.repeats}; times in ms")
    print(f"{'kernel':<22}{'spv':>4}{'cold':>9}{'memory':>9}{'disk':>9}"
          f"{'pipes':>6}{'pipe':>9}{'pipe+pc':>9}")
    for name, row in report["kernels"].items():
        pipes = (f"{row['pipelines']:>6}{_ms(row['pipe']):>9}{_ms(row['pipe_pc']):>9}"
                 if "pipe" in row else f"{'-':>6}{'n/a':>9}{'n/a':>9}")
        print(f"{name:<22}{row['spirv_modules']:>4}{_ms(row['cold']):>9}"
              f"{_ms(row['memory']):>9}{_ms(row['disk']):>9}{pipes}")
    print(f"first dispatch of ops.add (elementwise_binary, fresh process; {WORKGROUP}=64):")
    for label, row in report["first_dispatch"].items():
        mesa = "MESA_SHADER_CACHE_DISABLE=true" if label == "cold" else "Mesa cache warm"
        print(f"  {label:<5} {mesa:<31} first {_ms(row['first'])}  second "
              f"{_ms(row['second'])}  context {_ms(row['startup'])}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

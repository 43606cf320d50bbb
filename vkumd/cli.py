"""The ``vkumd`` command: ``vkumd info`` lists devices; ``vkumd demo`` runs the demo;
``vkumd compile --all`` builds every kernel variant the device can use; ``vkumd embed`` embeds
sentences (see :mod:`vkumd.cli_embed`); ``vkumd generate`` and ``vkumd chat`` run a language
model (see :mod:`vkumd.cli_generate`); ``vkumd ocr`` reads text in images (see
:mod:`vkumd.cli_ocr`); ``vkumd serve`` serves them over HTTP (see
:mod:`vkumd.serve`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from vkumd import cli_embed, cli_generate, cli_ocr
from vkumd.errors import VkumdError
from vkumd.runtime.context import devices
from vkumd.runtime.device import default_device_index
from vkumd.serve import cli as serve_cli
from vkumd.vk.caps import DeviceCaps

_SKIP = {"index", "name", "extensions", "memory_heaps", "memory_types", "queue_families",
         "cooperative_matrix_shapes", "pipeline_cache_uuid"}


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def describe(caps: DeviceCaps) -> list[str]:
    """Lines of a capability table for one device."""
    lines = []
    for field in dataclasses.fields(caps):
        if field.name in _SKIP:
            continue
        value = getattr(caps, field.name)
        if isinstance(value, frozenset):
            value = ", ".join(sorted(value)) or "-"
        elif field.name.endswith("_size") and isinstance(value, int) and value >= 4096:
            value = f"{value} ({_human_bytes(value)})"
        elif field.name == "api_version":
            value = ".".join(map(str, value))
        lines.append(f"  {field.name:<36} {value}")
    lines.append(f"  {'pipeline_cache_uuid':<36} {caps.pipeline_cache_uuid.hex()}")
    for heap in caps.memory_heaps:
        kind = "device-local" if heap.device_local else "host"
        lines.append(f"  memory heap {heap.index:<24} {_human_bytes(heap.size)} {kind}")
    for t in caps.memory_types:
        flags = [name for name, on in (("device-local", t.device_local),
                                       ("host-visible", t.host_visible),
                                       ("coherent", t.host_coherent),
                                       ("cached", t.host_cached)) if on]
        lines.append(f"  memory type {t.index:<24} heap {t.heap}: {', '.join(flags) or '-'}")
    for fam in caps.queue_families:
        kinds = [name for name, on in (("compute", fam.compute), ("graphics", fam.graphics),
                                       ("transfer", fam.transfer)) if on]
        lines.append(f"  queue family {fam.index:<23} x{fam.count}: {', '.join(kinds)}; "
                     f"timestamp bits {fam.timestamp_valid_bits}")
    if caps.cooperative_matrix_shapes:
        lines.append("  cooperative-matrix shapes (M x N x K, A*B+C->result):")
        lines.extend(f"    {shape}" for shape in caps.cooperative_matrix_shapes)
    else:
        lines.append("  cooperative-matrix shapes             none (tiled kernels are used)")
    return lines


def cmd_info(_args: argparse.Namespace) -> int:
    """Print every device with its capability table and the default choice."""
    found = devices()
    if not found:
        print("no Vulkan devices found")
        return 1
    try:
        chosen: int | None = default_device_index(found)
    except VkumdError as exc:
        print(f"no usable default device: {exc}")
        chosen = None
    for caps in found:
        mark = "  <- default" if caps.index == chosen else ""
        print(f"device {caps.index}: {caps.name}{mark}")
        print("\n".join(describe(caps)))
        print()
    return 0


def cmd_demo(_args: argparse.Namespace) -> int:
    """Run the demo (see vkumd/demo/)."""
    from vkumd.demo.main import main as demo_main

    return demo_main()


def _progress(done: int, total: int, name: str) -> None:
    """One self-overwriting status line on stderr: ``[12/40] name``."""
    width = len(str(total))
    end = "\n" if done == total else ""
    sys.stderr.write(f"\r[{done:>{width}}/{total}] {name:<40}{end}")
    sys.stderr.flush()


def cmd_compile(args: argparse.Namespace) -> int:
    """Build every kernel variant the chosen device can use, filling the on-disk caches."""
    if not args.all:
        print("vkumd compile: say what to build; --all builds every kernel variant",
              file=sys.stderr)
        return 2
    from vkumd.compiler.registry import KERNELS, effective_caps
    from vkumd.runtime.context import RuntimeContext

    start = time.perf_counter()
    with RuntimeContext(device=args.device) as context:
        registry = context.kernels
        print(f"compiling for device {context.caps.index}: {context.caps.name}",
              file=sys.stderr)
        built: set[str] = set()

        def progress(done: int, total: int, name: str) -> None:
            built.add(name)
            _progress(done, total, name)

        summary = registry.compile_all(progress=progress)
        have = effective_caps(context.caps)
        reasons = [f"{name} (needs {', '.join(sorted(KERNELS[name].requires - have))})"
                   for name in summary.skipped if name in KERNELS]
    seconds = time.perf_counter() - start
    print(f"compiled {len(built)} kernels, {summary.programs} programs in {seconds:.2f} s "
          f"(pipelines {summary.seconds:.2f} s); SPIR-V cache: {summary.spirv_hits} hits, "
          f"{summary.spirv_misses} misses; skipped {len(reasons)}"
          + (f": {'; '.join(reasons)}" if reasons else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``vkumd`` command."""
    parser = argparse.ArgumentParser(prog="vkumd", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="list devices and their capabilities").set_defaults(func=cmd_info)
    sub.add_parser("demo", help="run work on the default device and check it against numpy"
                   ).set_defaults(func=cmd_demo)
    compile_parser = sub.add_parser("compile", help="build kernel variants ahead of time")
    compile_parser.add_argument("--all", action="store_true",
                                help="every variant of every kernel the device can use")
    compile_parser.add_argument("--device", type=int, default=None, metavar="N",
                                help="device index (see vkumd info); default: VKUMD_DEVICE or "
                                "the best device")
    compile_parser.set_defaults(func=cmd_compile)
    cli_embed.add_parser(sub)
    cli_generate.add_parser(sub)
    cli_ocr.add_parser(sub)
    serve_cli.add_parser(sub)
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except VkumdError as exc:
        print(f"vkumd: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vkumd: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`vkumd embed ... | head`): not an error to report.
        # Pointing stdout at /dev/null keeps the interpreter's final flush from raising too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())

"""Performance-regression gate: rerun the benchmarks quickly and compare their ratios with
``bench/baseline.json``.

Usage: python bench/check.py [--baseline PATH] [--tolerance 0.25] [--update]

Each benchmark named in the baseline (``bench/model.py``, and ``bench/graph.py`` where it
exists) runs with its baseline ``args`` and ``--json PATH``: ``bench/model.py --quick`` writes
a ``ratios`` object; for ``bench/graph.py`` (its own format) the ratios are each workload's
compiled-over-eager speedup. Every ratio is vkumd's speed over its peer's in the same run
(onnxruntime, the eager path), so the machine's load cancels out as far as it can. A ratio
that falls more than ``--tolerance`` (25%) below its baseline fails the check (exit 1); a
ratio missing from a run fails too. A benchmark file that does not exist is skipped with a
note. ``--update`` writes the run's ratios as the new baseline.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "bench" / "baseline.json"


def ratios_of(report: dict) -> dict[str, float]:
    """The ratios in a benchmark's JSON: its ``ratios``, or bench/graph.py's speedups."""
    if "ratios" in report:
        return {k: float(v) for k, v in report["ratios"].items()}
    return {f"{name}/{path}_vs_eager": float(result[path]["speedup"]["median"])
            for name, result in report.get("workloads", {}).items()
            for path, row in result.items()
            if path != "eager" and isinstance(row, dict) and "speedup" in row}


def run_bench(script: str, args: list[str], workdir: Path) -> dict[str, float]:
    """The ratios ``script ARGS --json PATH`` reports (its table goes to stdout)."""
    out = workdir / (Path(script).stem + ".json")
    subprocess.run([sys.executable, str(ROOT / script), *args, "--json", str(out)],
                   check=True, cwd=ROOT)
    return ratios_of(json.loads(out.read_text()))


def compare(baseline: dict[str, float], got: dict[str, float], tolerance: float
            ) -> list[str]:
    """One line per ratio; failures start with ``FAIL``."""
    lines = []
    for name, want in sorted(baseline.items()):
        if name not in got:
            lines.append(f"FAIL {name}: missing from the run (baseline {want:.3f})")
            continue
        floor = want * (1.0 - tolerance)
        verdict = "ok  " if got[name] >= floor else "FAIL"
        lines.append(f"{verdict} {name}: {got[name]:.3f} (baseline {want:.3f}, floor "
                     f"{floor:.3f})")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--tolerance", type=float, default=0.25,
                        help="fail below (1 - tolerance) x baseline")
    parser.add_argument("--update", action="store_true",
                        help="write this run's ratios as the baseline")
    args = parser.parse_args()
    data = json.loads(args.baseline.read_text())
    failed = False
    with tempfile.TemporaryDirectory() as workdir:
        for script, entry in data["benchmarks"].items():
            if not (ROOT / script).exists():
                print(f"skip {script}: not in this tree")
                continue
            got = run_bench(script, entry.get("args", []), Path(workdir))
            if args.update:
                entry["ratios"] = {k: round(v, 3) for k, v in sorted(got.items())}
                continue
            print(f"{script}:")
            for line in compare(entry["ratios"], got, args.tolerance):
                print("  " + line)
                failed |= line.startswith("FAIL")
    if args.update:
        args.baseline.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.baseline}")
        return 0
    print("bench-check: " + ("REGRESSION" if failed else "all ratios within tolerance"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

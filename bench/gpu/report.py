"""Tables, goals and the final report of the GPU run (``bench/gpu/run.sh``).

Usage: python bench/gpu/report.py --results compare.json [--tests NAME=junit.xml ...]
                                  [--info info.txt] --json OUT.json --md OUT.md

``compare.py`` measures and writes its JSON; this module turns that, the test suites' JUnit
files and ``vkumd info``'s output into one JSON document and one markdown report. Ratios are
vkumd's throughput divided by the peer's measured in the same run (above 1: vkumd faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

GEMM_GOAL = 0.7        # float16 GEMM at 4096^3 against cuBLAS
ATTENTION_GOAL = 0.5   # attention at seq 4096 against PyTorch's SDPA
GOAL_GEMM_SIZE = 4096
GOAL_SEQ = 4096

NVIDIA = 0x10DE


def driver_version_text(vendor_id: int, version: int) -> str:
    """``driverVersion`` decoded the way the vendor packs it (NVIDIA: 10.8.8.6 bits)."""
    if vendor_id == NVIDIA:
        return (f"{(version >> 22) & 0x3FF}.{(version >> 14) & 0xFF}."
                f"{(version >> 6) & 0xFF}.{version & 0x3F}")
    return f"{version >> 22}.{(version >> 12) & 0x3FF}.{version & 0xFFF}"


def tflops(flop: float, ms: float) -> float:
    return flop / (ms * 1e-3) / 1e12


def ratio(row: dict) -> float | None:
    """vkumd's throughput over the peer's (peer time / vkumd time)."""
    if "vkumd_ms" not in row or "peer_ms" not in row or row["vkumd_ms"] <= 0:
        return None
    return row["peer_ms"] / row["vkumd_ms"]


def summary(row: dict) -> str:
    """One line for the progress log."""
    if "error" in row:
        return f"error: {row['error']}"
    if "skipped" in row:
        return f"skipped: {row['skipped']}"
    if "vkumd_ms" not in row and "peer_skipped" in row:  # a note, not a measurement
        return f"peer skipped: {row['peer_skipped']}"
    if "vkumd_sent_s" in row:
        parts = [f"vkumd {row['vkumd_sent_s']['median']:.1f} sent/s"]
        for name, peer in row.get("peers", {}).items():
            parts.append(f"{name}: {_peer_text(peer)}")
        return "; ".join(parts)
    if "compiled_ms" in row:
        return (f"eager {row['eager_ms']:.3f} ms, compiled {row['compiled_ms']:.3f} ms "
                f"(x{row['eager_ms'] / row['compiled_ms']:.2f}), executor {row['executor']}, "
                f"rel err {row['rel_err']:.2e}")
    r = ratio(row)
    if "flop" not in row:  # the vision and generation rows: time per image, prefill or token
        text = f"vkumd {row['vkumd_ms']:.3f} ms"
        if "vkumd_rate" in row:
            text += f" ({row['vkumd_rate']:.1f} {row['rate_unit']})"
        if r is None:
            return text + f"; peer skipped: {row.get('peer_skipped', '-')}"
        return (text + f", {row.get('peer', 'peer')} {row['peer_ms']:.3f} ms, ratio {r:.3f}"
                + (f", rel err {row['rel_err']:.2e}" if "rel_err" in row else ""))
    return (f"vkumd {row['vkumd_ms']:.3f} ms ({tflops(row['flop'], row['vkumd_ms']):.3g} "
            f"TFLOP/s), peer {row['peer_ms']:.3f} ms ({tflops(row['flop'], row['peer_ms']):.3g}"
            f" TFLOP/s), ratio {r:.3f}, rel err {row['rel_err']:.2e}")


def _peer_text(peer: dict) -> str:
    if "skipped" in peer or "error" in peer:
        return peer.get("error") or f"skipped: {peer['skipped']}"
    text = f"{peer['sent_s']['median']:.1f} sent/s"
    if "ratio" in peer:
        text += f", ratio {peer['ratio']:.3f}"
    return text + f", min cos {peer['min_cos']:.6f}, max abs {peer['max_abs']:.1e}"


def _measured(rows: list[dict]) -> list[dict]:
    return [row for row in rows if ratio(row) is not None]


def goals(results: dict) -> list[dict]:
    """Each goal with what was measured, whether it was met, and by how much if not."""
    found = []
    gemm = [row for row in _measured(results.get("gemm", []))
            if row.get("m") == row.get("n") == row.get("k") == GOAL_GEMM_SIZE
            and row.get("dtype") == "float16" and row.get("variant") != "shared"]
    default = [row for row in gemm if "tile" not in row]
    if default:
        best = max(gemm, key=lambda row: ratio(row) or 0.0)
        found.append(_goal(f"float16 GEMM {GOAL_GEMM_SIZE}^3 against cuBLAS", GEMM_GOAL,
                           ratio(default[0]) or 0.0,
                           f"best forced configuration: {best['case']} at "
                           f"{ratio(best):.3f}" if best is not default[0] else ""))
    else:
        found.append({"goal": f"float16 GEMM {GOAL_GEMM_SIZE}^3 against cuBLAS",
                      "target": GEMM_GOAL, "met": False, "note": "not measured"})
    attention = [row for row in _measured(results.get("attention", []))
                 if row.get("seq") == GOAL_SEQ and "block" not in row]
    if attention:
        ratios = [ratio(row) or 0.0 for row in attention]
        worst = min(attention, key=lambda row: ratio(row) or 0.0)
        found.append(_goal(f"attention at seq {GOAL_SEQ} against SDPA (worst of "
                           f"{len(attention)} cases)", ATTENTION_GOAL, min(ratios),
                           f"median {statistics.median(ratios):.3f}; worst case "
                           f"{worst['case']}"))
    else:
        found.append({"goal": f"attention at seq {GOAL_SEQ} against SDPA",
                      "target": ATTENTION_GOAL, "met": False, "note": "not measured"})
    for name, counts in results.get("tests", {}).items():
        if "error" in counts:
            found.append({"goal": f"test suite '{name}' passes", "target": "all",
                          "met": False, "note": counts["error"]})
            continue
        bad = counts["failures"] + counts["errors"]
        exit_code = counts.get("exit")
        note = f"{counts['skipped']} skipped"
        if exit_code == 124:
            note += "; stopped by its time limit, so not every test ran"
        elif exit_code not in (None, 0):
            note += f"; pytest exited with {exit_code}"
        found.append({"goal": f"test suite '{name}' passes", "target": "all",
                      "measured": f"{counts['passed']} passed, {bad} failed",
                      "met": bad == 0 and counts["passed"] > 0 and exit_code in (None, 0),
                      "note": note})
    return found


def _goal(name: str, target: float, measured: float, note: str) -> dict:
    met = measured >= target
    if not met and measured > 0:
        note = (f"short by {target - measured:.3f} (needs {target / measured:.2f}x faster)"
                + (f"; {note}" if note else ""))
    return {"goal": name, "target": target, "measured": round(measured, 4), "met": met,
            "note": note}


def junit_summary(path: Path) -> dict:
    """Counts and failing test ids of a pytest JUnit XML file (or why it is missing)."""
    if not path.is_file():
        return {"error": f"{path.name} missing: the suite did not finish"}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        return {"error": f"{path.name} unreadable: {exc}"}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites)
              for key in ("tests", "failures", "errors", "skipped")}
    counts["seconds"] = round(sum(float(s.get("time", 0)) for s in suites), 1)
    failed = []
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname')}::{case.get('name')}")
    counts["passed"] = (counts["tests"] - counts["failures"] - counts["errors"]
                        - counts["skipped"])
    counts["failed_ids"] = failed[:50]
    return counts


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _gemm_table(rows: list[dict]) -> list[str]:
    lines = ["| case | M x N x K | dtype | vkumd path | vkumd ms | vkumd TFLOP/s | peer ms | "
             "peer TFLOP/s | ratio | rel. error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        shape = f"{row.get('m')}x{row.get('n')}x{row.get('k')}"
        path = row.get("variant", "-") + (f" ({row['tile']})" if "tile" in row else "")
        lines.append(_row(row, [row["case"], shape, row.get("dtype", "-"), path]))
    return lines


def _attention_table(rows: list[dict]) -> list[str]:
    lines = ["| case | vkumd path | vkumd ms | vkumd TFLOP/s | peer ms | peer TFLOP/s | ratio | "
             "rel. error |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        path = row.get("path", "-") + (f" ({row['block']})" if "block" in row else "")
        lines.append(_row(row, [row["case"], path]))
    return lines


def _model_table(rows: list[dict]) -> list[str]:
    lines = ["| case | sentences | vkumd sent/s [range] | peer | peer sent/s | ratio | min cos | "
             "max abs |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row or "skipped" in row:
            text = (row.get("error") or f"skipped: {row['skipped']}").replace("|", "/")
            lines.append(f"| {row['case']} | {text} | | | | | | |")
            continue
        rate = row["vkumd_sent_s"]
        mine = f"{rate['median']:.1f} [{rate['min']:.1f}-{rate['max']:.1f}]"
        for name, peer in row.get("peers", {}).items():
            if "skipped" in peer or "error" in peer:
                text = (peer.get("error") or f"skipped: {peer['skipped']}").replace("|", "/")
                lines.append(f"| {row['case']} | {row['sentences']} | {mine} | {name} | {text} "
                             "| | | |")
                continue
            lines.append(f"| {row['case']} | {row['sentences']} | {mine} | {name} | "
                         f"{peer['sent_s']['median']:.1f} | {_fmt(peer.get('ratio'))} | "
                         f"{peer['min_cos']:.6f} | {peer['max_abs']:.1e} |")
    return lines


def _graph_table(rows: list[dict]) -> list[str]:
    lines = ["| case | executor | nodes (traced) | eager ms | compiled ms | speed-up | "
             "eager wall ms | compiled wall ms | rel. error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row or "skipped" in row:
            text = (row.get("error") or f"skipped: {row['skipped']}").replace("|", "/")
            lines.append(f"| {row['case']} | {text} | | | | | | | |")
            continue
        lines.append(f"| {row['case']} | {row['executor']} | {row['nodes']} "
                     f"({row['traced_nodes']}) | {_fmt(row['eager_ms'])} | "
                     f"{_fmt(row['compiled_ms'])} | {_fmt(row['eager_ms'] / row['compiled_ms'], 2)}"
                     f" | {_fmt(row['eager_wall_ms'])} | {_fmt(row['compiled_wall_ms'])} | "
                     f"{row['rel_err']:.1e} |")
    return lines


def _workload_table(rows: list[dict]) -> list[str]:
    """The vision and generation rows: vkumd against the row's own peer."""
    lines = ["| case | vkumd ms [range] | throughput | peer | peer ms | ratio | check |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row or "skipped" in row:
            text = (row.get("error") or f"skipped: {row['skipped']}").replace("|", "/")
            lines.append(f"| {row['case']} | {text} | | | | | |")
            continue
        if "vkumd_ms" not in row:  # a peer's note alone (llama.cpp)
            lines.append(f"| {row['case']} | | | {row.get('peer_skipped', '')} | | | |")
            continue
        spread = row.get("vkumd_range")
        mine = _fmt(row["vkumd_ms"]) + (f" [{_fmt(spread[0])}-{_fmt(spread[1])}]"
                                         if spread and "vkumd_rate" not in row else "")
        if "vkumd_rate" in row:
            lo, hi = row["vkumd_range"]
            rate = f"{row['vkumd_rate']:.1f} [{lo:.1f}-{hi:.1f}] {row['rate_unit']}"
        elif "flop" in row:
            rate = f"{tflops(row['flop'], row['vkumd_ms']):.3g} TFLOP/s"
        else:
            rate = f"{row.get('batch', 1) / row['vkumd_ms'] * 1e3:.1f} images/s"
        peer = row.get("peer") or row.get("peer_skipped", "-")
        check = f"{row['rel_err']:.1e}" if "rel_err" in row else "-"
        lines.append(f"| {row['case']} | {mine} | {rate} | {peer.replace('|', '/')} | "
                     f"{_fmt(row.get('peer_ms'))} | {_fmt(ratio(row))} | {check} |")
    return lines


def skipped_cases(results: dict) -> list[str]:
    """Every case or peer that did not run, with why."""
    found = []
    for section in ("gemm", "attention", "model", "graph", "vision", "generation"):
        for row in results.get(section, []):
            if "skipped" in row:
                found.append(f"{section}: {row['case']}: {row['skipped']}")
            if "peer_skipped" in row:
                found.append(f"{section}: {row['case']}, peer: {row['peer_skipped']}")
            peers = row.get("peers")
            for name, peer in (peers.items() if isinstance(peers, dict) else ()):
                if "skipped" in peer:
                    found.append(f"{section}: {row['case']}, {name}: {peer['skipped']}")
    return found


def _row(row: dict, first: list[str]) -> str:
    if "error" in row or "skipped" in row:
        text = row.get("error") or f"skipped: {row['skipped']}"
        rest = [text.replace("|", "/")] + [""] * 5
    else:
        rest = [_fmt(row["vkumd_ms"]), _fmt(tflops(row["flop"], row["vkumd_ms"]), 1),
                _fmt(row["peer_ms"]), _fmt(tflops(row["flop"], row["peer_ms"]), 1),
                _fmt(ratio(row)), f"{row['rel_err']:.1e}"]
    return "| " + " | ".join(first + rest) + " |"


def markdown(results: dict) -> str:
    """The whole report as markdown."""
    env = results.get("environment", {})
    peer = env.get("peer", "?")
    lines = ["# vkumd against PyTorch on the same device", ""]
    for key in ("date", "device", "driver_name", "driver_info", "driver_version", "vulkan",
                "vkumd_commit", "python", "peer", "torch", "cuda", "gpu", "numpy"):
        if key in env:
            lines.append(f"- {key.replace('_', ' ')}: {env[key]}")
    if env.get("coopmat_shapes") is not None:
        shapes = ", ".join(env["coopmat_shapes"]) or "none"
        lines.append(f"- cooperative-matrix shapes: {shapes}")
    lines.append("")
    if peer != "torch":
        lines += ["**The peer is numpy on the host, not PyTorch on a GPU: these numbers only "
                  "show that the script runs.**", ""]
    clock = "CUDA events" if peer == "torch" else "the host's wall clock"
    lines += ["Ratio: vkumd's throughput over the peer's, both measured in this run (peer "
              "time / vkumd time). Times are medians of timed groups; vkumd by GPU timestamps, "
              f"the peer by {clock}.", ""]
    lines += ["## Goals", "", "| goal | target | measured | met | note |", "|---|---|---|---|---|"]
    for goal in results.get("goals", []):
        lines.append(f"| {goal['goal']} | {goal['target']} | {goal.get('measured', '-')} | "
                     f"{'yes' if goal['met'] else 'no'} | {goal.get('note', '')} |")
    tests = results.get("tests", {})
    if tests:
        lines += ["", "## Test suites on the device", "",
                  "| suite | passed | failed | errors | skipped | seconds |",
                  "|---|---|---|---|---|---|"]
        for name, counts in tests.items():
            if "error" in counts:
                lines.append(f"| {name} | {counts['error']} | | | | |")
                continue
            lines.append(f"| {name} | {counts['passed']} | {counts['failures']} | "
                         f"{counts['errors']} | {counts['skipped']} | {counts['seconds']} |")
        for name, counts in tests.items():
            for test_id in counts.get("failed_ids", []):
                lines.append(f"- failed in {name}: `{test_id}`")
    if results.get("gemm"):
        lines += ["", "## GEMM", ""] + _gemm_table(results["gemm"])
    if results.get("attention"):
        lines += ["", "## Attention (float16, [batch, heads, seq, head_dim])", ""]
        lines += _attention_table(results["attention"])
    if results.get("model"):
        info = results.get("model_info", {})
        lines += ["", "## Sentence encoder (all-MiniLM-L6-v2, SentenceEncoder.encode)", "",
                  f"Model {info.get('model', '?')}, {info.get('dtype', '?')}"
                  + (" (packed: float16 weights, unused word rows zero)"
                     if info.get("packed") else "")
                  + ". Sentences/s over the whole call, tokenization included on both sides; "
                  "ratio: vkumd's over the peer's; cosine and max abs against vkumd's "
                  "embeddings.", ""]
        lines += _model_table(results["model"])
    if results.get("graph"):
        lines += ["", "## Compiled graph: one encoder layer, vkumd.compile against eager", "",
                  "Device ms between GPU timestamps; wall ms per call on the host, with one "
                  "wait at the end of 20 calls. rel. error: compiled against eager.", ""]
        lines += _graph_table(results["graph"])
    if results.get("vision"):
        lines += ["", "## Vision", "",
                  "Convolutions: device ms between GPU timestamps (both sides), check = largest "
                  "|difference| over the largest |peer value|. Models and ONNX files: wall ms "
                  "per call, the input uploaded and the output read back on both sides.", ""]
        lines += _workload_table(results["vision"])
    if results.get("generation"):
        model = next((r["model"] for r in results["generation"] if "model" in r), "?")
        lines += ["", "## Text generation (a SmolLM2-135M-shaped model, random weights)", "",
                  f"Model: {model}. Prefill: ms per prompt; decode: ms per token (a step over "
                  "the sequences it advances). check: the prefill's last-token logits, "
                  "relative error against the peer's.", ""]
        lines += _workload_table(results["generation"])
    skipped = skipped_cases(results)
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- {text}" for text in skipped]
    dispatch = results.get("dispatch")
    if dispatch:
        lines += ["", "## Host cost per dispatch (bench/dispatch.py)", ""]
        if "error" in dispatch:
            lines.append(f"failed: {dispatch['error']}")
        else:
            lines += [f"numpy `np.add` on 64 floats: {dispatch['numpy_add_us']:.2f} us", "",
                      "| path | wall us | CPU us |", "|---|---|---|"]
            for name, (wall, cpu) in dispatch["rows"].items():
                lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} |")
    if results.get("serve"):
        lines += ["", "## Serving (bench/serve.py --quick: `vkumd serve` on 127.0.0.1, "
                  "clients in the same machine)", "", "```", results["serve"].rstrip()[-6000:],
                  "```"]
    if results.get("info"):
        lines += ["", "## vkumd info", "", "```", results["info"].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", required=True, help="compare.py's JSON")
    parser.add_argument("--tests", action="append", default=[],
                        help="NAME=junit.xml of one test suite run (repeatable)")
    parser.add_argument("--exit", action="append", default=[],
                        help="NAME=CODE: the suite's exit status (124: its time limit)")
    parser.add_argument("--info", help="vkumd info's output")
    parser.add_argument("--serve", help="bench/serve.py's output (its table)")
    parser.add_argument("--json", required=True)
    parser.add_argument("--md", required=True)
    args = parser.parse_args(argv)
    path = Path(args.results)
    results: dict[str, Any] = (json.loads(path.read_text(encoding="utf-8"))
                               if path.is_file() else {"error": f"{path} missing"})
    results["tests"] = {}
    for item in args.tests:
        name, _, xml = item.partition("=")
        if not xml:
            parser.error(f"--tests takes NAME=path, not {item!r}")
        results["tests"][name] = junit_summary(Path(xml))
    for item in args.exit:
        name, _, code = item.partition("=")
        if name not in results["tests"] or not code.lstrip("-").isdigit():
            parser.error(f"--exit takes NAME=CODE for a suite named by --tests, not {item!r}")
        results["tests"][name]["exit"] = int(code)
    if args.serve and Path(args.serve).is_file():
        results["serve"] = Path(args.serve).read_text(encoding="utf-8", errors="replace")
    if args.info and Path(args.info).is_file():
        results["info"] = Path(args.info).read_text(encoding="utf-8", errors="replace")
    results["goals"] = goals(results)
    Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")
    Path(args.md).write_text(markdown(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""ONNX's node test cases, all of them, run on vkumd and on onnxruntime in one process.

``python -m vkumd.framework.frontends.onnx.conformance`` runs every case ONNX's
``collect_testcases`` generates (1884 in onnx 1.23.2) and counts each, on vkumd, as:

- **not imported**: its model has an operator vkumd has no converter for (named; such a case
  is not run, even where the importer could compute the node on the host);
- **skipped**: the importer or the device refused it with a stated reason, grouped as an
  element type vkumd does not store, a device capability missing, an op with no device
  kernel (its import is then still checked in the IR's float64 evaluator, and a mismatch
  there is a failure: never a pass), or an attribute or pattern the importer refuses;
- **failed**: anything else that goes wrong, and every result outside the case's own
  tolerance (ONNX's runner check, its ``rtol``/``atol``) or of another dtype or shape, with
  one exception, counted as skipped: where the case's expected output is itself outside
  that tolerance of the float64 evaluation of the imported graph (but within ten times it,
  so a wrong import cannot pass for it) while vkumd's result is inside it. Such files were
  made with rounding at every step in float16, or keep float32 noise where the exact result
  is zero; the report lists each;
- **passed**: every output within tolerance, computed on the device (the ONNX runner
  refuses host fallbacks); a case whose graph is left with no node (its outputs are sizes,
  constants or an input) is counted apart among them. A model with a node whose output size
  depends on the data (NonZero, Unique, Compress) runs in segments around that host step
  (:mod:`.segments`) and passes only where the device ran its other nodes; a case that is
  the host step alone is checked all the same (a wrong result fails) but counted as
  skipped, "host step only".

onnxruntime runs the same cases beside it (:mod:`.conformance_ort`). Options: ``--json PATH``
(every case's record and the summary), ``--write-docs`` (docs/frameworks.md's table and
docs/conformance.json), ``--journal PATH`` (resume a stopped run), ``-k PATTERN`` (cases whose
name contains it), ``--no-ort``. Progress goes to stderr; the text report to stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import onnx
from onnx import numpy_helper

from vkumd.errors import CapabilityMissing, VkumdValueError
from vkumd.framework.execute.lower import NoDeviceKernel
from vkumd.framework.frontends.onnx import conformance_ort
from vkumd.framework.frontends.onnx.backend import VkumdBackend
from vkumd.framework.frontends.onnx.conformance_report import (
    NO_KERNEL,
    SKIP_GROUPS,
    Outcome,
    Report,
    text,
    write_docs,
)
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError
from vkumd.framework.frontends.onnx.state import CONVERTERS

DOCS = Path(__file__).resolve().parents[4] / "docs"
PROGRESS_EVERY = 50


def collect(contains: str | None = None) -> list[Any]:
    """ONNX's node test cases (``onnx.backend.test.case.node.collect_testcases``), by name.

    Args:
        contains: keep only the cases whose name contains it.

    Returns:
        The ``TestCase`` objects, sorted by name.
    """
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # the case generators' own numpy warnings
        cases = list(collect_testcases(None))
    chosen = {c.name: c for c in cases if contains is None or contains in c.name}
    return [chosen[name] for name in sorted(chosen)]


def _op_name(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def missing_operators(model: onnx.ModelProto) -> list[str]:
    """The operators of ``model`` that vkumd has no converter for (another domain's
    operators included, named ``domain:Op``), sorted."""
    return sorted({_op_name(n) for n in model.graph.node
                   if n.domain not in ("", "ai.onnx") or n.op_type not in CONVERTERS})


def operators_of(cases: Iterable[Any]) -> dict[str, str]:
    """Case name -> the operator it tests: a one-node case's operator; a multi-node case
    (``_expanded``) counts for its base case's operator, or ``(multi-node)`` without one."""
    single = {c.name: _op_name(c.model.graph.node[0]) for c in cases
              if len(c.model.graph.node) == 1}
    out = {}
    for case in cases:
        base = case.name.split("_expanded")[0]
        out[case.name] = single.get(case.name) or single.get(base) or "(multi-node)"
    return out


def normalize(value: Any) -> Any:
    """A case's stored value as a runtime takes it: a ``TensorProto`` as an array (types
    numpy lacks, float16 bits and bfloat16, are stored so), a sequence item by item."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def skip_reason(exc: Exception) -> str:
    """A refusal as ``"group: detail"`` (the group one of :data:`SKIP_GROUPS`; numbers and
    names stripped from the detail so that like refusals count together)."""
    if isinstance(exc, NoDeviceKernel):
        detail = str(exc).split(" (")[0]
        typed = re.match(r"\w+ has no device kernel for (\w+)", detail)
        detail = f"elementwise ops on {typed.group(1)}" if typed else detail
        return f"{SKIP_GROUPS[2]}: {detail}"
    if isinstance(exc, CapabilityMissing):
        return f"{SKIP_GROUPS[1]}: {str(exc).split(';')[0][:120]}"
    assert isinstance(exc, UnsupportedModelError)
    refusal = exc.refusals[0]
    typed = re.match(r"(\w+) tensors are not supported", refusal.reason)
    if typed:
        return f"{SKIP_GROUPS[0]}: {typed.group(1).upper()}"
    # A dimension count ("2-D") stays: it says which form is refused.
    reason = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?(?!\d|-D)", "N", refusal.reason)
    reason = re.sub(r"\[[^\]]*\]|\([^)]*\)|'[^']*'", "", reason).split(";")[0]
    return f"{SKIP_GROUPS[3]}: {refusal.op_type}: {' '.join(reason.split())[:120]}"


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"


def run_vkumd(case: Any, ctx: Any) -> tuple[str, str]:
    """Run one imported case on vkumd, every data set.

    Returns:
        ``(status, reason)``: ``passed``, ``skipped`` (reason from :func:`skip_reason`) or
        ``failed``.
    """
    check = onnx_check()
    rep = None
    try:
        rep = VkumdBackend.prepare(case.model, ctx=ctx)
        for inputs, expected in case.data_sets:
            got = rep.run([normalize(x) for x in inputs])
            try:
                check([normalize(x) for x in expected], list(got), case.rtol, case.atol)
            except AssertionError as miss:
                if not _expected_off(case, rep, inputs, expected, list(got), check):
                    raise
                return "skipped", f"{SKIP_GROUPS[4]}: {_short(miss)[:120]}"
    except (UnsupportedModelError, CapabilityMissing) as exc:
        if isinstance(exc, NoDeviceKernel) and rep is not None:
            failure = _check_in_ir(case, rep, check)
            if failure:
                return "failed", failure
        return "skipped", skip_reason(exc)
    except Exception as exc:  # noqa: BLE001 -- anything else is a failure, with its message
        return "failed", _short(exc)
    # The runner refuses host fallbacks, so a graph with nodes ran on the device; one without
    # returned sizes, constants or an input, which the report counts apart. A model run in
    # segments around a host step (NonZero, Unique, ...) passes only where the device ran
    # nodes besides it: one that is the host step alone is checked, and skipped.
    if rep.model.host_steps_run and not rep.model.device_nodes_run:
        return "skipped", f"{SKIP_GROUPS[5]}: {', '.join(rep.model.host_steps_run)}"
    return "passed", "" if rep.model.device_nodes_run else NO_KERNEL


def onnx_check() -> Any:
    """ONNX's runner comparison (length, shape, dtype, then ``assert_allclose`` at the
    case's ``rtol``/``atol``; bfloat16 at two of its ulps)."""
    from onnx.backend.test.runner import Runner

    return lambda want, got, rtol, atol: Runner.assert_similar_outputs(want, got, rtol, atol)


def _expected_off(case: Any, rep: Any, inputs: Any, expected: Any, got: list[Any],
                  check: Any) -> bool:
    """Whether a miss is the file's: vkumd's ``got`` is within the case's tolerance of the
    float64 evaluation of the imported graph, and the file's ``expected`` is not, though
    within ten times that tolerance (a wrong import, which the evaluation would share, is
    off by far more than that from a file made with rounding)."""
    try:
        feed = dict(zip(rep.model.input_names, [normalize(x) for x in inputs], strict=False))
        exact = rep.model.evaluate(**feed)
        exact = [exact[n] for n in rep.model.output_names]
        want = [normalize(x) for x in expected]
        check(exact, got, case.rtol, case.atol)
        check(exact, want, 10 * case.rtol, 10 * case.atol)
    except Exception:  # noqa: BLE001 -- any doubt leaves the miss a failure
        return False
    try:
        check(exact, want, case.rtol, case.atol)
    except AssertionError:
        return True
    return False


def _check_in_ir(case: Any, rep: Any, check: Any) -> str:
    """An empty string when the import's float64 evaluation matches; else the failure."""
    try:
        for inputs, expected in case.data_sets:
            feed = dict(zip(rep.model.input_names, [normalize(x) for x in inputs],
                            strict=False))
            got = rep.model.evaluate(**feed)
            check([normalize(x) for x in expected], [got[n] for n in rep.model.output_names],
                  case.rtol, case.atol)
    except Exception as exc:  # noqa: BLE001 -- the import is wrong, though no kernel ran
        return f"in the IR evaluator: {_short(exc)}"
    return ""


class Journal:
    """A JSON-lines file each finished case is appended to, so a stopped run resumes.

    A case is marked started (per runtime) before it runs; one started and never finished
    stopped the process (a crash, a kill), and is counted failed with that reason.

    Args:
        path: the file (created when absent; read when present).

    Raises:
        VkumdValueError: a line of an existing file is not an entry this class wrote.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.done: dict[str, Outcome] = {}
        self.stopped: dict[str, str] = {}
        if path is None or not path.exists():
            return
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                entry = json.loads(line)
                if not isinstance(entry, dict) or not ({"started", "name"} & entry.keys()):
                    raise ValueError("neither a started mark nor a case's record")
            except ValueError as exc:
                raise VkumdValueError(
                    f"{path}, line {number}: not a conformance journal entry ({exc}); it is "
                    "not the journal of this harness, or was cut short: delete the file (or "
                    "that line) and run again") from exc
            if "started" in entry:
                self.stopped[entry["started"]] = entry["runner"]
            else:
                self.done[entry["name"]] = Outcome.from_json(entry)
                self.stopped.pop(entry["name"], None)

    def write(self, entry: dict[str, Any]) -> None:
        """Append one entry and flush it to the file."""
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(entry) + "\n")


def _run_one(case: Any, operator: str, ctx: Any, ort: bool, journal: Journal) -> Outcome:
    start = time.perf_counter()
    outcome = Outcome(case.name, operator, "not imported", missing=missing_operators(case.model))
    stopped = journal.stopped.get(case.name)
    if outcome.missing:
        outcome.reason = "no converter for " + ", ".join(outcome.missing)
    elif stopped == "vkumd":
        outcome.status, outcome.reason = "failed", "the process stopped during this case's run"
    else:
        journal.write({"started": case.name, "runner": "vkumd"})
        with np.errstate(all="ignore"):
            outcome.status, outcome.reason = run_vkumd(case, ctx)
    if stopped == "onnxruntime":
        outcome.ort, outcome.ort_reason = "error", "the process stopped during this run"
    elif ort:
        journal.write({"started": case.name, "runner": "onnxruntime"})
        outcome.ort, outcome.ort_reason = conformance_ort.run_case(case, normalize)
    outcome.seconds = round(time.perf_counter() - start, 3)
    journal.write(outcome.to_json())
    return outcome


def run(ctx: Any = None, cases: list[Any] | None = None, ort: bool = True,
        journal: Path | None = None, progress: TextIO | None = None) -> Report:
    """Run ``cases`` (default: all of ONNX's node cases) on vkumd and on onnxruntime.

    Args:
        ctx: the vkumd context (default: the backend's shared one).
        cases: the ``TestCase`` objects; None for :func:`collect`'s.
        ort: run onnxruntime beside vkumd (when it is installed).
        journal: a file recording each finished case; cases already in it are not rerun.
        progress: where a line of counts goes every :data:`PROGRESS_EVERY` cases.

    Returns:
        The :class:`Report`, one outcome per case in case order.
    """
    from vkumd.framework.frontends.onnx.backend import shared_context

    cases = collect() if cases is None else cases
    ctx = ctx or shared_context()
    ort_version = conformance_ort.version() if ort else None
    record = Journal(journal)
    operators = operators_of(cases)
    report = Report(meta={"onnx": onnx.__version__, "onnxruntime": ort_version,
                          "device": ctx.caps.name,
                          "date": datetime.now(timezone.utc).strftime("%Y-%m-%d")})
    start = time.perf_counter()
    resumed = sum(o.seconds for o in record.done.values())
    for i, case in enumerate(cases, 1):
        outcome = record.done.get(case.name)
        if outcome is None:
            outcome = _run_one(case, operators[case.name], ctx, ort_version is not None,
                               record)
        report.outcomes.append(outcome)
        if progress is not None and (i % PROGRESS_EVERY == 0 or i == len(cases)):
            counts = ", ".join(f"{s} {len(report.by_status(s))}" for s in
                               ("passed", "failed", "skipped", "not imported"))
            ort_passed = sum(o.ort == "passed" for o in report.outcomes)
            print(f"conformance: {i}/{len(cases)} cases, {time.perf_counter() - start:.0f} s: "
                  f"vkumd {counts}; onnxruntime passed {ort_passed}", file=progress,
                  flush=True)
    report.meta["seconds"] = round(time.perf_counter() - start + resumed, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (1 when a case failed on vkumd)."""
    parser = argparse.ArgumentParser(
        prog="python -m vkumd.framework.frontends.onnx.conformance",
        description="Run all of ONNX's node test cases on vkumd and onnxruntime.")
    parser.add_argument("--json", type=Path, help="write every case's record and the summary")
    parser.add_argument("--write-docs", type=Path, nargs="?", const=DOCS, metavar="DOCS_DIR",
                        help="write DOCS_DIR/frameworks.md's table (between its markers) and "
                        "DOCS_DIR/conformance.json (default: the repository's docs)")
    parser.add_argument("--journal", type=Path,
                        help="record finished cases here; a rerun resumes from it")
    parser.add_argument("-k", dest="contains", help="only cases whose name contains this")
    parser.add_argument("--no-ort", action="store_true", help="do not run onnxruntime")
    args = parser.parse_args(argv)
    cases = collect(args.contains)
    if not cases:
        parser.error(f"no ONNX node case's name contains {args.contains!r} (names look like "
                     "test_add_bcast)")
    report = run(cases=cases, ort=not args.no_ort, journal=args.journal,
                 progress=sys.stderr)
    summary = report.summary()
    print(text(summary))
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=1) + "\n")
    if args.write_docs:
        write_docs(summary, args.write_docs / "frameworks.md",
                   args.write_docs / "conformance.json")
    return 1 if summary["vkumd"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

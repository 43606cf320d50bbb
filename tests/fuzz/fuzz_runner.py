"""The fuzzer's parent side: seeded cases written to files, run in a worker process that is
restarted after a crash, a hang or too much memory, and every failure kept for replay.

Run from the repository root to fuzz outside pytest or replay one case::

    python tests/fuzz/fuzz_runner.py onnx --cases 500        # seeds 0..499
    python tests/fuzz/fuzz_runner.py config --seeds 17 42    # those seeds only
    PYTHONPATH=/other/tree python tests/fuzz/fuzz_runner.py onnx  # another tree's vkumd

A failure's files stay under the printed directory (``<format>-<seed>/``, with
``case.json`` saying what was mutated); the same seed rebuilds the same files.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_mutate import mutate_config, mutate_safetensors  # noqa: E402
from fuzz_seeds import onnx_seeds, write_tiny_model  # noqa: E402
from fuzz_worker import STAGE_FILE  # noqa: E402

FORMATS = ("onnx", "safetensors", "config")
CASE_TIMEOUT_S = 20.0
FIRST_CASE_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0
RSS_BUDGET_KIB = 1536 * 1024  # 1.5 GiB for the worker, its context and the case together
PASSING = ("ok", "refused")
_TARGETS = {"onnx": "model.onnx", "safetensors": "model.safetensors", "config": "config.json"}
# Cases whose file is replaced by a FIFO, a directory, /dev/zero or nothing; and safetensors
# cases whose file is cut short after the reader opened it (the worker does it).
SPECIAL_RATE = 0.03
SHRINK_RATE = 0.04


def _general(message: str) -> str:
    """A message without what varies between cases of one failure: paths, numbers, quoted
    names, onnxruntime's preamble."""
    message = message.split(" failed:", 1)[-1]
    message = re.sub(r"/\S+", "PATH", message)
    return re.sub(r"\d+(\.\d+)?|'[^']*'|\([^)]*\)", "#", message)[:120]


@dataclass
class Result:
    """One case's outcome (``record`` as the worker sent it, or the parent's verdict)."""

    fmt: str
    seed: int
    mutation: str
    record: dict[str, Any]
    path: Path | None = None

    @property
    def failed(self) -> bool:
        return self.record["kind"] not in PASSING

    def key(self) -> tuple[str, ...]:
        """What makes two failures the same: the format, the entry point, the kind and the
        exception type, and where in vkumd it was raised (or the message without numbers
        and quoted names)."""
        r = self.record
        where = r.get("where") or _general(r.get("message", ""))
        if r["kind"] in ("crash", "hang", "rss"):  # no traceback: what the file was instead
            where += " (" + (self.mutation if self.mutation.startswith(
                ("model.onnx is", "model.safetensors is", "config.json is", "shrunk"))
                else "mutated content") + ")"
        return (self.fmt, r["kind"], r.get("entry", ""), r.get("exc_type", ""), where)

    def describe(self) -> str:
        r = self.record
        text = f"{r['kind']} at {r.get('entry', '?')}"
        if r.get("exc_type"):
            text += f": {r['exc_type']}"
        return f"{text}: {r.get('message', '')[:300]} [{r.get('where', '')}]"


@dataclass
class Campaign:
    """The cases of one run and their outcomes."""

    root: Path
    results: list[Result] = field(default_factory=list)

    def failures(self) -> dict[tuple[str, ...], list[Result]]:
        """Failures grouped by :meth:`Result.key`."""
        groups: dict[tuple[str, ...], list[Result]] = {}
        for r in self.results:
            if r.failed:
                groups.setdefault(r.key(), []).append(r)
        return groups

    def report(self) -> str:
        kinds: dict[str, int] = {}
        for r in self.results:
            kinds[r.record["kind"]] = kinds.get(r.record["kind"], 0) + 1
        peak = max((r.record.get("peak_kib", 0) for r in self.results), default=0)
        lines = [f"{len(self.results)} cases: {kinds}; highest peak RSS of a case that "
                 f"answered: {peak >> 10} MiB; failing cases kept under {self.root}"]
        for group in self.failures().values():
            first = group[0]
            lines.append(f"- {len(group)}x {first.fmt} seed {first.seed} ({first.mutation}): "
                         f"{first.describe()}\n  replay: python tests/fuzz/fuzz_runner.py "
                         f"{first.fmt} --seeds {first.seed}   files: {first.path}")
        return "\n".join(lines)


class Worker:
    """A worker process (``fuzz_worker.serve``) and the watch kept on it."""

    def __init__(self) -> None:
        self.process: Any = None
        self.conn: Any = None

    def start(self) -> None:
        import fuzz_worker

        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=fuzz_worker.serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        ready = self._wait(START_TIMEOUT_S)
        if ready.get("kind"):
            raise RuntimeError(f"the fuzz worker did not start: {ready}")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.process = None

    def _rss_kib(self) -> int:
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return 0
        match = re.search(r"VmRSS:\s+(\d+)", status)
        return int(match.group(1)) if match else 0

    def _wait(self, timeout: float) -> dict[str, Any]:
        """The worker's next message, or the verdict on why none came."""
        deadline = time.monotonic() + timeout
        peak = 0
        while True:
            try:
                if self.conn.poll(0.05):
                    record = self.conn.recv()
                    return record
            except (EOFError, OSError):
                pass
            if not self.process.is_alive() or self.conn.closed:
                self.process.join()
                code = self.process.exitcode
                name = signal.Signals(-code).name if code and code < 0 else f"exit {code}"
                self.process = None
                return {"kind": "crash", "entry": "worker", "exc_type": name,
                        "message": f"the worker died ({name})", "where": name}
            peak = max(peak, self._rss_kib())
            if peak > RSS_BUDGET_KIB or time.monotonic() > deadline:
                over = peak > RSS_BUDGET_KIB
                self.process.kill()
                self.process.join()
                self.process = None
                kind = "rss" if over else "hang"
                message = (f"RSS reached {peak >> 10} MiB, over {RSS_BUDGET_KIB >> 10} MiB"
                           if over else f"no answer within {timeout:.0f} s")
                return {"kind": kind, "entry": "worker", "exc_type": "", "message": message,
                        "where": kind}

    def run(self, fmt: str, path: Path, seed: int) -> dict[str, Any]:
        """One case's record; the worker is restarted when it did not survive the case."""
        fresh = self.process is None
        if fresh:
            self.start()
        self.conn.send((fmt, str(path), seed))
        # A fresh worker's first case also builds its pipelines (LLVM, on a loaded machine).
        record = self._wait(FIRST_CASE_TIMEOUT_S if fresh else CASE_TIMEOUT_S)
        stage = path / STAGE_FILE
        if record.get("entry") == "worker" and stage.exists():
            record["entry"] = stage.read_text()
        if record.get("peak_kib", 0) > RSS_BUDGET_KIB:
            record = {**record, "kind": "rss", "message": f"peak RSS {record['peak_kib'] >> 10}"
                      f" MiB over {RSS_BUDGET_KIB >> 10} MiB (was: {record['kind']})",
                      "where": "rss"}
        return record


class Cases:
    """Builds each case's files from its seed, under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = root / "base"
        self.base.mkdir(parents=True, exist_ok=True)
        self.model_files = write_tiny_model(self.base)
        self._onnx: dict[str, Any] | None = None

    def build(self, fmt: str, seed: int) -> tuple[Path, str]:
        """Write case ``seed`` of ``fmt`` into its own directory (a negative seed: the
        seed input itself, unmutated).

        Returns:
            The directory and what was mutated.
        """
        rng = random.Random(f"{fmt}:{seed}")
        case = self.root / f"{fmt}-{seed}"
        if case.exists():
            shutil.rmtree(case)
        case.mkdir()
        if fmt == "onnx":
            from fuzz_onnx_mutate import mutate_onnx

            if self._onnx is None:
                self._onnx = onnx_seeds()
            names = sorted(self._onnx)
            if seed < 0:  # the seed inputs themselves, unmutated
                name = names[(-seed - 1) % len(names)]
                data, mutation = self._onnx[name].SerializeToString(), "none"
            else:
                name = rng.choice(names)
                data, mutation = mutate_onnx(self._onnx[name], rng)
            (case / "model.onnx").write_bytes(data)
            mutation = f"{name}: {mutation}"
        else:
            target = _TARGETS[fmt]
            for rel in self.model_files:
                if rel != target:
                    (case / rel).parent.mkdir(parents=True, exist_ok=True)
                    os.link(self.base / rel, case / rel)
            original = self.model_files[target]
            if seed < 0:
                data, mutation = original, "none"
            elif fmt == "safetensors":
                data, mutation = mutate_safetensors(original, rng), "safetensors"
            else:
                data, mutation = mutate_config(json.loads(original), rng), "config"
            (case / target).write_bytes(data)
        shrink = False
        if seed >= 0 and rng.random() < SPECIAL_RATE:
            mutation = _special(case / _TARGETS[fmt], rng)
        elif fmt == "safetensors" and seed >= 0 and rng.random() < SHRINK_RATE:
            data, mutation, shrink = self.model_files[_TARGETS[fmt]], "shrunk while open", True
            (case / _TARGETS[fmt]).write_bytes(data)
        (case / "case.json").write_text(json.dumps({"format": fmt, "seed": seed,
                                                    "mutation": mutation, "shrink": shrink}))
        return case, mutation


def _special(path: Path, rng: random.Random) -> str:
    """Replace the file by one that is not a regular file of bytes: a FIFO no one writes,
    a directory, a link to an endless device, an empty file."""
    path.unlink()
    kind = rng.choice(["fifo", "directory", "/dev/zero", "empty"])
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "/dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_bytes(b"")
    return f"{path.name} is {kind}"


def run_campaign(root: Path, plan: list[tuple[str, int]], keep: bool = False) -> Campaign:
    """Run each ``(format, seed)`` of ``plan``; a passing case's files are removed unless
    ``keep``."""
    cases, worker, campaign = Cases(root), Worker(), Campaign(root)
    try:
        for fmt, seed in plan:
            path, mutation = cases.build(fmt, seed)
            result = Result(fmt, seed, mutation, worker.run(fmt, path, seed), path)
            campaign.results.append(result)
            if not result.failed and not keep:
                shutil.rmtree(path)
    finally:
        worker.stop()
    return campaign


def main(argv: list[str]) -> int:
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("formats", nargs="+", choices=FORMATS)
    parser.add_argument("--cases", type=int, default=20, help="seeds 0..N-1 per format")
    parser.add_argument("--first", type=int, default=0, help="first seed")
    parser.add_argument("--seeds", type=int, nargs="*", help="these seeds only")
    parser.add_argument("--keep", action="store_true", help="keep passing cases' files")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    seeds = args.seeds if args.seeds else range(args.first, args.first + args.cases)
    root = Path(tempfile.mkdtemp(prefix="vkumd-fuzz-"))
    start = time.monotonic()
    campaign = run_campaign(root, [(f, s) for f in args.formats for s in seeds], args.keep)
    if args.verbose:
        for r in campaign.results:
            print(f"{r.fmt} {r.seed} ({r.mutation}): {r.describe()}")
    print(campaign.report())
    print(f"{time.monotonic() - start:.1f} s")
    return 1 if campaign.failures() else 0


if __name__ == "__main__":
    if "PYTHONPATH" not in os.environ:  # the tree it is run from, not the installed vkumd
        sys.path.insert(1, os.getcwd())
    os.environ.setdefault("VKUMD_VALIDATION", "1")
    os.environ.setdefault("VKUMD_SYNC_VALIDATION", "1")
    sys.exit(main(sys.argv[1:]))

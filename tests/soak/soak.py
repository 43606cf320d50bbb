"""Soak: many eager dispatches, allocations, graph replays and contexts, watching for growth.

Four phases, each scaled by ``--scale`` (1.0 is the full soak)::

    dispatch   10**6 small adds (pairs that chain through two tensors, so the result
               proves every one ran), synchronizing after each chunk of 1000; one chunk in
               ten writes new output tensors instead of out= (release after GPU use)
    alloc      10**5 allocate/free steps of random sizes (1 B to 4 MiB, log-uniform, and one
               in 500 above the dedicated-block threshold), tensors and raw
               ctx.memory.allocate ranges, up to 64 alive at once, freed in random order
    replay     10**4 replays of a captured two-add graph, a new graph every 1000 replays
    contexts   10**3 Context open / small op / read back / close cycles

Before the phases a warm-up runs each of them at 1/100 of the soak, or at least
:data:`WARM_UP` (compiling kernels,
filling numpy's and the driver's caches); the baselines are taken after it. Bounds checked:

- RSS (``/proc/self/statm``) never more than ``RSS_BOUND`` (64 MiB) above the baseline;
- pool bytes in use back to the baseline after every phase, and the pool's held bytes back
  to it after ``free_all_blocks()``;
- ``vkumd.live_objects()`` equal to the baseline after every phase (every class), counted
  after the stream's descriptor-set cache is emptied (:func:`live`).

Run ``python tests/soak/soak.py`` (``make soak``); it prints progress and a table, and exits
1 when a bound is broken. ``tests/test_soak_short.py`` runs :func:`soak` scaled down.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import vkumd
from vkumd import ops

MiB = 1 << 20
RSS_BOUND = 64 * MiB
FULL = {"dispatch": 10**6, "alloc": 10**5, "replay": 10**4, "contexts": 10**3}
CHUNK = 1000  # dispatches between synchronizations
# Warm-up counts at least (also 1/100 of each phase): two dispatch chunks, so both the
# out= and the new-output paths compile before the baselines.
WARM_UP = {"dispatch": 2 * CHUNK, "alloc": 1000, "replay": 200, "contexts": 10}
LIVE_WINDOW = 64  # allocations alive at once in the alloc phase
LARGE_BYTES = 40 * MiB  # past the 32 MiB dedicated threshold of a 64 MiB block
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process (``/proc/self/statm``, second field)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE


def live(ctx: Any) -> dict[str, int]:
    """``vkumd.live_objects()`` after a garbage collection, with ``ctx``'s default stream idle
    and its descriptor-set cache emptied.

    The cache keeps a set per distinct (layout, buffers), up to ``CACHED_SETS`` in pools of
    1024. A released output's memory comes back only once the work that used it completes,
    so how many distinct offsets the dispatch phase's new outputs take, and how many sets
    and pools the cache then holds, follows how far the device lagged the host: under load
    the cache crosses into one more pool than after the warm-up, which is no leak. Pools
    the stream lost track of, or that other objects keep, are still counted.
    """
    ctx.default_stream.free_cached_sets()
    gc.collect()
    return vkumd.live_objects()


@dataclass
class Phase:
    """What one phase did and what it left behind."""

    name: str
    count: int
    seconds: float = 0.0
    rss_max_growth: int = 0
    used_after: int = 0
    held_after: int = 0
    live_diff: dict[str, tuple[int, int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


class Soak:
    """The four phases on one context, with the sampling and the bounds.

    Args:
        scale: multiplies every count of :data:`FULL` (at least 1 of each).
        say: where progress lines go.
        seed: the random sizes' seed.
    """

    def __init__(self, scale: float = 1.0, say: Callable[[str], Any] = print,
                 seed: int = 1234) -> None:
        self.counts = {name: max(1, round(n * scale)) for name, n in FULL.items()}
        self.say = say
        self.rng = np.random.default_rng(seed)
        self.ctx = vkumd.Context()
        n = 256
        self.one = self.ctx.tensor(np.ones(n, np.float32))
        self.x, self.y = self.ctx.zeros(n), self.ctx.zeros(n)
        self.rss_base = 0
        self.rss_peak = 0

    # -- sampling ---------------------------------------------------------------------------
    def sample(self, phase: Phase, done: int, started: float, every: int) -> None:
        """Note RSS; print a progress line every ``every`` steps."""
        rss = rss_bytes()
        self.rss_peak = max(self.rss_peak, rss)
        phase.rss_max_growth = max(phase.rss_max_growth, rss - self.rss_base)
        if done % every == 0 or done == phase.count:
            rate = done / max(time.perf_counter() - started, 1e-9)
            self.say(f"  {phase.name:9s} {done:>8d}/{phase.count:<8d} {rate:9.0f}/s  "
                     f"RSS {rss / MiB:7.1f} MiB (+{(rss - self.rss_base) / MiB:5.1f})  "
                     f"pool in use {self.ctx.memory.used_bytes() / MiB:7.2f} MiB  "
                     f"live {sum(vkumd.live_objects().values())}")

    # -- phases -----------------------------------------------------------------------------
    def dispatch(self, phase: Phase, n: int) -> None:
        """``n`` adds (rounded up to pairs): x and y leapfrog, each add adding one."""
        ctx, one, x, y = self.ctx, self.one, self.x, self.y
        ops.fill(x, 0.0)
        started, done, chunks = time.perf_counter(), 0, 0
        while done < n:
            steps = min(CHUNK, n - done + (n - done) % 2)
            fresh = chunks % 10 == 0  # new outputs: released while the device uses them
            for _ in range(steps // 2):
                if fresh:
                    ops.copy(ops.add(ops.add(x, one), one), out=x)
                else:
                    ops.add(x, one, out=y)
                    ops.add(y, one, out=x)
            ctx.synchronize()
            done += steps
            chunks += 1
            self.sample(phase, done, started, max(CHUNK, n // 10 // CHUNK * CHUNK))
        expect = float(n + n % 2)
        got = float(x.numpy()[0])
        if got != expect:
            phase.failures.append(f"after {n} adds x is {got}, expected {expect}")

    def alloc(self, phase: Phase, n: int) -> None:
        """``n`` random allocate/free steps; everything is freed at the end."""
        ctx, rng = self.ctx, self.rng
        alive: list[Any] = []
        started = time.perf_counter()
        for i in range(1, n + 1):
            if alive and (len(alive) >= LIVE_WINDOW or rng.random() < 0.45):
                item = alive.pop(int(rng.integers(len(alive))))
                if isinstance(item, vkumd.Tensor):
                    item.release()
                else:
                    ctx.memory.free(item)
            else:
                size = (LARGE_BYTES if rng.random() < 1 / 500
                        else int(2 ** rng.uniform(0, 22)))
                if rng.random() < 0.5:
                    alive.append(ctx.empty(max(1, size // 4), "float32"))
                else:
                    alive.append(ctx.memory.allocate(size))
            if i % 1000 == 0 or i == n:
                self.sample(phase, i, started, max(1000, n // 10 // 1000 * 1000))
        for item in alive:
            item.release() if isinstance(item, vkumd.Tensor) else ctx.memory.free(item)

    def _capture(self) -> Any:
        with self.ctx.capture() as graph:
            ops.add(self.x, self.one, out=self.y)
            ops.add(self.y, self.one, out=self.x)
        return graph

    def replay(self, phase: Phase, n: int) -> None:
        """``n`` replays of a two-add graph, recaptured every 1000; checks the sum."""
        ctx = self.ctx
        ops.fill(self.x, 0.0)
        graph = self._capture()
        started = time.perf_counter()
        for i in range(1, n + 1):
            graph.replay()
            if i % 100 == 0 or i == n:
                ctx.synchronize()
                self.sample(phase, i, started, max(100, n // 10 // 100 * 100))
            if i % 1000 == 0 and i < n:
                graph.release()
                graph = self._capture()
        ctx.synchronize()
        graph.release()
        got = float(self.x.numpy()[0])
        if got != 2.0 * n:
            phase.failures.append(f"after {n} replays x is {got}, expected {2.0 * n}")

    def contexts(self, phase: Phase, n: int) -> None:
        """``n`` context open/use/close cycles."""
        data = np.arange(16, dtype=np.float32)
        started = time.perf_counter()
        for i in range(1, n + 1):
            with vkumd.Context() as other:
                t = other.tensor(data)
                got = ops.add(t, t).numpy()
            if not np.array_equal(got, data + data):
                phase.failures.append(f"cycle {i}: wrong sum {got[:4]}...")
                break
            if i % 10 == 0 or i == n:
                self.sample(phase, i, started, max(10, n // 10 // 10 * 10))

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> list[Phase]:
        """Warm up, take baselines, run every phase and check the bounds after each."""
        steps = {"dispatch": self.dispatch, "alloc": self.alloc, "replay": self.replay,
                 "contexts": self.contexts}
        self.say("warm-up (1/100 of each phase)")
        warm = [Phase(f"warm-up {name}", min(self.counts[name],
                                             max(WARM_UP[name], self.counts[name] // 100)))
                for name in steps]
        for phase, step in zip(warm, steps.values(), strict=True):
            step(phase, phase.count)
        pool = self.ctx.memory
        pool.free_all_blocks()
        base_used, base_held, base_live = pool.used_bytes(), pool.total_bytes(), live(self.ctx)
        self.rss_base = self.rss_peak = rss_bytes()
        self.say(f"baseline: RSS {self.rss_base / MiB:.1f} MiB, pool in use {base_used} B, "
                 f"held {base_held} B, live objects {sum(base_live.values())}")
        phases = [phase for phase in warm if phase.failures]
        for name, step in steps.items():
            phase = Phase(name, self.counts[name])
            self.say(f"{name}: {phase.count}")
            started = time.perf_counter()
            step(phase, phase.count)
            self.ctx.synchronize()
            phase.seconds = time.perf_counter() - started
            self._check(phase, base_used, base_held, base_live)
            phases.append(phase)
        return phases

    def _check(self, phase: Phase, used: int, held: int, base_live: dict[str, int]) -> None:
        pool = self.ctx.memory
        now = live(self.ctx)
        phase.used_after = pool.used_bytes()
        pool.free_all_blocks()
        phase.held_after = pool.total_bytes()
        phase.live_diff = {name: (base_live.get(name, 0), now.get(name, 0))
                           for name in set(base_live) | set(now)
                           if base_live.get(name, 0) != now.get(name, 0)}
        if phase.rss_max_growth >= RSS_BOUND:
            phase.failures.append(f"RSS grew {phase.rss_max_growth / MiB:.1f} MiB past the "
                                  f"baseline (bound {RSS_BOUND // MiB} MiB)")
        if phase.used_after != used:
            phase.failures.append(f"pool bytes in use {phase.used_after}, baseline {used}")
        if phase.held_after > held:
            phase.failures.append(f"pool holds {phase.held_after} B after free_all_blocks(), "
                                  f"baseline {held} B")
        if phase.live_diff:
            phase.failures.append(f"live objects (baseline, now): {phase.live_diff}")

    def close(self) -> None:
        """Close the soak's context."""
        self.ctx.close()


def table(phases: list[Phase]) -> str:
    """The final table: one row per phase."""
    rows = [f"{'phase':9s} {'count':>9s} {'seconds':>8s} {'per s':>9s} {'RSS +max':>9s} "
            f"{'in use':>7s} {'held':>6s} {'live Δ':>6s}  verdict"]
    for p in phases:
        verdict = "FAIL: " + "; ".join(p.failures) if p.failures else "ok"
        rate = p.count / p.seconds if p.seconds else 0.0
        rows.append(f"{p.name:9s} {p.count:9d} {p.seconds:8.1f} {rate:9.0f} "
                    f"{p.rss_max_growth / MiB:6.1f} MiB {p.used_after:7d} {p.held_after:6d} "
                    f"{len(p.live_diff):6d}  {verdict}")
    return "\n".join(rows)


def soak(scale: float = 1.0, say: Callable[[str], Any] = print) -> list[Phase]:
    """Run the soak at ``scale`` and return its phases (failures listed in each)."""
    runner = Soak(scale, say)
    try:
        return runner.run()
    finally:
        runner.close()


def main(argv: list[str] | None = None) -> int:
    """Command line: ``soak.py [--scale S]``; exit status 1 if a bound was broken."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every phase's count (default 1: the full soak)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vkumd-soak-cache-") as cache:
        # A private kernel cache unless one is chosen: other processes writing the user's
        # cache meanwhile would otherwise show up in the soak's numbers and log.
        os.environ.setdefault("VKUMD_CACHE_DIR", cache)
        phases = soak(args.scale, lambda line: print(line, flush=True))
    print(table(phases))
    print(f"total {time.perf_counter() - started:.1f} s at scale {args.scale}")
    return 1 if any(p.failures for p in phases) else 0


if __name__ == "__main__":
    sys.exit(main())

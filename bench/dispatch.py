"""Host time per dispatch: eager ops, one big command buffer, graph replay, a round trip.

Usage: python bench/dispatch.py [--count N] [--repeats R] [--json PATH] [--only-this-process]

By default the script runs itself twice: with lavapipe's default worker threads and with
``LP_NUM_THREADS=0`` (lavapipe then executes on the submitting thread, which isolates
vkumd's own overhead from lavapipe's 50-90 us hand-off per dispatch). Each table puts
numpy's cost for the same tiny op (``np.add(a, b, out=c)`` on 64 floats) beside every row.
Goals with LP_NUM_THREADS=0: replay <= 1.5 us per dispatch, eager <= 15 us per op.

Rows (host microseconds per dispatch, median of R runs of N dispatches). "record" rows time
the Python side only; the submission follows outside the timer, because with
LP_NUM_THREADS=0 lavapipe executes a submission inside vkQueueSubmit, which would count
device time as host time. "+ run" rows include submitting and waiting.
- eager op, record: ``vkumd.ops.add(a, b, out=c)``: argument checks, plan, recording.
- eager op + run: the same, submitted and waited for (end-to-end throughput).
- recorded, record: N dispatches of one pipeline recorded into one command buffer through
  ``Stream.dispatch`` (no op-level Python).
- replay: ``graph.replay()`` of a captured graph of N dispatches; the host cost only.
- replay + run: the same, waiting for the device to finish the N dispatches.
- round trip: record one tiny dispatch, submit it and wait.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import vkumd
from vkumd import ops


def _per(run, count: int, repeats: int, after=None) -> tuple[float, float]:
    """Median wall and thread-CPU microseconds per dispatch of ``run()``.

    ``after()`` runs outside the timers. CPU time leaves out the time a shared machine's
    hypervisor takes the vCPU away, which swings wall time by 50% here between runs.
    """
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        run()
        cpu.append((time.thread_time() - start_cpu) / count)
        wall.append((time.perf_counter() - start) / count)
        if after is not None:
            after()
    return statistics.median(wall) * 1e6, statistics.median(cpu) * 1e6


def measure(count: int, repeats: int) -> dict:
    rows: dict[str, tuple[float, float]] = {}
    with vkumd.Context(validation=False) as ctx:
        host = np.random.default_rng().standard_normal((3, 64), dtype=np.float32)
        a, b, c = (ctx.tensor(row) for row in host)
        stream = ctx.stream(max_batch_dispatches=count + 1)
        with stream:
            ops.add(a, b, out=c)  # compile before timing
        stream.synchronize()

        def eager() -> None:
            with stream:
                for _ in range(count):
                    ops.add(a, b, out=c)

        rows["eager op, record"] = _per(eager, count, repeats, after=stream.synchronize)
        rows["eager op + run"] = _per(lambda: (eager(), stream.synchronize()), count, repeats)

        # The same dispatch through the stream directly: what recording alone costs.
        from vkumd.compiler.kernels.elementwise_plan import binary_plan

        (launch,) = binary_plan(ctx.caps, "add", "F32", (64,), (64,), (64,)).launches((a, b, c))
        program = ctx.kernels.program(launch.program)

        def recorded() -> None:
            for _ in range(count):
                stream.dispatch(program, launch.buffers, launch.push, launch.groups,
                                launch.writes)

        rows["recorded, record"] = _per(recorded, count, repeats, after=stream.synchronize)

        with ctx.capture() as graph:
            for _ in range(count):
                ops.add(a, b, out=c)
        graph.replay(stream)
        stream.synchronize()
        rows["replay"] = _per(lambda: graph.replay(stream), count, repeats)
        stream.synchronize()
        rows["replay + run"] = _per(lambda: (graph.replay(stream), stream.synchronize()),
                                     count, repeats)

        def round_trip() -> None:
            with stream:
                ops.add(a, b, out=c)
            stream.synchronize()

        rows["round trip"] = _per(round_trip, 1, max(repeats * 20, 50))
        assert np.allclose(c.numpy(), host[0] + host[1]), "the benchmark's add went wrong"
        graph.release()
        stream.release()

    x, y, z = host
    numpy_us = _per(lambda: [np.add(x, y, out=z) for _ in range(count)], count, repeats)[0]
    return {"lp_num_threads": os.environ.get("LP_NUM_THREADS", "default"), "count": count,
            "numpy_add_us": numpy_us, "rows": rows}


def print_table(result: dict) -> None:
    numpy_us = result["numpy_add_us"]
    print(f"\nLP_NUM_THREADS={result['lp_num_threads']}: host us per dispatch, median, "
          f"N={result['count']}; numpy np.add on 64 floats: {numpy_us:.2f} us")
    print(f"{'path':<20}{'wall us':>10}{'x numpy':>9}{'CPU us':>9}")
    for name, (wall, cpu) in result["rows"].items():
        print(f"{name:<20}{wall:>10.2f}{wall / numpy_us:>9.1f}{cpu:>9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--only-this-process", action="store_true",
                        help="measure once with the current environment and print JSON")
    args = parser.parse_args()
    if args.only_this_process:
        print(json.dumps(measure(args.count, args.repeats)))
        return
    results = []
    for threads in (None, "0"):
        env = dict(os.environ)
        if threads is None:
            env.pop("LP_NUM_THREADS", None)
        else:
            env["LP_NUM_THREADS"] = threads
        done = subprocess.run([sys.executable, __file__, "--only-this-process", "--count",
                               str(args.count), "--repeats", str(args.repeats)], env=env,
                              check=True, capture_output=True, text=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(result)
        print_table(result)
    zero = results[-1]["rows"]
    replay, eager = zero["replay"], zero["eager op, record"]
    print(f"\ngoals at LP_NUM_THREADS=0 (wall / CPU): replay {replay[0]:.2f} / {replay[1]:.2f} "
          f"us (<= 1.5), eager recording {eager[0]:.2f} / {eager[1]:.2f} us (<= 15)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()

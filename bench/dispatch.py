"""Host time per dispatch: eager ops, one big command buffer, graph replay, a round trip.

Usage: python bench/dispatch.py [--count N] [--repeats R] [--json PATH] [--only-this-process]

By default the script runs itself twice: with lavapipe's default worker threads and with
``LP_NUM_THREADS=0`` (lavapipe then executes on the submitting thread, which isolates
vkumd's own overhead from lavapipe's 50-90 us hand-off per dispatch). Each table puts
numpy's cost for the same tiny op (``np.add(a, b, out=c)`` on 64 floats) beside every row.
Goals with LP_NUM_THREADS=0: replay <= 1.5 us per dispatch, eager recording <= 8 us per op
(issue 14).

Rows (host microseconds per dispatch, median of R runs of N dispatches). "record" rows time
the Python side only; the submission follows outside the timer, because with
LP_NUM_THREADS=0 lavapipe executes a submission inside vkQueueSubmit, which would count
device time as host time. "+ run" rows include submitting and waiting.
- eager op, record: ``vkumd.ops.add(a, b, out=c)``: argument checks, plan, recording.
- eager op + run: the same, submitted and waited for (end-to-end throughput).
- eager, N outputs: ``ops.add(a, b, out=outs[i])`` into N outputs of their own (a descriptor
  set bound per dispatch, where the same output binds once), recording only.
- recorded, record: N dispatches of one pipeline recorded into one command buffer through
  ``Stream.dispatch`` (no op-level Python).
- replay: ``graph.replay()`` of a captured graph of N dispatches; the host cost only.
- replay + run: the same, waiting for the device to finish the N dispatches.
- round trip: record one tiny dispatch, submit it and wait.

Then the peer table (``--peers``, on by default): the same 1024-float add, 16 workgroups of 64,
through vkumd, wgpu-py (wgpu-native on its Vulkan backend, ``WGPU_BACKEND_TYPE=Vulkan``) and
vkdispatch, where installed (neither is a dependency; a missing one prints "not installed").
Per dispatch, wall and process-CPU microseconds: an eager round trip (record one add, submit,
wait), N adds batched into one submission (vkumd: one stream; wgpu: one compute pass;
vkdispatch: one fresh CommandGraph) including the wait, the same N adds each into an output
of its own (wgpu: N bind groups made beforehand, one set per dispatch, as a wgpu program
would keep them; vkdispatch: not measured, at about 1 ms a dispatch), and N replayed (vkumd:
a captured graph; vkdispatch: the recorded CommandGraph submitted again; wgpu has no replay).
The peer rows are medians of R runs taken in turns (vkumd, wgpu, vkdispatch, then again), so
a change in the shared machine's load touches every peer alike; the range follows in
brackets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

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
        outs = [ctx.empty(host.shape[1]) for _ in range(count)]
        stream = ctx.stream(max_batch_dispatches=count + 1)
        with stream:
            ops.add(a, b, out=c)  # compile before timing
            for out in outs:
                ops.add(a, b, out=out)  # and make each output's descriptor set
        stream.synchronize()

        def eager() -> None:
            with stream:
                for _ in range(count):
                    ops.add(a, b, out=c)

        rows["eager op, record"] = _per(eager, count, repeats, after=stream.synchronize)
        rows["eager op + run"] = _per(lambda: (eager(), stream.synchronize()), count, repeats)

        def distinct() -> None:
            with stream:
                for out in outs:
                    ops.add(a, b, out=out)

        rows["eager, N outputs"] = _per(distinct, count, repeats, after=stream.synchronize)

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
        for got in (c, outs[-1]):
            assert np.allclose(got.numpy(), host[0] + host[1]), "the benchmark's add went wrong"
        graph.release()
        stream.release()

    x, y, z = host
    numpy_us = _per(lambda: [np.add(x, y, out=z) for _ in range(count)], count, repeats)[0]
    return {"lp_num_threads": os.environ.get("LP_NUM_THREADS", "default"), "count": count,
            "numpy_add_us": numpy_us, "rows": rows}


def measure_all(count: int, repeats: int, peers: bool) -> dict:
    result = measure(count, repeats)
    if peers:
        result["peers"] = measure_peers(count, repeats)
    return result


PEER_N = 1024
PEER_GROUPS = 16
WGSL_ADD = """
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < arrayLength(&c)) {
        c[i] = a[i] + b[i];
    }
}
"""


# A peer's setup returns its rows -- name -> (run, dispatches per run) -- and a check of its
# results to call after timing.
PeerRows = dict[str, tuple[Callable[[], None], int]]
ROUND_TRIPS = 20  # an eager round trip is timed 20 in a row, per sample


def peer_vkumd(host: np.ndarray, count: int, stack: ExitStack) -> tuple[PeerRows, Callable]:
    ctx = stack.enter_context(vkumd.Context(validation=False))
    a, b, c = (ctx.tensor(row) for row in host)
    outs = [ctx.empty(PEER_N) for _ in range(count)]
    stream = ctx.stream(max_batch_dispatches=count + 1)
    stack.callback(stream.release)

    def eager() -> None:
        for _ in range(ROUND_TRIPS):
            with stream:
                ops.add(a, b, out=c)
            stream.synchronize()

    def batched() -> None:
        with stream:
            for _ in range(count):
                ops.add(a, b, out=c)
        stream.synchronize()

    def distinct() -> None:
        with stream:
            for out in outs:
                ops.add(a, b, out=out)
        stream.synchronize()

    eager()
    distinct()
    with ctx.capture() as graph:
        for _ in range(count):
            ops.add(a, b, out=c)
    stack.callback(graph.release)

    def check() -> None:
        want = host[0] + host[1]
        assert np.allclose(c.numpy(), want), "vkumd's add went wrong"
        assert np.allclose(outs[-1].numpy(), want), "vkumd's add went wrong"

    return {"eager round trip": (eager, ROUND_TRIPS), "batched": (batched, count),
            "distinct outputs": (distinct, count),
            "replayed": (lambda: (graph.replay(stream), stream.synchronize()), count)}, check


def peer_wgpu(host: np.ndarray, count: int, stack: ExitStack) -> tuple[PeerRows, Callable]:
    os.environ.setdefault("WGPU_BACKEND_TYPE", "Vulkan")
    import wgpu  # noqa: PLC0415 - optional peer

    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    device = adapter.request_device_sync()
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
    buffers = [device.create_buffer_with_data(data=row, usage=usage) for row in host]
    outs = [device.create_buffer(size=buffers[2].size, usage=usage) for _ in range(count)]
    pipeline = device.create_compute_pipeline(
        layout="auto", compute={"module": device.create_shader_module(code=WGSL_ADD),
                                "entry_point": "main"})

    def group(a: Any, b: Any, c: Any) -> Any:
        return device.create_bind_group(
            layout=pipeline.get_bind_group_layout(0),
            entries=[{"binding": i, "resource": {"buffer": buf, "offset": 0, "size": buf.size}}
                     for i, buf in enumerate((a, b, c))])

    bind_group = group(*buffers)
    # Made once, as a program keeps its bind groups; each dispatch then sets its own.
    out_groups = [group(buffers[0], buffers[1], out) for out in outs]

    def submit(groups: list[Any]) -> None:
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        if len(groups) == 1:
            compute.set_bind_group(0, groups[0])
        for i in range(count if len(groups) == 1 else len(groups)):
            if len(groups) > 1:
                compute.set_bind_group(0, groups[i])
            compute.dispatch_workgroups(PEER_GROUPS)
        compute.end()
        device.queue.submit([encoder.finish()])
        # wgpuDevicePoll(wait=True): wgpu 0.32's on_submitted_work_done_sync() fails against
        # its bundled wgpu-native (a callback signature mismatch).
        device._poll_wait()

    def eager() -> None:
        for _ in range(ROUND_TRIPS):
            encoder = device.create_command_encoder()
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, bind_group)
            compute.dispatch_workgroups(PEER_GROUPS)
            compute.end()
            device.queue.submit([encoder.finish()])
            device._poll_wait()

    eager()
    submit(out_groups)

    def check() -> None:
        for buf in (buffers[2], outs[-1]):
            out = np.frombuffer(device.queue.read_buffer(buf), dtype=np.float32)
            assert np.allclose(out, host[0] + host[1]), "wgpu's add went wrong"

    return {"eager round trip": (eager, ROUND_TRIPS),
            "batched": (lambda: submit([bind_group]), count),
            "distinct outputs": (lambda: submit(out_groups), count),
            "device": adapter.info["device"]}, check  # type: ignore[dict-item]


def peer_vkdispatch(host: np.ndarray, count: int, stack: ExitStack
                    ) -> tuple[PeerRows, Callable]:
    import vkdispatch as vd  # noqa: PLC0415 - optional peer
    import vkdispatch.codegen as vc  # noqa: PLC0415

    if not vd.is_context_initialized():
        vd.make_context(device_ids=[0])  # its default choice skips CPU devices

    # Annotations given explicitly: this module's postponed annotations are strings.
    @vd.shader(workgroups=(PEER_GROUPS, 1, 1), local_size=(64, 1, 1),
               arg_type_annotations=[vc.Buffer[vc.f32]] * 3, arg_names=["a", "b", "c"],
               arg_defaults=[None] * 3)
    def add(a, b, c) -> None:
        index = vc.global_invocation_id().x
        c[index] = a[index] + b[index]

    a, b, c = (vd.asbuffer(row.copy()) for row in host)

    def batched(dispatches: int) -> None:
        graph = vd.CommandGraph()
        for _ in range(dispatches):
            add(a, b, c, graph=graph)
        graph.submit()
        vd.queue_wait_idle()

    def eager() -> None:
        for _ in range(ROUND_TRIPS):
            batched(1)

    batched(1)
    recorded = vd.CommandGraph()
    for _ in range(count):
        add(a, b, c, graph=recorded)

    def check() -> None:
        assert np.allclose(c.read(0), host[0] + host[1]), "vkdispatch's add went wrong"

    return {"eager round trip": (eager, ROUND_TRIPS),
            "batched": (lambda: batched(count), count),
            "replayed": (lambda: (recorded.submit(), vd.queue_wait_idle()), count)}, check


PEERS = (("vkumd", peer_vkumd), ("wgpu", peer_wgpu), ("vkdispatch", peer_vkdispatch))
PEER_ROWS = ("eager round trip", "batched", "distinct outputs", "replayed")


def measure_peers(count: int, repeats: int) -> dict:
    """Each peer's rows as ``[median wall, median process CPU, lowest wall, highest wall]``
    microseconds per dispatch, the peers timed in turns, one run of each row per round."""
    host = np.random.default_rng(1).standard_normal((3, PEER_N), dtype=np.float32)
    host[2] = 0
    results: dict[str, dict | str] = {}
    with ExitStack() as stack:
        ready: dict[str, tuple[PeerRows, Callable]] = {}
        for name, setup in PEERS:
            try:
                ready[name] = setup(host, count, stack)
            except ImportError:
                results[name] = "not installed"
            except Exception as exc:  # noqa: BLE001 - a peer failing must not stop the table
                results[name] = f"failed: {type(exc).__name__}: {exc}"
        samples: dict[str, dict[str, list[tuple[float, float]]]] = {
            name: {row: [] for row in rows if row in PEER_ROWS}
            for name, (rows, _) in ready.items()}
        for _ in range(repeats):
            for name, (rows, _) in ready.items():
                for row in samples[name]:
                    run, per = rows[row]
                    start, start_cpu = time.perf_counter(), time.process_time()
                    run()
                    samples[name][row].append(((time.perf_counter() - start) / per * 1e6,
                                               (time.process_time() - start_cpu) / per * 1e6))
        for name, (rows, check) in ready.items():
            check()
            walls = {row: sorted(w for w, _ in got) for row, got in samples[name].items()}
            results[name] = {
                row: [statistics.median(walls[row]), statistics.median(c for _, c in got),
                      walls[row][0], walls[row][-1]]
                for row, got in samples[name].items()}
            if "device" in rows:
                results[name]["device"] = rows["device"]
    return results


def print_peers(lp_threads: str, peers: dict) -> None:
    print(f"\npeers, LP_NUM_THREADS={lp_threads}: {PEER_N}-float add, {PEER_GROUPS} workgroups "
          "of 64 (vkumd: its planner's grid); us per dispatch, median wall / process CPU "
          "[wall range]; x = peer / vkumd (wall)")
    ours = peers.get("vkumd")
    for row in PEER_ROWS:
        cells = []
        for name, rows in peers.items():
            if not isinstance(rows, dict):
                cells.append(f"{name} {rows}")
            elif row not in rows:
                cells.append(f"{name} n/a")
            else:
                wall, cpu, low, high = rows[row]
                ratio = (f" x{wall / ours[row][0]:.2f}"
                         if isinstance(ours, dict) and name != "vkumd" else "")
                cells.append(f"{name} {wall:.1f} / {cpu:.1f} [{low:.1f}-{high:.1f}]{ratio}")
        print(f"  {row:<17}" + "; ".join(cells))


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
    parser.add_argument("--no-peers", action="store_true", help="skip the peer table")
    parser.add_argument("--only-this-process", action="store_true",
                        help="measure once with the current environment and print JSON")
    args = parser.parse_args()
    if args.only_this_process:
        print(json.dumps(measure_all(args.count, args.repeats, not args.no_peers)))
        return
    results = []
    for threads in (None, "0"):
        env = dict(os.environ)
        if threads is None:
            env.pop("LP_NUM_THREADS", None)
        else:
            env["LP_NUM_THREADS"] = threads
        done = subprocess.run([sys.executable, __file__, "--only-this-process", "--count",
                               str(args.count), "--repeats", str(args.repeats)]
                              + (["--no-peers"] if args.no_peers else []), env=env,
                              check=True, capture_output=True, text=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(result)
        print_table(result)
        if "peers" in result:
            print_peers(result["lp_num_threads"], result["peers"])
    zero = results[-1]["rows"]
    replay, eager = zero["replay"], zero["eager op, record"]
    print(f"\ngoals at LP_NUM_THREADS=0 (wall / CPU): replay {replay[0]:.2f} / {replay[1]:.2f} "
          f"us (<= 1.5), eager recording {eager[0]:.2f} / {eager[1]:.2f} us (<= 8)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()

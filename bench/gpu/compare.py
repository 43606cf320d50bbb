"""vkumd against PyTorch on the same GPU, in the same run: GEMM, attention, the sentence
encoder, compiled graphs, dispatch cost.

Usage: python bench/gpu/compare.py --json OUT.json [--md OUT.md] [--budget-s 240]
                                   [--sections gemm,attention,model,graph,vision,generation,
                                               dispatch] [--quick]
                                   [--peer auto|torch|numpy] [--model DIR] [--model-dtype D]
                                   [--ppocr DIR]

Peers. On a machine where PyTorch sees a CUDA device (the H200 run, ``bench/gpu/run.sh``),
the peer is ``torch.matmul`` (cuBLAS) for GEMM and
``torch.nn.functional.scaled_dot_product_attention`` for attention, on the same GPU, timed
with CUDA events. Anywhere else (CI, a rehearsal on lavapipe) the peer is numpy float32 on
the host, timed with the wall clock, and ``--quick`` shrinks every shape so a CPU driver
finishes in seconds; those numbers only prove the script works.

vkumd is timed with its own events (GPU timestamp queries): ``reps`` calls between two
events, median over ``--groups`` such groups, after one warm-up call that also compiles.
Every case also checks vkumd's result against the peer's by relative Frobenius error.

Model rows: ``SentenceEncoder.encode`` sentences/s at batch 1, 32 and 256 (``--quick``: 1, 4,
8) against the same weights in a plain PyTorch BERT on the same GPU (SDPA attention, erf GELU),
eager and ``torch.compile``d; every peer tokenizes with the same tokenizer inside its timed
call, and its embeddings are compared with vkumd's (cosine, largest absolute difference).
Without PyTorch on CUDA the torch peers are skipped with the reason, and the float64 numpy
reference (tests/framework/models/reference.py) checks vkumd's embeddings instead. Graph rows:
one encoder layer through ``vkumd.compile`` (recorded and replayed) against the same function
called eagerly, op by op, at the model rows' batch sizes and 128 tokens.

Cases run in priority order -- the goal cases first (GEMM float16 4096^3, attention at seq
4096), then the model and graph rows, the generation and vision rows, then the other GEMM and
attention shapes -- and stop
when ``--budget-s`` is spent; the rest are listed as skipped, so a slow
kernel cannot cost the whole run. Float16 GEMM accumulates in float32 on both sides (PyTorch's
reduced-precision split-K reduction is turned off). Attention FLOPs are 4 * B * H * Lq * Lk *
D, halved when causal (flash-attention's convention), for vkumd and the peer alike.

Vision rows (vision_rows.py): convolutions against cuDNN, torchvision CNNs against PyTorch,
PP-OCRv4 and ONNX's light ResNet-50 against onnxruntime. Generation rows (llm_rows.py): a
SmolLM2-135M-shaped Llama written there with random weights, prefill and decode tokens/s,
against the same weights in PyTorch. Both come after the model and graph rows, generation
first.

``VKUMD_GEMM_CONFIGS`` (comma-separated values of ``VKUMD_GEMM_COOPMAT_TILE``) adds rows that
force each listed cooperative-matrix tile configuration at 4096^3; likewise
``VKUMD_ATTENTION_CONFIGS`` for ``VKUMD_ATTENTION_COOPMAT_BLOCK`` at seq 4096.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import vkumd
from vkumd import ops

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import llm_rows  # noqa: E402  (bench/gpu/llm_rows.py, beside this file)
import model_rows  # noqa: E402  (bench/gpu/model_rows.py, beside this file)
import report  # noqa: E402  (bench/gpu/report.py, beside this file)
import vision_rows  # noqa: E402  (bench/gpu/vision_rows.py, beside this file)

SECTIONS = ("gemm", "attention", "model", "graph", "vision", "generation", "dispatch")

GEMM_SQUARE = [4096, 8192]
# Transformer projections as (M tokens, N, K): BERT-base fused QKV, MLP up and down at
# 4 x 512 tokens, then 7B-class projections at 8192 tokens.
GEMM_TRANSFORMER = [(2048, 2304, 768), (2048, 3072, 768), (2048, 768, 3072),
                    (8192, 4096, 4096), (8192, 11008, 4096), (8192, 4096, 11008)]
ATTENTION_BATCH = 4
ATTENTION_HEADS = [16, 32]
ATTENTION_SEQS = [4096, 1024, 2048, 8192]  # the goal's sequence first
ATTENTION_HEAD_DIMS = [64, 128]


class Budget:
    """Seconds left for measuring; cases check it before they start."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


# -- peers ----------------------------------------------------------------------------------
class TorchPeer:
    """cuBLAS and SDPA through PyTorch on the CUDA device, timed with CUDA events."""

    name = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_tf32 = False
        self.device = torch.device("cuda")

    def describe(self) -> dict:
        torch = self.torch
        return {"peer": "torch", "torch": torch.__version__, "cuda": torch.version.cuda,
                "gpu": torch.cuda.get_device_name(0)}

    def random(self, shape: tuple[int, ...], dtype: str) -> tuple[Any, np.ndarray]:
        """A device tensor of standard-normal values and the same values on the host."""
        t = self.torch.randn(shape, device=self.device, dtype=getattr(self.torch, dtype))
        return t, t.cpu().numpy()

    def time_ms(self, run: Callable[[], Any], reps: int, groups: int) -> float:
        torch = self.torch
        run()
        torch.cuda.synchronize()
        samples = []
        for _ in range(groups):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / reps)
        return statistics.median(samples)

    def matmul(self, a: Any, b: Any) -> Callable[[], Any]:
        return lambda: self.torch.matmul(a, b)

    def attention(self, q: Any, k: Any, v: Any, causal: bool) -> Callable[[], Any]:
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        return lambda: sdpa(q, k, v, is_causal=causal)

    def relative_error(self, ours: np.ndarray, theirs: Any) -> float:
        torch = self.torch
        mine = torch.from_numpy(np.ascontiguousarray(ours)).to(self.device, torch.float32)
        ref = theirs.to(torch.float32)
        return float(torch.linalg.vector_norm(mine - ref) /
                     max(float(torch.linalg.vector_norm(ref)), 1e-30))

    def release(self) -> None:
        self.torch.cuda.empty_cache()


class NumpyPeer:
    """numpy float32 on the host: only proves the script on a machine without CUDA."""

    name = "numpy"

    def describe(self) -> dict:
        return {"peer": "numpy", "numpy": np.__version__, "gpu": "none (host numpy float32)"}

    def random(self, shape: tuple[int, ...], dtype: str) -> tuple[Any, np.ndarray]:
        host = np.random.default_rng().standard_normal(shape, dtype=np.float32)
        host = host.astype(dtype)
        return host.astype(np.float32), host

    def time_ms(self, run: Callable[[], Any], reps: int, groups: int) -> float:
        run()
        samples = []
        for _ in range(groups):
            start = time.perf_counter()
            for _ in range(reps):
                run()
            samples.append((time.perf_counter() - start) * 1e3 / reps)
        return statistics.median(samples)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> Callable[[], Any]:
        return lambda: a @ b

    def attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  causal: bool) -> Callable[[], Any]:
        def run() -> np.ndarray:
            scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
            if causal:
                lq, lk = scores.shape[-2:]
                visible = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
                scores = np.where(visible, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            return (scores / scores.sum(axis=-1, keepdims=True)) @ v
        return run

    def relative_error(self, ours: np.ndarray, theirs: np.ndarray) -> float:
        ref = np.asarray(theirs, dtype=np.float64)
        return float(np.linalg.norm(ours.astype(np.float64) - ref) /
                     max(float(np.linalg.norm(ref)), 1e-30))

    def release(self) -> None:
        pass


def choose_peer(kind: str) -> TorchPeer | NumpyPeer:
    """``torch`` when asked or when ``auto`` finds PyTorch with CUDA, else numpy."""
    if kind in ("auto", "torch"):
        try:
            import torch
            if torch.cuda.is_available():
                return TorchPeer()
            reason = "torch.cuda.is_available() is False"
        except ImportError as exc:
            reason = f"PyTorch is not importable ({exc})"
        if kind == "torch":
            raise SystemExit(f"compare.py: --peer torch asked for, but {reason}")
        print(f"compare.py: {reason}; the peer is numpy on the host", flush=True)
    return NumpyPeer()


# -- vkumd timing ----------------------------------------------------------------------------
def vkumd_ms(ctx: vkumd.Context, run: Callable[[], Any], groups: int) -> float:
    """Median device milliseconds per call of ``run`` between two timestamped events.

    The first call (which also compiles) is timed on the host to size the groups.
    """
    start = time.perf_counter()
    run()
    ctx.synchronize()
    reps = reps_for(time.perf_counter() - start)
    samples = []
    for _ in range(groups):
        begin = ctx.current_stream().record()
        for _ in range(reps):
            run()
        end = ctx.current_stream().record()
        samples.append(begin.elapsed_time(end) / reps)
    return statistics.median(samples)


def reps_for(seconds_per_call: float, target_s: float = 0.05) -> int:
    """Calls per timed group so that one group lasts about ``target_s``."""
    return int(min(50, max(1, target_s / max(seconds_per_call, 1e-6))))


# -- cases -----------------------------------------------------------------------------------
@contextlib.contextmanager
def forced(name: str, value: str | None) -> Iterator[None]:
    """Set environment variable ``name`` to ``value`` inside the block (nothing when None)."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def gemm_case(ctx: vkumd.Context, peer: Any, m: int, n: int, k: int, dtype: str, label: str,
              variant: str | None = None, tile: str | None = None) -> dict:
    """One GEMM shape: vkumd (optionally a forced variant or tile config) against the peer."""
    from vkumd.compiler.kernels.gemm_choice import GemmShape, choose_variant

    row: dict[str, Any] = {"case": label, "m": m, "n": n, "k": k, "dtype": dtype,
                           "flop": 2.0 * m * n * k}
    with forced("VKUMD_GEMM_COOPMAT_TILE", tile):
        peer_a, host_a = peer.random((m, k), dtype)
        peer_b, host_b = peer.random((k, n), dtype)
        a, b = ctx.tensor(host_a), ctx.tensor(host_b)
        c = ctx.empty((m, n), a.dtype)
        row["variant"] = choose_variant(ctx.caps, a.dtype, GemmShape(m, n, k),
                                        force=variant).name
        if tile:
            row["tile"] = tile

        def ours() -> None:
            ops.matmul(a, b, out=c, variant=variant)

        row["vkumd_ms"] = vkumd_ms(ctx, ours, groups=5)
        theirs = peer.matmul(peer_a, peer_b)
        row["peer_ms"] = peer.time_ms(theirs, reps_for(row["vkumd_ms"] / 1e3), groups=5)
        row["rel_err"] = peer.relative_error(c.numpy(), theirs())
        for t in (a, b, c):
            t.release()
        peer.release()
    return row


def attention_case(ctx: vkumd.Context, peer: Any, batch: int, heads: int, seq: int, dim: int,
                   causal: bool, label: str, block: str | None = None) -> dict:
    """One attention shape: ``vkumd.ops.attention`` against the peer (SDPA on CUDA)."""
    from vkumd.framework.opset.attention import choose_path

    flop = 4.0 * batch * heads * seq * seq * dim * (0.5 if causal else 1.0)
    row: dict[str, Any] = {"case": label, "batch": batch, "heads": heads, "seq": seq,
                           "head_dim": dim, "causal": causal, "dtype": "float16", "flop": flop}
    with forced("VKUMD_ATTENTION_COOPMAT_BLOCK", block):
        shape = (batch, heads, seq, dim)
        tensors = [peer.random(shape, "float16") for _ in range(3)]
        q, k, v = (ctx.tensor(host) for _, host in tensors)
        out = ctx.empty(shape, q.dtype)
        row["path"] = choose_path(q, k, v)
        if block:
            row["block"] = block

        def ours() -> None:
            ops.attention(q, k, v, causal=causal, out=out)

        row["vkumd_ms"] = vkumd_ms(ctx, ours, groups=3)
        theirs = peer.attention(*(t for t, _ in tensors), causal)
        row["peer_ms"] = peer.time_ms(theirs, reps_for(row["vkumd_ms"] / 1e3), groups=3)
        row["rel_err"] = peer.relative_error(out.numpy(), theirs())
        for t in (q, k, v, out):
            t.release()
        peer.release()
    return row


def gemm_cases(quick: bool) -> list[tuple[str, dict]]:
    """(label, keyword arguments of gemm_case) in priority order."""
    scale = 16 if quick else 1
    cases: list[tuple[str, dict]] = []
    for size in GEMM_SQUARE:
        s = size // scale
        cases.append((f"square {s}", {"m": s, "n": s, "k": s, "dtype": "float16"}))
    for tile in filter(None, os.environ.get("VKUMD_GEMM_CONFIGS", "").split(",")):
        s = GEMM_SQUARE[0] // scale
        cases.append((f"square {s}, tile {tile}",
                      {"m": s, "n": s, "k": s, "dtype": "float16", "variant": "coopmat",
                       "tile": tile}))
    s = GEMM_SQUARE[0] // scale
    cases.append((f"square {s}, no coopmat",
                  {"m": s, "n": s, "k": s, "dtype": "float16", "variant": "shared"}))
    cases.append((f"square {s}, float32",
                  {"m": s, "n": s, "k": s, "dtype": "float32"}))
    for m, n, k in GEMM_TRANSFORMER:
        m, n, k = max(1, m // scale), max(1, n // scale), max(1, k // scale)
        cases.append((f"transformer {m}x{n}x{k}", {"m": m, "n": n, "k": k,
                                                    "dtype": "float16"}))
    return cases


def attention_cases(quick: bool) -> list[tuple[str, dict]]:
    seqs = [s // 32 for s in ATTENTION_SEQS[:2]] if quick else ATTENTION_SEQS
    heads = [2] if quick else ATTENTION_HEADS
    batch = 1 if quick else ATTENTION_BATCH
    cases: list[tuple[str, dict]] = []
    for seq in seqs:
        for dim in ATTENTION_HEAD_DIMS:
            for h in heads:
                for causal in (False, True):
                    label = f"b{batch} h{h} s{seq} d{dim}{' causal' if causal else ''}"
                    cases.append((label, {"batch": batch, "heads": h, "seq": seq, "dim": dim,
                                          "causal": causal}))
        if seq == seqs[0]:
            for block in filter(None, os.environ.get("VKUMD_ATTENTION_CONFIGS", "").split(",")):
                h, dim = heads[-1], ATTENTION_HEAD_DIMS[-1]
                cases.append((f"b{batch} h{h} s{seq} d{dim}, block {block}",
                              {"batch": batch, "heads": h, "seq": seq, "dim": dim,
                               "causal": False, "block": block}))
    return cases


def run_cases(kind: str, cases: list[tuple[str, dict]], measure: Callable[..., dict],
              budget: Budget, rows: list[dict], save: Callable[[], None]) -> None:
    """Measure each case into ``rows`` while budget is left, saving after each one (a run
    stopped by its time limit keeps what it measured); a failing case is recorded, not
    fatal."""
    for label, kwargs in cases:
        if budget.left() <= 0:
            rows.append({"case": label, **kwargs, "skipped": "time budget spent"})
            continue
        print(f"{kind}: {label} ...", flush=True)
        try:
            row = measure(label=label, **kwargs)
        except Exception as exc:  # a broken case must not stop the others
            traceback.print_exc()
            row = {"case": label, **kwargs, "error": f"{type(exc).__name__}: {exc}"}
        rows.append(row)
        save()
        print(f"  {report.summary(row)}", flush=True)


def dispatch_rows(timeout_s: float) -> dict:
    """Host microseconds per dispatch (bench/dispatch.py in this environment)."""
    script = HERE.parent / "dispatch.py"
    done = subprocess.run([sys.executable, str(script), "--only-this-process", "--count",
                           "1000", "--repeats", "5"], capture_output=True, text=True,
                          timeout=max(timeout_s, 10))
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def environment(ctx: vkumd.Context, peer: Any) -> dict:
    caps = ctx.caps
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": caps.name, "driver_name": caps.driver_name,
            "driver_info": caps.driver_info,
            "driver_version": report.driver_version_text(caps.vendor_id, caps.driver_version),
            "vulkan": ".".join(map(str, caps.api_version)),
            "coopmat_shapes": [str(s) for s in caps.cooperative_matrix_shapes],
            "vkumd_commit": os.environ.get("VKUMD_COMMIT", "unknown"),
            "python": platform.python_version(), **peer.describe()}


def is_goal(section: str, kwargs: dict, quick: bool) -> bool:
    """The cases the goals are measured on: GEMM float16 4096^3 (default choice), attention
    at seq 4096 (default blocks); their --quick stand-ins likewise."""
    scale_gemm, scale_seq = (16, 32) if quick else (1, 1)
    if section == "gemm":
        return (kwargs.get("m") == GEMM_SQUARE[0] // scale_gemm and kwargs.get("dtype") ==
                "float16" and "variant" not in kwargs)
    return kwargs.get("seq") == ATTENTION_SEQS[0] // scale_seq and "block" not in kwargs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="write the results here")
    parser.add_argument("--md", help="also write the markdown report here")
    parser.add_argument("--budget-s", type=float, default=240.0,
                        help="stop starting new cases after this many seconds")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--quick", action="store_true",
                        help="shapes small enough for a CPU driver (rehearsal only)")
    parser.add_argument("--peer", choices=("auto", "torch", "numpy"), default="auto")
    parser.add_argument("--model", default=os.environ.get("VKUMD_GPU_MODEL",
                                                          "all-MiniLM-L6-v2"),
                        help="model directory or installed name for the model and graph rows")
    parser.add_argument("--model-dtype", choices=("float16", "float32"), default="float16")
    parser.add_argument("--ppocr", type=Path, default=None,
                        help="folder of the PP-OCRv4 ONNX files for the vision rows")
    args = parser.parse_args(argv)
    sections = set(args.sections.split(","))
    unknown = sections - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; use {', '.join(SECTIONS)}")

    peer = choose_peer(args.peer)
    budget = Budget(args.budget_s)
    results: dict[str, Any] = {}

    def save() -> None:
        results["goals"] = report.goals(results)
        Path(args.json).write_text(json.dumps(results, indent=2), encoding="utf-8")

    with vkumd.Context(validation=False) as ctx:
        results["environment"] = environment(ctx, peer)
        print(json.dumps(results["environment"], indent=2), flush=True)
        measure = {"gemm": lambda **kw: gemm_case(ctx, peer, **kw),
                   "attention": lambda **kw: attention_case(ctx, peer, **kw)}
        listed = {"gemm": gemm_cases(args.quick), "attention": attention_cases(args.quick)}
        kernel_sections = [name for name in ("gemm", "attention") if name in sections]
        # The goal cases first, then the model and graph rows, then every other shape.
        for name in kernel_sections:
            goal = [c for c in listed[name] if is_goal(name, c[1], args.quick)]
            run_cases(name, goal, measure[name], budget, results.setdefault(name, []), save)
        if sections & {"model", "graph"}:
            model_sections(ctx, peer, args, sections, budget, results, save)
        # Generation is one case (the model is written once): before the many vision cases.
        if "generation" in sections:
            generation_section(peer, args, budget, results, save)
        if "vision" in sections:
            vision_section(ctx, peer, args, budget, results, save)
        for name in kernel_sections:
            rest = [c for c in listed[name] if not is_goal(name, c[1], args.quick)]
            run_cases(name, rest, measure[name], budget, results[name], save)
    if "dispatch" in sections:
        results["dispatch"] = dispatch_rows(max(budget.left(), 60.0))
    save()
    text = report.markdown(results)
    if args.md:
        Path(args.md).write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0


def vision_section(ctx: vkumd.Context, peer: Any, args: argparse.Namespace, budget: Budget,
                   results: dict, save: Callable[[], None]) -> None:
    """Convolutions, torchvision CNNs and ONNX vision files (vision_rows.py)."""
    rows = results.setdefault("vision", [])
    device_ms = lambda run: vkumd_ms(ctx, run, groups=3)  # noqa: E731
    run_cases("vision", vision_rows.conv_cases(args.quick),
              lambda **kw: vision_rows.conv_case(ctx, peer, device_ms, **kw), budget, rows, save)
    run_cases("vision", vision_rows.torchvision_cases(args.quick),
              lambda **kw: vision_rows.torchvision_case(ctx, peer, quick=args.quick, **kw),
              budget, rows, save)
    run_cases("vision", vision_rows.onnx_cases(args.ppocr, args.quick),
              lambda **kw: vision_rows.onnx_case(ctx, quick=args.quick, **kw), budget, rows,
              save)


def generation_section(peer: Any, args: argparse.Namespace, budget: Budget, results: dict,
                       save: Callable[[], None]) -> None:
    """The SmolLM2-shaped model's prefill and decode rows (llm_rows.py), in their own
    contexts (the generator opens one); recorded, not fatal, when they fail."""
    rows = results.setdefault("generation", [])
    if budget.left() <= 0:
        rows.append({"case": "generation", "skipped": "time budget spent"})
        return
    print("generation: SmolLM2-shaped model ...", flush=True)
    device = "cuda" if peer.name == "torch" else None
    reason = None if device else "needs PyTorch on CUDA (the peer is numpy here)"
    if device is None:
        try:
            import torch  # noqa: F401  (a CPU PyTorch still proves the peer's code)
            device, reason = "cpu", None
        except ImportError as exc:
            reason = f"PyTorch is not importable ({exc})"
    try:
        rows.extend(llm_rows.rows(args.quick, device, reason))
    except Exception as exc:  # a broken section must not cost the rest of the run
        traceback.print_exc()
        rows.append({"case": "generation", "error": f"{type(exc).__name__}: {exc}"})
    save()
    for row in rows:
        print(f"  {row['case']}: {report.summary(row)}", flush=True)


def model_sections(ctx: vkumd.Context, peer: Any, args: argparse.Namespace, sections: set[str],
                   budget: Budget, results: dict, save: Callable[[], None]) -> None:
    """The sentence-encoder rows, then the compiled-layer rows; a model that cannot load is
    recorded against every row, not fatal."""
    batches = model_rows.QUICK_BATCHES if args.quick else model_rows.MODEL_BATCHES
    # torch.compile's first calls compile (minutes on a CPU, not yet measured on the H200):
    # its rows come last, after the eager peer's and the compiled-graph rows.
    model_list = [(f"encode batch {b}", {"batch": b, "peers": ("torch eager",)})
                  for b in batches]
    compiled_list = [(f"encode batch {b}, torch.compile", {"batch": b,
                                                           "peers": ("torch.compile",)})
                     for b in batches]
    graph_list = [(f"layer b{b} s{s}", {"batch": b, "seq": s})
                  for b, s in model_rows.graph_shapes(args.quick)]
    wanted = [(name, cases) for name, cases in (("model", model_list), ("graph", graph_list),
                                                ("model", compiled_list))
              if name in sections]
    try:
        runner = model_rows.ModelRunner(ctx, args.model, args.model_dtype, peer.name,
                                        args.quick)
    except Exception as exc:
        traceback.print_exc()
        for name, cases in wanted:
            results.setdefault(name, []).extend(
                {"case": label, **kw, "error": f"loading {args.model}: "
                 f"{type(exc).__name__}: {exc}"} for label, kw in cases)
        save()
        return
    results["model_info"] = {"model": str(runner.files.root), "dtype": args.model_dtype,
                             "packed": runner.kept is not None,
                             "torch_peers": runner.torch_reason or "run"}
    try:
        device_ms = lambda run: vkumd_ms(ctx, run, groups=3)  # noqa: E731
        measure = {"model": lambda **kw: runner.case(**kw),
                   "graph": lambda **kw: model_rows.graph_case(ctx, runner, device_ms=device_ms,
                                                               **kw)}
        for name, cases in wanted:
            run_cases(name, cases, measure[name], budget, results.setdefault(name, []), save)
    finally:
        runner.close()


if __name__ == "__main__":
    sys.exit(main())

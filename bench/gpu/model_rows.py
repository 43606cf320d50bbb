"""The GPU run's sentence-encoder and compiled-graph rows (see compare.py's docstring).

Model rows: ``SentenceEncoder.encode`` sentences/s against the same weights in PyTorch
(:class:`TorchBert`, eager and ``torch.compile``d) on the same GPU; graph rows: one encoder
layer through ``vkumd.compile`` against the same function run eagerly.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL_BATCHES = [1, 32, 256]
QUICK_BATCHES = [1, 4, 8]
GRAPH_SEQ = 128
QUICK_GRAPH_SEQ = 16
TORCH_PEERS = ("torch eager", "torch.compile")


def _module(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sentence_count(batch: int, quick: bool) -> int:
    """Sentences per model row: a few batches, and enough to time batch 1 fairly."""
    if quick:
        return max(2 * batch, 4)
    return {1: 64, 32: 512}.get(batch, 4 * batch)


def model_texts(quick: bool) -> list[str]:
    """Every sentence the model rows embed (bench/model.py's short set, seeded by batch)."""
    sentences = _module("bench_model", ROOT / "bench" / "model.py").sentences
    batches = QUICK_BATCHES if quick else MODEL_BATCHES
    texts: list[str] = []
    for batch in batches:
        texts += sentences("short", sentence_count(batch, quick), seed=batch)
    return texts


def texts_for(batch: int, quick: bool) -> list[str]:
    sentences = _module("bench_model", ROOT / "bench" / "model.py").sentences
    return sentences("short", sentence_count(batch, quick), seed=batch)


def agreement(got: np.ndarray, want: np.ndarray) -> dict:
    """Smallest cosine and largest absolute difference over rows."""
    got, want = got.astype(np.float64), np.asarray(want, dtype=np.float64)
    cos = (got * want).sum(1) / np.maximum(np.linalg.norm(got, axis=1)
                                           * np.linalg.norm(want, axis=1), 1e-30)
    return {"min_cos": float(cos.min()), "max_abs": float(np.abs(got - want).max())}


def timed_rate(run: Callable[[], Any], count: int, repeats: int, seconds: float) -> dict:
    """Sentences/s of ``run`` (already warmed): median and range over up to ``repeats`` runs,
    stopping after ``seconds``."""
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < repeats and (not samples or time.perf_counter() - started < seconds):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    rates = sorted(count / s for s in samples)
    return {"median": statistics.median(rates), "min": rates[0], "max": rates[-1],
            "runs": len(rates)}


class TorchBert:
    """all-MiniLM-L6-v2 in plain PyTorch from the same weights vkumd loads (no transformers):
    the Hugging Face BertModel's arithmetic with SDPA attention and erf GELU, then mean
    pooling and L2 normalisation. ``encode`` batches longest-first and pads per batch, as
    ``SentenceEncoder.encode`` does."""

    def __init__(self, files: Any, dtype: str, device: str = "cuda",
                 weights: dict[str, np.ndarray] | None = None) -> None:
        import torch

        self.torch = torch
        self.files = files
        self.config = files.config
        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype)
        self.w = {name: torch.from_numpy(np.ascontiguousarray(array)).to(self.device,
                                                                         self.dtype)
                  for name, array in (files.weights if weights is None else weights).items()}
        self._forward = self.forward

    def compile(self) -> None:
        """Route ``encode`` through ``torch.compile(forward, dynamic=True)``."""
        self._forward = self.torch.compile(self.forward, dynamic=True)

    def forward(self, ids: Any, lengths: Any) -> Any:
        torch, w, c = self.torch, self.w, self.config
        f = torch.nn.functional
        batch, seq = ids.shape
        heads, dim = c.num_heads, c.hidden_size // c.num_heads

        def norm(x: Any, name: str) -> Any:
            return f.layer_norm(x, (c.hidden_size,), w[name + ".weight"], w[name + ".bias"],
                                c.layer_norm_eps)

        def linear(x: Any, name: str) -> Any:
            return f.linear(x, w[name + ".weight"], w[name + ".bias"])

        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:seq]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = norm(x, "embeddings.LayerNorm")
        valid = torch.arange(seq, device=ids.device)[None, :] < lengths[:, None]
        mask = valid[:, None, None, :]
        for i in range(c.num_layers):
            p = f"encoder.layer.{i}."
            q, k, v = (linear(x, p + f"attention.self.{n}").view(batch, seq, heads, dim)
                       .transpose(1, 2) for n in ("query", "key", "value"))
            mixed = f.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            mixed = mixed.transpose(1, 2).reshape(batch, seq, c.hidden_size)
            x = norm(linear(mixed, p + "attention.output.dense") + x,
                     p + "attention.output.LayerNorm")
            inner = f.gelu(linear(x, p + "intermediate.dense"))
            x = norm(linear(inner, p + "output.dense") + x, p + "output.LayerNorm")
        weights = valid.to(x.dtype) / lengths[:, None].to(x.dtype)
        pooled = torch.einsum("bs,bsh->bh", weights, x)
        return f.normalize(pooled.float(), dim=-1)

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        torch = self.torch
        tokens = [e.ids for e in self.files.tokenizer.encode_batch(texts)]
        out = np.empty((len(tokens), self.config.hidden_size), np.float32)
        order = sorted(range(len(tokens)), key=lambda i: -len(tokens[i]))
        pending = []
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                lengths = [len(tokens[i]) for i in rows]
                ids = np.zeros((len(rows), max(lengths)), np.int64)
                for r, i in enumerate(rows):
                    ids[r, :lengths[r]] = tokens[i]
                result = self._forward(torch.from_numpy(ids).to(self.device),
                                       torch.tensor(lengths, device=self.device))
                pending.append((rows, result))
            for rows, result in pending:
                out[rows] = result.cpu().numpy()
        return out

    def release(self) -> None:
        self.w.clear()
        self.torch.cuda.empty_cache()


def torch_unavailable() -> str | None:
    """Why the torch peers cannot run here, or None when they can."""
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not importable ({exc})"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


class ModelRunner:
    """The encoder and its peers, built once and shared by the model rows."""

    def __init__(self, ctx: Any, model: str, dtype: str, peer_kind: str,
                 quick: bool) -> None:
        from vkumd.models import SentenceEncoder, load_model_files

        self.files = load_model_files(model)
        self.kept = _module("gpu_pack_model", HERE / "pack_model.py").kept_ids(self.files.root)
        # The peers' copy: SentenceEncoder may drop files.weights once uploaded (main does).
        self.host_weights = dict(self.files.weights)
        self.encoder = SentenceEncoder(self.files, ctx, dtype=dtype)
        self.dtype, self.quick = dtype, quick
        self.torch_reason = (torch_unavailable() if peer_kind == "torch"
                             else f"the peer is {peer_kind}, not PyTorch on CUDA")
        self.torch: TorchBert | None = None
        self.compiled: TorchBert | None = None
        self.reference: Any = None
        self.mine: dict[int, tuple[np.ndarray, float, dict]] = {}

    def check_texts(self, texts: list[str]) -> None:
        if self.kept is None:
            return
        missing = {i for e in self.files.tokenizer.encode_batch(texts) for i in e.ids
                   } - self.kept
        if missing:
            raise ValueError(f"the packed model zeroed word rows these sentences use "
                             f"({sorted(missing)[:8]}...); repack with bench/gpu/prepare.sh")

    def case(self, label: str, batch: int, peers: tuple[str, ...] = TORCH_PEERS,
             repeats: int = 5, seconds: float = 8.0) -> dict:
        """One row: vkumd at ``batch`` (measured once per batch, then reused) and ``peers``."""
        texts = texts_for(batch, self.quick)
        if batch not in self.mine:
            self.check_texts(texts)
            start = time.perf_counter()
            embeddings = self.encoder.encode(texts, batch_size=batch, progress=False)
            first = time.perf_counter() - start
            rate = timed_rate(
                lambda: self.encoder.encode(texts, batch_size=batch, progress=False),
                len(texts), repeats, seconds)
            self.mine[batch] = (embeddings, first, rate)
        mine, first, rate = self.mine[batch]
        row: dict[str, Any] = {"case": label, "batch": batch, "sentences": len(texts),
                               "dtype": self.dtype, "vkumd_first_s": first,
                               "vkumd_sent_s": rate}
        found: dict[str, dict] = {}
        for name in peers:
            if self.torch_reason:
                found[name] = {"skipped": self.torch_reason}
                continue
            try:
                found[name] = self._torch_row(name, texts, batch, mine, repeats, seconds)
            except Exception as exc:  # one broken peer must not cost the row
                found[name] = {"error": f"{type(exc).__name__}: {exc}"}
        if self.torch_reason and "torch eager" in peers:
            found["numpy float64 reference"] = self._reference_row(texts, mine)
        row["peers"] = found
        return finish_row(row)

    def _torch_row(self, name: str, texts: list[str], batch: int, mine: np.ndarray,
                   repeats: int, seconds: float) -> dict:
        if self.torch is None:
            self.torch = TorchBert(self.files, self.dtype, weights=self.host_weights)
        peer = self.torch
        if name == "torch.compile":
            if self.compiled is None:
                self.compiled = TorchBert(self.files, self.dtype, weights=self.host_weights)
                self.compiled.compile()
            peer = self.compiled
        start = time.perf_counter()
        theirs = peer.encode(texts, batch)  # the first call compiles (torch.compile)
        out = {"first_s": time.perf_counter() - start}
        out["sent_s"] = timed_rate(lambda: peer.encode(texts, batch), len(texts), repeats,
                                   seconds)
        out.update(agreement(mine, theirs))
        return out

    def _reference_row(self, texts: list[str], mine: np.ndarray) -> dict:
        """vkumd against the float64 numpy reference on a few sentences (no torch here)."""
        try:
            if self.reference is None:
                ref = _module("model_reference",
                              ROOT / "tests" / "framework" / "models" / "reference.py")
                self.reference = ref.ReferenceEncoder(self.files.root)
            count = min(len(texts), 4)
            start = time.perf_counter()
            want = self.reference.encode(texts[:count])
            out = {"sent_s": {"median": count / (time.perf_counter() - start), "runs": 1},
                   "sentences": count}
            out.update(agreement(mine[:count], want))
            return out
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def close(self) -> None:
        self.encoder.close()
        for peer in (self.torch, self.compiled):
            if peer is not None:
                peer.release()


def finish_row(row: dict) -> dict:
    """Each peer's ratio: vkumd's sentences/s over the peer's (above 1: vkumd faster)."""
    mine = row.get("vkumd_sent_s", {}).get("median")
    for peer in row.get("peers", {}).values():
        theirs = peer.get("sent_s", {}).get("median")
        if mine and theirs:
            peer["ratio"] = mine / theirs
    return row


def encoder_layer(p: Any, config: Any, batch: int, seq: int) -> Callable[..., Any]:
    """One BERT layer on ``x`` (batch * seq, hidden): the encoder's own
    :func:`vkumd.framework.models.bert.layer`, which ``vkumd.compile`` traces as it is."""
    from vkumd.framework.models import bert

    def layer(x: Any, lengths: Any) -> Any:
        return bert.layer(p, x, lengths, batch, seq, config)

    return layer


def graph_case(ctx: Any, runner: ModelRunner, label: str, batch: int, seq: int,
               device_ms: Callable[[Callable[[], Any]], float]) -> dict:
    """Layer 0 of the encoder: ``vkumd.compile`` (replayed) against eager calls."""
    import vkumd

    config = runner.files.config
    weights = runner.encoder.weights
    rng = np.random.default_rng(batch)
    x = ctx.tensor(rng.standard_normal((batch * seq, config.hidden_size), dtype=np.float32),
                   dtype=weights.dtype)
    lengths = ctx.tensor(rng.integers(max(1, seq // 2), seq + 1, batch).astype(np.int32))
    layer = encoder_layer(weights.layers[0], config, batch, seq)
    row: dict[str, Any] = {"case": label, "batch": batch, "seq": seq,
                           "dtype": runner.dtype}
    start = time.perf_counter()
    compiled = vkumd.compile(layer, {"x": x, "lengths": lengths}, ctx=ctx)
    got = compiled(x=x, lengths=lengths)
    ctx.synchronize()
    row["compile_first_s"] = time.perf_counter() - start
    row["executor"] = compiled.executor
    row["nodes"] = len(compiled.graph.nodes)
    row["traced_nodes"] = len(compiled.traced_graph.nodes)
    want = layer(x, lengths)
    a, b = got.numpy().astype(np.float64), want.numpy().astype(np.float64)
    row["rel_err"] = float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))
    row["eager_ms"] = device_ms(lambda: layer(x, lengths))
    row["compiled_ms"] = device_ms(lambda: compiled(x=x, lengths=lengths))
    row["eager_wall_ms"] = _wall_ms(ctx, lambda: layer(x, lengths))
    row["compiled_wall_ms"] = _wall_ms(ctx, lambda: compiled(x=x, lengths=lengths))
    for t in (x, lengths, got, want):
        t.release()
    return row


def _wall_ms(ctx: Any, run: Callable[[], Any], reps: int = 20) -> float:
    """Host milliseconds per call over ``reps`` calls and one final wait."""
    run()
    ctx.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        run()
    ctx.synchronize()
    return (time.perf_counter() - start) * 1e3 / reps


def graph_shapes(quick: bool) -> list[tuple[int, int]]:
    batches = QUICK_BATCHES if quick else MODEL_BATCHES
    seq = QUICK_GRAPH_SEQ if quick else GRAPH_SEQ
    return [(b, seq) for b in batches]


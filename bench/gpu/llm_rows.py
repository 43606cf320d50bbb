"""The GPU run's text-generation rows: a SmolLM2-135M-shaped Llama on vkumd against the same
weights in PyTorch on the same GPU.

The real SmolLM2 GGUF (98 MB) cannot travel within the device call's 64 MiB, so the run writes
a model of SmolLM2-135M-Instruct's shape there (30 blocks, width 576, 9 query and 3 key/value
heads of 64, SwiGLU 1536, vocabulary 49152, tied head, RoPE base 100000, adjacent pairs) with
seeded random weights: projections Q4_1 and the embedding Q8_0, as in the real file, norms
float32. Its tokenizer is the test suite's tiny byte-level BPE padded with reserved tokens to
the vocabulary's size, so the work per token is the real model's. ``--quick`` shrinks it to
2 blocks and a 512-token vocabulary.

Rows (bench/llm.py's definitions, same prompts): prefill of a 128-token prompt, and greedy
decoding of 32 new tokens for 1 and for 8 sequences. vkumd keeps the weights quantized (its
``qmatmul`` kernels); the peer, :class:`TorchLlama`, holds the same weights dequantized in
float16 (float32 off CUDA), SDPA attention with grouped heads, a preallocated KV cache, eager.
The check: the prefill's last-token logits of both against each other (relative error).
llama.cpp is not a peer here: neither its CUDA nor its Vulkan build can be built on the bare
GPU machine or carried within 64 MiB.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # the test suite's GGUF writer: tests/framework/models
PEER_NOTE = ("llama.cpp is not a peer in this run: its CUDA and Vulkan builds need a "
             "15-25 minute compile with network, and the SmolLM2 GGUF (98 MB) does not fit "
             "the 64 MiB carry")


def _bench_llm() -> Any:
    """bench/llm.py as a module (its ``Ours`` measures vkumd exactly as the lavapipe bench)."""
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_llm", ROOT / "bench" / "llm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def smollm2_shape(quick: bool) -> Any:
    """SmolLM2-135M-Instruct's configuration (``--quick``: 2 blocks, 512 tokens)."""
    from tests.framework.models.tiny_llama import tiny_config

    return tiny_config(vocab_size=512 if quick else 49152, hidden_size=576,
                       intermediate_size=1536, num_layers=2 if quick else 30, num_heads=9,
                       num_kv_heads=3, head_dim=64, rope_theta=100000.0, context_length=2048)


def write_model(path: Path, quick: bool) -> tuple[Any, dict[str, np.ndarray]]:
    """Write the SmolLM2-shaped GGUF; returns its config and the stored (dequantized)
    weights by :mod:`vkumd.framework.models.llama_weights` name."""
    from tests.framework.models.gguf_writer import Typed
    from tests.framework.models.tiny_llama import tiny_vocab, write_tiny_gguf

    config = smollm2_shape(quick)
    tokens, types, _ = tiny_vocab()
    extra = config.vocab_size - len(tokens)
    tokens = tokens + [f"<|reserved_{i}|>" for i in range(extra)]
    types = types + [3] * extra
    stored = write_tiny_gguf(path, config, qtype="Q4_1", embed_qtype="Q8_0", seed=7,
                             metadata={"tokenizer.ggml.tokens": tokens,
                                       "tokenizer.ggml.token_type":
                                           Typed("ARRAY", types, element="INT32")})
    return config, stored


class TorchLlama:
    """The same Llama in PyTorch: eager, SDPA with grouped heads, a preallocated cache."""

    def __init__(self, config: Any, weights: dict[str, np.ndarray], device: str,
                 max_len: int, batch: int) -> None:
        import torch

        self.torch, self.c, self.device = torch, config, device
        self.dtype = torch.float16 if device == "cuda" else torch.float32
        self.w = {name: torch.tensor(value, dtype=self.dtype, device=device)
                  for name, value in weights.items()}
        c = config
        shape = (c.num_layers, batch, c.num_kv_heads, max_len, c.head_dim)
        self.keys = torch.zeros(shape, dtype=self.dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        inv = c.rope_theta ** (-torch.arange(0, c.head_dim, 2, dtype=torch.float64,
                                             device=device) / c.head_dim)
        angle = torch.arange(max_len, dtype=torch.float64, device=device)[:, None] * inv
        self.cos, self.sin = angle.cos().to(self.dtype), angle.sin().to(self.dtype)

    def _norm(self, x: Any, weight: Any) -> Any:
        x32 = x.float()
        return (x32 * self.torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.c.rms_eps)
                ).to(self.dtype) * weight

    def _rope(self, x: Any, start: int) -> Any:  # x [b, heads, t, d], adjacent pairs
        t = x.shape[2]
        cos, sin = self.cos[start:start + t], self.sin[start:start + t]
        a, b = x[..., 0::2], x[..., 1::2]
        return self.torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)

    def forward(self, ids: Any, start: int) -> Any:
        """Logits of the last position of ``ids [batch, t]``, appended at ``start``."""
        torch, c, w = self.torch, self.c, self.w
        sdpa = torch.nn.functional.scaled_dot_product_attention
        b, t = ids.shape
        x = w["embed"][ids]
        for i in range(c.num_layers):
            p = f"layers.{i}."
            h = self._norm(x, w[p + "attn_norm"])
            q = (h @ w[p + "q"].T).view(b, t, c.num_heads, c.head_dim).transpose(1, 2)
            k = (h @ w[p + "k"].T).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
            v = (h @ w[p + "v"].T).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
            q, k = self._rope(q, start), self._rope(k, start)
            self.keys[i, :b, :, start:start + t] = k
            self.values[i, :b, :, start:start + t] = v
            keys = self.keys[i, :b, :, :start + t]
            values = self.values[i, :b, :, :start + t]
            a = sdpa(q, keys, values, is_causal=t > 1 and start == 0, enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(b, t, -1) @ w[p + "o"].T
            h = self._norm(x, w[p + "ffn_norm"])
            x = x + (torch.nn.functional.silu(h @ w[p + "gate"].T) * (h @ w[p + "up"].T)
                     ) @ w[p + "down"].T
        return self._norm(x[:, -1], w["norm"]) @ w["embed"].T

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def prefill_ms(self, ids: list[int]) -> tuple[float, np.ndarray]:
        x = self.torch.tensor([ids], device=self.device)
        with self.torch.inference_mode():
            self.forward(x, 0)
            self.sync()
            began = time.perf_counter()
            logits = self.forward(x, 0)
            self.sync()
        return (time.perf_counter() - began) * 1e3, logits[0].float().cpu().numpy()

    def decode_ms(self, prompts: list[list[int]], new: int) -> tuple[float, list[int]]:
        """Milliseconds per greedy step over ``new`` steps (all prompts of one length)."""
        torch = self.torch
        with torch.inference_mode():
            ids = torch.tensor(prompts, device=self.device)
            nxt = self.forward(ids, 0).argmax(-1)
            start = ids.shape[1]
            first = [int(nxt[0])]
            self.sync()
            began = time.perf_counter()
            for step in range(new):
                nxt = self.forward(nxt[:, None], start + step).argmax(-1)
                first.append(int(nxt[0]))  # one read per step, as vkumd's sampling does
            self.sync()
        return (time.perf_counter() - began) * 1e3 / new, first[:new]


def rows(quick: bool, torch_device: str | None, torch_reason: str | None) -> list[dict]:
    """The generation rows: vkumd and (where PyTorch runs) the PyTorch peer, same weights.

    ``vkumd_ms`` and ``peer_ms`` are milliseconds per prefill, or per token in the decode
    rows (a step's time over the sequences it advances), so their ratio is the throughputs'.
    """
    llm = _bench_llm()
    out: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "smollm2-shape.gguf"
        began = time.perf_counter()
        config, stored = write_model(path, quick)
        made_s = time.perf_counter() - began
        ours = llm.Ours(path, "quantized")
        try:
            prefill = [ours.prefill()["rate"] for _ in range(3)]
            logits = np.asarray(ours.gen.runner.prefill(0, ours.ids), np.float64)
            ours.gen.runner.release(0)
            decode = {b: [ours.decode(b)["rate"] for _ in range(3)] for b in (1, llm.BATCH)}
            kernels = ours.facts().get("kernels_per_step")
        finally:
            ours.close()
        model = (f"{config.num_layers} blocks, width {config.hidden_size}, vocabulary "
                 f"{config.vocab_size}, Q4_1/Q8_0, written in {made_s:.0f} s")
        prompt = len(ours.ids)
        peer = None
        if torch_device is not None:
            try:
                peer = TorchLlama(config, stored, torch_device,
                                  max_len=prompt + llm.NEW + 8, batch=llm.BATCH)
            except Exception as exc:  # a peer that cannot start is recorded, not fatal
                torch_reason = f"{type(exc).__name__}: {exc}"
        cases = [(f"prefill, {prompt} tokens", prefill, None),
                 ("decode, 1 sequence", decode[1], 1),
                 (f"decode, {llm.BATCH} sequences", decode[llm.BATCH], llm.BATCH)]
        for label, rates, batch in cases:
            rate = float(np.median(rates))
            row: dict[str, Any] = {
                "case": label, "model": model, "rate_unit": "tok/s", "vkumd_rate": rate,
                "vkumd_range": [min(rates), max(rates)],
                "vkumd_ms": (prompt if batch is None else 1) / rate * 1e3,
                "kernels_per_step": kernels}
            if peer is None:
                row["peer_skipped"] = torch_reason or "no PyTorch"
            elif batch is None:
                ms, theirs = min((peer.prefill_ms(ours.ids) for _ in range(3)),
                                 key=lambda r: r[0])
                row.update(peer=f"torch eager ({torch_device})", peer_ms=ms,
                           rel_err=float(np.linalg.norm(logits - theirs) /
                                         max(float(np.linalg.norm(theirs)), 1e-30)))
            else:
                prompts = [list(p[:24]) for p in ours.prompts[:batch]]
                step_ms = min(peer.decode_ms(prompts, llm.NEW)[0] for _ in range(3))
                row.update(peer=f"torch eager ({torch_device})", peer_ms=step_ms / batch)
            out.append(row)
        out.append({"case": "llama.cpp", "peer_skipped": PEER_NOTE})
    return out

"""The ``vkumd.compile`` part of ``make demo``: a small transformer block written on the tensor
API, compiled, checked against float64 numpy and timed against the same function run eagerly
on the same device."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import vkumd
from vkumd import ops
from vkumd.timing import median_seconds

BATCH, SEQ, HIDDEN, HEADS, FFN = 4, 64, 128, 4, 512


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(*shape: int, scale: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    d = HIDDEN
    return {"wq": w(d, d), "wk": w(d, d), "wv": w(d, d), "bq": w(d), "bk": w(d), "bv": w(d),
            "wo": w(d, d), "bo": w(d), "g1": 1 + w(d), "be1": w(d), "w1": w(d, FFN),
            "b1": w(FFN), "w2": w(FFN, d), "b2": w(d), "g2": 1 + w(d), "be2": w(d)}


def block(p: dict[str, Any], x: Any) -> Any:
    """A post-norm encoder layer; runs on eager tensors and while tracing alike."""
    b, s, d = x.shape
    hd = d // HEADS

    def heads(t: Any) -> Any:
        return t.reshape(b, s, HEADS, hd).permute(0, 2, 1, 3)

    q, k, v = (heads(x @ p[f"w{n}"] + p[f"b{n}"]) for n in "qkv")
    probs = (ops.matmul(q, k, trans_b=True) * (1.0 / math.sqrt(hd))).softmax()
    a = (probs @ v).permute(0, 2, 1, 3).reshape(b, s, d)
    h = (a @ p["wo"] + p["bo"] + x).layer_norm(p["g1"], p["be1"])
    f = (h @ p["w1"] + p["b1"]).gelu()
    return (f @ p["w2"] + p["b2"] + h).layer_norm(p["g2"], p["be2"])


def block_numpy(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The same block in float64 numpy (erf GELU, eps 1e-5)."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    x = x.astype(np.float64)
    b, s, d = x.shape
    hd = d // HEADS

    def heads(t: np.ndarray) -> np.ndarray:
        return t.reshape(b, s, HEADS, hd).transpose(0, 2, 1, 3)

    def norm(t: np.ndarray, g: np.ndarray, be: np.ndarray) -> np.ndarray:
        mu = t.mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(((t - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + be

    q, k, v = (heads(x @ p[f"w{n}"] + p[f"b{n}"]) for n in "qkv")
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    a = ((e / e.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    h = norm(a @ p["wo"] + p["bo"] + x, p["g1"], p["be1"])
    f = h @ p["w1"] + p["b1"]
    f = 0.5 * f * (1.0 + np.vectorize(math.erf)(f / math.sqrt(2.0)))
    return norm(f @ p["w2"] + p["b2"] + h, p["g2"], p["be2"])


def run(ctx: vkumd.Context, rng: np.random.Generator) -> int:
    """Compile the block, print its summary, check it and time it; return the failure count.

    Args:
        ctx: an open context.
        rng: the demo's random generator.

    Returns:
        1 if the compiled result disagrees with numpy (or with the eager run), else 0.
    """
    weights = _weights(rng)
    p = {k: ctx.tensor(v) for k, v in weights.items()}  # closed over: constants of the graph
    x = rng.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    tx = ctx.tensor(x)

    def layer(x: Any) -> Any:
        return block(p, x)

    compiled = vkumd.compile(layer, {"x": tx}, ctx=ctx, dynamic={"x": {1: "seq"}})
    got = compiled(x=tx).numpy()  # the first call records the seq=64 bucket
    want = block_numpy(weights, x)
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    eager = layer(tx).numpy()
    err_eager = float(np.linalg.norm(got - eager) / np.linalg.norm(eager))
    ok = err < 1e-5 and err_eager < 1e-5 and not np.isnan(got).any()
    # Both paths are asynchronous: time each through the wait for its result.
    t_eager = median_seconds(lambda: (layer(tx), ctx.synchronize()))
    t_compiled = median_seconds(lambda: (compiled(x=tx), ctx.synchronize()))
    print(compiled.summary())
    print(f"compiled transformer block [{BATCH}x{SEQ}x{HIDDEN}], {HEADS} heads, FFN {FFN}: "
          f"{len(compiled.traced_graph.nodes)} traced nodes -> {len(compiled.graph.nodes)} "
          f"({', '.join(sorted({n.op for n in compiled.graph.nodes}))}); relative error "
          f"{err:.1e} ({'ok' if ok else 'MISMATCH'}); eager {t_eager * 1e3:.1f} ms, compiled "
          f"{t_compiled * 1e3:.1f} ms ({t_eager / t_compiled:.2f}x)")
    for t in (*p.values(), tx):
        t.release()
    return 0 if ok else 1


if __name__ == "__main__":
    with vkumd.Context() as context:
        raise SystemExit(run(context, np.random.default_rng()))

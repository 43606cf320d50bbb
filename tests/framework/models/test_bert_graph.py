"""The encoder as a compiled graph: what the passes made of it, bucketing, and agreement with
the eager path and the float64 reference."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from .model_checks import assert_close, needs_model

pytestmark = needs_model

TEXTS = ["A man is eating food.", "Someone eats.", "hi", "",
         "The quick brown fox jumps over the lazy dog by the river.",
         "Съешь же ещё этих мягких французских булок."]
F32 = {"min_cos": 0.99999, "max_abs": 1e-4}


def _batch(lengths: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Made-up ids (CLS ... SEP) padded to the longest length."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), max(lengths)), np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = [101, *rng.integers(1000, 29000, n - 2), 102]
    return np.array(lengths, np.int32), ids


def test_the_passes_fuse_every_gemm_epilogue_and_each_attention(encoder) -> None:
    graph, layers = encoder.graph, encoder.files.config.num_layers
    ops = Counter(n.op for n in graph.nodes)
    # Bias adds, GELUs and residual adds all went into GEMM epilogues; the word + position
    # sum into the embedding norm; the token-type row into the position table.
    for gone in ("add", "gelu", "softmax", "slice"):
        assert ops[gone] == 0, (gone, ops)
    assert ops["matmul"] == 6 * layers
    assert ops["attention"] == layers + 1  # one per layer, and the pooling
    assert ops["add_layer_norm"] == 1 and ops["layer_norm"] == 2 * layers
    matmuls = [n for n in graph.nodes if n.op == "matmul"]
    assert all(n.inputs[2] is not None for n in matmuls)  # every GEMM has its bias
    for i in range(layers):
        q, k, v, out, ffn_in, ffn_out = matmuls[6 * i:6 * i + 6]
        assert all(n.inputs[3] is None for n in (q, k, v, ffn_in))
        assert out.inputs[3] is not None and ffn_out.inputs[3] is not None  # residuals
        assert ffn_in.attrs.get("activation") == "gelu"
    attention = [n for n in graph.nodes if n.op == "attention"]
    assert all(n.inputs[3] is not None for n in attention)  # key_lengths, not a mask
    names = {v.name for v in graph.weights}
    assert "embeddings.token_type_embeddings.weight" not in names


def test_compiled_matches_eager_and_the_reference(encoder, reference) -> None:
    compiled = encoder.encode(TEXTS, batch_size=4)
    eager = encoder.encode(TEXTS, batch_size=4, compiled=False)
    assert_close(compiled, reference.encode(TEXTS), **F32)
    assert np.abs(compiled - eager).max() <= 1e-6
    pooled = encoder.encode(TEXTS, normalize=False)
    assert_close(pooled, reference.encode(TEXTS, normalize=False), **F32)


def test_both_paths_run_one_forward(encoder) -> None:
    # The graph is the eager forward traced: the same kernels on the same shapes, so the
    # same bits (the launches run at the true sizes, whatever the bucket).
    compiled = encoder.encode(TEXTS, batch_size=4)
    assert np.array_equal(compiled, encoder.encode(TEXTS, batch_size=4, compiled=False))


def test_one_device_copy_of_the_weights_serves_both_paths(ctx, model_dir) -> None:
    from vkumd.models import SentenceEncoder

    ctx.synchronize()
    used = ctx.memory.used_bytes()
    with SentenceEncoder.from_pretrained(model_dir, ctx=ctx) as enc:
        held, weights = ctx.memory.used_bytes() - used, enc.weights.nbytes()
        assert weights <= held <= 1.15 * weights, (held, weights)
        named = enc.weights.named()
        # Every weight the compiled graph reads is the eager path's tensor of that name.
        assert all(enc.compiled_graph.weights[v.id] is named[v.name]
                   for v in enc.graph.weights)


def test_float16_graph_matches_the_reference(encoder16, reference) -> None:
    assert_close(encoder16.encode(TEXTS[:3]), reference.encode(TEXTS[:3]),
                 min_cos=0.999, max_abs=3e-3)


def test_length_37_runs_the_64_bucket_as_the_exact_shape_run(ctx, encoder, reference) -> None:
    from vkumd.framework.execute import CompiledGraph
    from vkumd.framework.models.bert_graph import graph_inputs
    from vkumd.framework.models.encoder import BUCKETS

    lengths, ids = _batch([37, 37, 37, 21])
    feeds = graph_inputs(lengths, ids, "mean")
    results = {}
    for name, buckets in (("pow2", None), ("exact", {"batch": None, "seq": None}),
                          ("encoder", BUCKETS)):
        compiled = CompiledGraph(encoder.graph, ctx, buckets=buckets)
        try:
            results[name] = compiled(**feeds)[1].numpy()
            (stats,) = compiled.buckets()
            # The bucket sizes the memory; the one recording runs at the true sizes.
            assert stats.sizes == [{"batch": 4, "seq": 37}] and compiled.recorded == 1
            env = stats.bindings
        finally:
            compiled.release()
        assert env == {"pow2": {"batch": 4, "seq": 64}, "exact": {"batch": 4, "seq": 37},
                       "encoder": {"batch": 4, "seq": 40}}[name]
    want = results["exact"]
    assert np.array_equal(results["pow2"], want)
    assert np.array_equal(results["encoder"], want)
    states = [reference.hidden(list(row[:n])) for row, n in zip(ids, lengths, strict=True)]
    pooled = np.array([h.mean(0) for h in states])
    assert_close(want, pooled / np.linalg.norm(pooled, axis=1, keepdims=True), **F32)


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_an_embedding_does_not_depend_on_its_batch_or_bucket(encoder, batch_size) -> None:
    single = np.concatenate([encoder.encode([t]) for t in TEXTS])
    batched = encoder.encode(TEXTS, batch_size=batch_size)
    # Padding (the batch's and the bucket's) is masked; GEMM tiling may still round
    # differently for another row count.
    assert np.abs(batched - single).max() <= 1e-6


def test_eager_encoder_by_default_and_bad_flags(ctx, model_dir) -> None:
    from vkumd.errors import VkumdTypeError
    from vkumd.models import SentenceEncoder

    with SentenceEncoder.from_pretrained(model_dir, ctx=ctx, compiled=False) as enc:
        assert enc.compiled is False
        assert enc.encode(["x"]).shape == (1, 384)
        assert enc.compiled_graph.calls == 0
        with pytest.raises(VkumdTypeError, match="compiled"):
            enc.encode(["x"], compiled="yes")
    with pytest.raises(VkumdTypeError, match="compiled"):
        SentenceEncoder.from_pretrained(model_dir, ctx=ctx, compiled=1)

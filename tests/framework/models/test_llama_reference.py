"""The float64 Llama reference checked against properties it must have (RoPE conventions
agree after the rows are permuted, causality, grouped heads, one token by hand), and the
GGUF and Hugging Face copies of the tiny model computing the same logits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.models.llama_config import config_from_gguf, config_from_hf
from vkumd.framework.models.llama_weights import load_gguf_weights, load_hf_weights

from .llama_reference import dequantized, forward, greedy, reference_logits, rms_norm, rope
from .tiny_llama import adjacent_rows, halves_rows, tiny_config, write_tiny_gguf, write_tiny_hf

IDS = [1, 104, 101, 290, 32, 300, 15, 2, 77, 200, 5]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_gguf(path, qtype="F32", seed=11)
    with GGUFFile(path) as f:
        config = config_from_gguf(f)
        weights = dequantized(load_gguf_weights(f, config))
    return config, weights


def permuted(config, weights, convert) -> dict[str, np.ndarray]:
    out = dict(weights)
    for i in range(config.num_layers):
        out[f"layers.{i}.q"] = convert(weights[f"layers.{i}.q"], config.num_heads)
        out[f"layers.{i}.k"] = convert(weights[f"layers.{i}.k"], config.num_kv_heads)
    return out


def test_permutations_are_inverse() -> None:
    w = np.random.default_rng(0).standard_normal((64, 8))
    np.testing.assert_array_equal(adjacent_rows(halves_rows(w, 4), 4), w)
    assert not np.array_equal(halves_rows(w, 4), w)


def test_adjacent_and_halves_agree_after_permuting_rows(tiny) -> None:
    config, weights = tiny
    want = reference_logits(config, weights, IDS)
    halves = replace(config, rope_pairs="halves")
    got = reference_logits(halves, permuted(config, weights, halves_rows), IDS)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * np.abs(want).max())
    # Without the permutation the conventions differ: the check can fail.
    wrong = reference_logits(halves, weights, IDS)
    assert np.abs(wrong - want).max() > 1e-3 * np.abs(want).max()


def test_rope_keeps_norms_and_depends_on_relative_position() -> None:
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 3, 2, 16))
    for pairs in ("adjacent", "halves"):
        rq = rope(q, np.array([5, 6, 7]), 500.0, pairs)
        np.testing.assert_allclose(np.linalg.norm(rq, axis=-1), np.linalg.norm(q, axis=-1))
        np.testing.assert_array_equal(rope(q, np.zeros(3), 500.0, pairs), q)
        a = np.sum(rope(q, np.array([3, 4, 9]), 500.0, pairs) *
                   rope(k, np.array([1, 1, 2]), 500.0, pairs), axis=-1)
        b = np.sum(rope(q, np.array([13, 24, 29]), 500.0, pairs) *
                   rope(k, np.array([11, 21, 22]), 500.0, pairs), axis=-1)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # Adjacent pair 0 is elements (0, 1); position 1 turns it by exactly 1 radian.
    x = np.zeros((1, 1, 4))
    x[..., 0] = 1.0
    np.testing.assert_allclose(rope(x, np.array([1]), 10.0, "adjacent")[0, 0],
                               [np.cos(1), np.sin(1), 0, 0], atol=1e-15)
    np.testing.assert_allclose(rope(x, np.array([1]), 10.0, "halves")[0, 0],
                               [np.cos(1), 0, np.sin(1), 0], atol=1e-15)


def test_causal_and_incremental(tiny) -> None:
    config, weights = tiny
    full = reference_logits(config, weights, IDS)
    changed = reference_logits(config, weights, IDS[:6] + [9, 9, 9, 9, 9])
    np.testing.assert_array_equal(changed[:6], full[:6])
    assert np.abs(changed[6:] - full[6:]).max() > 1e-3
    cache = [[np.zeros((0, 2, 16))] * 2 for _ in range(config.num_layers)]
    steps = [forward(config, weights, IDS[:4], cache)]
    steps += [forward(config, weights, [t], cache) for t in IDS[4:]]
    np.testing.assert_allclose(np.concatenate(steps), full, rtol=1e-12, atol=1e-12)


def test_one_token_by_hand(tiny) -> None:
    # One token: attention returns v, RoPE at position 0 is the identity.
    config, w = tiny
    x = w["embed"][7]
    for i in range(config.num_layers):
        p = f"layers.{i}."
        v = w[p + "v"] @ rms_norm(x, w[p + "attn_norm"], config.rms_eps)
        x = x + w[p + "o"] @ np.repeat(v.reshape(2, 16), 2, axis=0).reshape(-1)
        h = rms_norm(x, w[p + "ffn_norm"], config.rms_eps)
        g, u = w[p + "gate"] @ h, w[p + "up"] @ h
        x = x + w[p + "down"] @ (g * u / (1 + np.exp(-g)))
    want = w["embed"] @ rms_norm(x, w["norm"], config.rms_eps)
    np.testing.assert_allclose(reference_logits(config, w, [7])[0], want, rtol=1e-12,
                               atol=1e-12)


def test_grouped_heads_equal_repeated_key_value_heads(tiny) -> None:
    config, weights = tiny
    wide = replace(config, num_kv_heads=config.num_heads)
    group = config.num_heads // config.num_kv_heads
    w2 = dict(weights)
    for i in range(config.num_layers):
        for s in ("k", "v"):
            rows = weights[f"layers.{i}.{s}"].reshape(config.num_kv_heads, 16, -1)
            w2[f"layers.{i}.{s}"] = np.repeat(rows, group, axis=0).reshape(-1, 64)
    np.testing.assert_allclose(reference_logits(wide, w2, IDS),
                               reference_logits(config, weights, IDS), rtol=1e-12, atol=1e-12)


def test_greedy_is_the_argmax_of_each_full_pass(tiny) -> None:
    config, weights = tiny
    out = greedy(config, weights, IDS[:3], 6)
    seq = list(IDS[:3])
    for token in out:
        assert token == int(np.argmax(reference_logits(config, weights, seq)[-1]))
        seq.append(token)
    assert greedy(config, weights, IDS[:3], 6) == out


def test_hf_directory_computes_what_the_gguf_does(tiny, tmp_path: Path) -> None:
    config, weights = tiny
    write_tiny_hf(tmp_path / "hf", seed=11)
    hf_config = config_from_hf(tmp_path / "hf")
    assert hf_config.rope_pairs == "halves"
    assert replace(hf_config, rope_pairs="adjacent") == config
    hf = load_hf_weights(tmp_path / "hf", hf_config)
    assert {h.qtype for h in hf.values()} == {"F32"}
    got = reference_logits(hf_config, dequantized(hf), IDS)
    want = reference_logits(config, weights, IDS)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * np.abs(want).max())


def test_untied_head(tmp_path: Path) -> None:
    config = tiny_config(tie_embeddings=False)
    stored = write_tiny_gguf(tmp_path / "u.gguf", config=config, qtype="Q4_0")
    with GGUFFile(tmp_path / "u.gguf") as f:
        loaded = config_from_gguf(f)
        weights = load_gguf_weights(f, loaded)
    assert not loaded.tie_embeddings and weights["output"].qtype == "Q4_0"
    logits = reference_logits(loaded, dequantized(weights), [5, 6])
    w = dict(stored, output=stored["embed"])  # tied instead: the logits change
    assert not np.allclose(reference_logits(loaded, w, [5, 6]), logits)

"""LlamaRunner on a small random model against the float64 numpy forward (llama_reference):
prefill logits, greedy decode steps, slots decoding together at different lengths, slot
reuse, the recorded step replayed within and across cache-length buckets, and bad inputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.models.llama_runner import LlamaRunner
from vkumd.testing.numerics import rel_error
from vkumd.vk.errors import OutOfDeviceMemory

from .llama_reference import greedy, reference_logits


@dataclass(frozen=True)
class Config:
    """The LlamaConfig fields the runner reads."""

    vocab_size: int = 97
    hidden_size: int = 48
    intermediate_size: int = 80
    num_layers: int = 2
    num_heads: int = 6
    num_kv_heads: int = 2
    head_dim: int = 8
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_pairs: str = "adjacent"
    context_length: int = 512
    tie_embeddings: bool = True


@dataclass
class Weight:
    """A HostWeight: qtype, shape, data."""

    qtype: str
    shape: tuple
    data: np.ndarray


def random_weights(config: Config, seed: int = 0) -> dict[str, Weight]:
    rng = np.random.default_rng(seed)
    hidden, inner = config.hidden_size, config.intermediate_size
    q_out, kv_out = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    shapes = {"embed": (config.vocab_size, hidden), "norm": (hidden,)}
    if not config.tie_embeddings:
        shapes["output"] = (config.vocab_size, hidden)
    for i in range(config.num_layers):
        shapes.update({f"layers.{i}.attn_norm": (hidden,), f"layers.{i}.q": (q_out, hidden),
                       f"layers.{i}.k": (kv_out, hidden), f"layers.{i}.v": (kv_out, hidden),
                       f"layers.{i}.o": (hidden, q_out), f"layers.{i}.ffn_norm": (hidden,),
                       f"layers.{i}.gate": (inner, hidden), f"layers.{i}.up": (inner, hidden),
                       f"layers.{i}.down": (hidden, inner)})
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            data = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            data = rng.standard_normal(shape) / np.sqrt(shape[1])
        out[name] = Weight("F32", shape, data.astype(np.float32))
    return out


def float64(weights: dict[str, Weight]) -> dict[str, np.ndarray]:
    return {name: np.asarray(w.data, np.float64).reshape(w.shape) for name, w in weights.items()}


def greedy_reference(config: Config, w: dict[str, np.ndarray], ids: list[int], steps: int
                     ) -> tuple[list[int], list[np.ndarray]]:
    """Greedy tokens and the logits each step saw (the prompt's last first)."""
    tokens = greedy(config, w, list(ids), steps)
    logits = reference_logits(config, w, list(ids) + tokens[:-1])[len(ids) - 1:]
    return tokens, list(logits)


CONFIG = Config()
WEIGHTS = random_weights(CONFIG)
REF = float64(WEIGHTS)


@pytest.fixture(scope="module")
def runner(ctx):
    made = LlamaRunner(ctx, CONFIG, WEIGHTS, slots=4, max_context=320, cache_dtype="float32",
                       compute="float32")
    yield made
    made.close()


def _greedy(runner: LlamaRunner, slot: int, ids: list[int], steps: int
            ) -> tuple[list[int], list[np.ndarray]]:
    logits = [runner.prefill(slot, ids)]
    tokens = [int(np.argmax(logits[-1]))]
    for _ in range(steps - 1):
        logits.append(runner.decode({slot: tokens[-1]})[slot])
        tokens.append(int(np.argmax(logits[-1])))
    return tokens, logits


def test_prefill_and_greedy_decode_match_float64(runner):
    ids = [5, 17, 3, 90, 42, 8, 61]
    want_tokens, want_logits = greedy_reference(CONFIG, REF, ids, 10)
    tokens, logits = _greedy(runner, 1, ids, 10)
    assert tokens == want_tokens
    for got, want in zip(logits, want_logits, strict=True):
        assert rel_error(got, want) < 1e-4
    assert runner.length(1) == len(ids) + 9
    stats = runner.stats()
    assert stats["kernels_per_step"] > 0 and stats["recordings"] >= 1


def test_slots_together_match_each_alone(runner):
    prompts = {0: [1, 2, 3], 2: [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11], 3: [50]}
    alone = {}
    for slot, ids in prompts.items():
        alone[slot] = _greedy(runner, slot, ids, 6)
        runner.release(slot)
    first = {slot: runner.prefill(slot, ids) for slot, ids in prompts.items()}
    tokens = {slot: [int(np.argmax(x))] for slot, x in first.items()}
    got = {slot: [x] for slot, x in first.items()}
    for _ in range(5):
        out = runner.decode({slot: t[-1] for slot, t in tokens.items()})
        for slot, x in out.items():
            got[slot].append(x)
            tokens[slot].append(int(np.argmax(x)))
    for slot in prompts:
        assert tokens[slot] == alone[slot][0]
        for a, b in zip(got[slot], alone[slot][1], strict=True):
            assert rel_error(a, b) < 1e-5
        runner.release(slot)


def test_released_slot_is_reused(runner):
    _greedy(runner, 0, [4, 4, 4, 4, 4, 4], 5)
    runner.release(0)
    assert runner.length(0) == 0
    ids = [7, 3]
    want_tokens, want_logits = greedy_reference(CONFIG, REF, ids, 4)
    tokens, logits = _greedy(runner, 0, ids, 4)
    assert tokens == want_tokens
    assert rel_error(logits[-1], want_logits[-1]) < 1e-4
    runner.release(0)


def test_steps_replay_within_and_across_buckets(runner):
    # 250 prompt tokens: the steps cross the short-key bucket (256) into the long one.
    rng = np.random.default_rng(3)
    ids = [int(t) for t in rng.integers(0, CONFIG.vocab_size, 250)]
    before = runner.stats()["recordings"]
    tokens, logits = _greedy(runner, 3, ids, 12)
    want_tokens, want_logits = greedy_reference(CONFIG, REF, ids, 12)
    assert tokens == want_tokens
    for got, want in zip(logits, want_logits, strict=True):
        assert rel_error(got, want) < 1e-4
    assert runner.stats()["recordings"] - before <= 2
    runner.release(3)


def test_float16_cache_and_weights(ctx):
    with LlamaRunner(ctx, CONFIG, WEIGHTS, slots=2, max_context=64, cache_dtype="float16",
                     compute="float16") as r16:
        ids = [11, 22, 33, 44]
        want_tokens, want_logits = greedy_reference(CONFIG, REF, ids, 8)
        _, logits = _greedy(r16, 1, ids, 8)
        for got, want in zip(logits, want_logits, strict=True):
            assert rel_error(got, want) < 1e-2


def test_halves_rope_and_untied_head(ctx):
    config = Config(rope_pairs="halves", tie_embeddings=False, num_kv_heads=3)
    weights = random_weights(config, seed=5)
    with LlamaRunner(ctx, config, weights, slots=2, max_context=32, cache_dtype="float32",
                     compute="float32") as r:
        ids = [3, 1, 4, 1, 5, 9, 2, 6]
        want_tokens, want_logits = greedy_reference(config, float64(weights), ids, 8)
        tokens, logits = _greedy(r, 0, ids, 8)
        assert tokens == want_tokens
        for got, want in zip(logits, want_logits, strict=True):
            assert rel_error(got, want) < 1e-4


def test_bad_inputs(runner):
    with pytest.raises(VkumdValueError, match="400 tokens and the context holds 320"):
        runner.prefill(0, [1] * 400)
    with pytest.raises(VkumdValueError, match="empty"):
        runner.prefill(0, [])
    with pytest.raises(VkumdValueError, match="slot 4 is out of range"):
        runner.prefill(4, [1])
    with pytest.raises(VkumdValueError, match="outside the vocabulary"):
        runner.prefill(0, [1, CONFIG.vocab_size])
    with pytest.raises(VkumdTypeError):
        runner.prefill(0, "hello")
    with pytest.raises(VkumdValueError, match="holds no prompt"):
        runner.decode({2: 1})
    with pytest.raises(VkumdValueError, match="out of range"):
        runner.decode({-1: 1})
    with pytest.raises(VkumdValueError, match="no slots"):
        runner.decode({})
    with pytest.raises(VkumdTypeError):
        runner.decode([(0, 1)])
    # The runner stays usable.
    ids = [2, 7]
    assert rel_error(runner.prefill(0, ids), reference_logits(CONFIG, REF, ids)[-1]) < 1e-4
    runner.release(0)


def test_full_slot_is_refused(ctx):
    with LlamaRunner(ctx, CONFIG, WEIGHTS, slots=1, max_context=4, cache_dtype="float32",
                     compute="float32") as r:
        r.prefill(0, [1, 2, 3])
        r.decode({0: 4})
        with pytest.raises(VkumdValueError, match="full"):
            r.decode({0: 5})
    r.close()  # a second close does nothing
    with pytest.raises(VkumdValueError, match="closed"):
        r.prefill(0, [1])


def test_cache_that_does_not_fit_is_refused(ctx):
    with pytest.raises(OutOfDeviceMemory, match="KV cache") as info:
        LlamaRunner(ctx, CONFIG, WEIGHTS, slots=1 << 16, max_context=1 << 16)
    assert info.value.requested > ctx.caps.device_local_bytes
    with pytest.raises(VkumdValueError, match="compute="):
        LlamaRunner(ctx, CONFIG, WEIGHTS, compute="int4")
    with pytest.raises(VkumdValueError, match="cache_dtype"):
        LlamaRunner(ctx, CONFIG, WEIGHTS, cache_dtype="bfloat16")


def test_weights_that_do_not_fit_the_config_are_refused(ctx):
    missing = dict(WEIGHTS)
    del missing["layers.1.up"]
    with pytest.raises(VkumdValueError, match="'layers.1.up' is missing"):
        LlamaRunner(ctx, CONFIG, missing, compute="float32")
    wrong = dict(WEIGHTS)
    wrong["layers.0.k"] = Weight("F32", (8, 48), np.zeros((8, 48), np.float32))
    with pytest.raises(VkumdValueError, match=r"'layers.0.k' has shape \(8, 48\)"):
        LlamaRunner(ctx, CONFIG, wrong, compute="float32")
    with pytest.raises(VkumdValueError, match="key/value heads"):
        LlamaRunner(ctx, Config(num_kv_heads=4), WEIGHTS, compute="float32")
    with pytest.raises(VkumdTypeError, match="slots must be an int"):
        LlamaRunner(ctx, CONFIG, WEIGHTS, slots=2.0)

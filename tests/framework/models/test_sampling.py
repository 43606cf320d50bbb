"""Sampling: greedy ties, the support top-k and top-p leave, the penalty's arithmetic, seeds,
and every bad parameter refused with a message naming it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.models.sampling import (
    MAX_NEW_TOKENS_LIMIT,
    Sampler,
    SamplingParams,
    apply_repetition_penalty,
    distribution,
)

VOCAB = 50


def _logits(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(VOCAB).astype(np.float32) * 2


def _draws(params: SamplingParams, logits: np.ndarray, n: int) -> np.ndarray:
    sampler = Sampler(params, VOCAB)
    out = []
    for _ in range(n):
        sampler.seen[:] = False  # the penalty off between draws: same distribution each
        out.append(sampler(logits))
    return np.array(out)


def test_greedy_is_the_argmax_and_ties_go_to_the_lowest_id() -> None:
    logits = _logits(1)
    assert Sampler(SamplingParams.create(), VOCAB)(logits) == int(np.argmax(logits))
    tied = np.zeros(VOCAB, dtype=np.float32)
    tied[[7, 3, 41]] = 5.0
    for seed in range(5):
        assert Sampler(SamplingParams.create(seed=seed), VOCAB)(tied) == 3


def test_temperature_sampling_follows_the_softmax() -> None:
    logits = np.linspace(-1, 1, VOCAB).astype(np.float32)
    params = SamplingParams.create(temperature=0.7, seed=3)
    draws = _draws(params, logits, 20000)
    want = np.exp(logits / 0.7 - (logits / 0.7).max())
    want /= want.sum()
    got = np.bincount(draws, minlength=VOCAB) / len(draws)
    # Each bin within 5 standard errors of its probability.
    assert np.all(np.abs(got - want) <= 5 * np.sqrt(want * (1 - want) / len(draws)) + 1e-4)


def test_top_k_restricts_the_support_to_the_k_largest() -> None:
    logits = _logits(2)
    params = SamplingParams.create(temperature=1.5, top_k=5, seed=1)
    draws = set(_draws(params, logits, 3000).tolist())
    assert draws == set(np.argsort(-logits)[:5].tolist())
    probs = distribution(logits, params)
    assert np.count_nonzero(probs) == 5 and math.isclose(probs.sum(), 1.0)


def test_top_k_ties_at_the_edge_keep_the_lower_ids() -> None:
    logits = np.zeros(VOCAB)
    logits[[10, 20, 30]] = 1.0
    probs = distribution(logits, SamplingParams.create(temperature=1.0, top_k=2))
    assert np.flatnonzero(probs).tolist() == [10, 20]


def test_top_p_keeps_the_smallest_nucleus_reaching_p() -> None:
    logits = np.array([np.log(p) for p in (0.5, 0.3, 0.15, 0.05)] + [-np.inf] * (VOCAB - 4))
    params = SamplingParams.create(temperature=1.0, top_p=0.8, seed=0)
    probs = distribution(logits, params)
    assert np.flatnonzero(probs).tolist() == [0, 1]
    np.testing.assert_allclose(probs[:2], [0.625, 0.375], rtol=1e-6)
    assert set(_draws(params, logits, 2000).tolist()) == {0, 1}
    # Just past 0.8: the third token joins.
    assert np.count_nonzero(distribution(logits, SamplingParams.create(
        temperature=1.0, top_p=0.81))) == 3
    # A tiny p keeps the most likely token only.
    assert np.flatnonzero(distribution(logits, SamplingParams.create(
        temperature=1.0, top_p=1e-6))).tolist() == [0]


def test_the_same_seed_gives_the_same_tokens_and_others_differ() -> None:
    logits = _logits(4)
    params = SamplingParams.create(temperature=1.0, seed=1234)
    a, b = _draws(params, logits, 200), _draws(params, logits, 200)
    assert a.tolist() == b.tolist()
    c = _draws(SamplingParams.create(temperature=1.0, seed=1235), logits, 200)
    assert a.tolist() != c.tolist()


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    logits = np.array([2.0, -2.0, 3.0, -1.0, 0.5])
    out = apply_repetition_penalty(logits, np.array([0, 1, 1]), 2.0)
    np.testing.assert_array_equal(out, [1.0, -4.0, 3.0, -1.0, 0.5])
    mask = np.array([False, False, True, True, False])
    np.testing.assert_array_equal(apply_repetition_penalty(logits, mask, 0.5),
                                  [2.0, -2.0, 6.0, -0.5, 0.5])
    np.testing.assert_array_equal(logits, [2.0, -2.0, 3.0, -1.0, 0.5])  # input untouched


def test_the_penalty_counts_the_prompt_and_generated_tokens() -> None:
    logits = np.zeros(VOCAB, dtype=np.float32)
    logits[4], logits[9] = 3.0, 2.0
    sampler = Sampler(SamplingParams.create(repetition_penalty=2.0), VOCAB, prompt_ids=[9])
    assert sampler(logits) == 4           # 9 was in the prompt: 2.0 / 2 = 1.0
    logits[4], logits[9], logits[11] = 3.0, 2.5, 1.6
    assert sampler(logits) == 11          # 4 now seen (1.5), 9 (1.25): 11 wins with 1.6


@pytest.mark.parametrize("options, error, words", [
    ({"temperature": -0.1}, VkumdValueError, "temperature is -0.1"),
    ({"temperature": float("nan")}, VkumdValueError, "temperature is NaN"),
    ({"temperature": float("inf")}, VkumdValueError, "finite"),
    ({"temperature": "hot"}, VkumdTypeError, "temperature must be a number"),
    ({"top_p": 0.0}, VkumdValueError, "top_p is 0.0; it must be in (0, 1]"),
    ({"top_p": 1.5}, VkumdValueError, "top_p is 1.5"),
    ({"top_p": float("nan")}, VkumdValueError, "top_p is NaN"),
    ({"top_k": -1}, VkumdValueError, "top_k is -1"),
    ({"top_k": 2.5}, VkumdTypeError, "top_k must be an int"),
    ({"repetition_penalty": 0.0}, VkumdValueError, "repetition_penalty is 0.0"),
    ({"repetition_penalty": -1}, VkumdValueError, "must be > 0"),
    ({"max_new_tokens": -1}, VkumdValueError, "max_new_tokens is -1"),
    ({"max_new_tokens": MAX_NEW_TOKENS_LIMIT + 1}, VkumdValueError, "between 0 and"),
    ({"max_new_tokens": True}, VkumdTypeError, "max_new_tokens must be an int"),
    ({"seed": -5}, VkumdValueError, "seed is -5"),
    ({"seed": 1.0}, VkumdTypeError, "seed must be an int"),
    ({"stop": ""}, VkumdValueError, "stop is an empty string"),
    ({"stop": ["ok", ""]}, VkumdValueError, "stop[1] is an empty string"),
    ({"stop": ["ok", 3]}, VkumdTypeError, "stop[1] must be a string"),
    ({"stop": 3}, VkumdTypeError, "stop must be a string or a list"),
])
def test_bad_parameters_are_refused_by_name(options, error, words) -> None:
    with pytest.raises(error) as caught:
        SamplingParams.create(**options)
    assert words in str(caught.value)


def test_good_parameters_are_kept() -> None:
    params = SamplingParams.create(max_new_tokens=0, temperature=0.5, top_k=3, top_p=0.9,
                                   repetition_penalty=1.1, seed=7, stop="\n\n")
    assert params == SamplingParams(0, 0.5, 3, 0.9, 1.1, 7, ("\n\n",))
    assert SamplingParams.create(stop=["a", "bc"]).stop == ("a", "bc")


def test_nan_logits_and_a_wrong_length_are_refused() -> None:
    sampler = Sampler(SamplingParams.create(), VOCAB)
    with pytest.raises(VkumdValueError, match="NaN logits"):
        sampler(np.full(VOCAB, np.nan, dtype=np.float32))
    with pytest.raises(VkumdValueError, match="the vocabulary has 50"):
        sampler(np.zeros(VOCAB + 1))


def _reference(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The kept set and probabilities by a full stable sort, the plain way."""
    scaled = logits.astype(np.float64) / temperature
    order = np.argsort(-scaled, kind="stable")
    if top_k:
        order = order[:top_k]
    probs = np.exp(scaled[order] - scaled[order[0]])
    probs /= probs.sum()
    count = next(i + 1 for i, c in enumerate(np.cumsum(probs)) if c >= top_p * (1 - 1e-12)
                 or i == len(probs) - 1)
    out = np.zeros_like(scaled)
    out[order[:count]] = probs[:count] / probs[:count].sum()
    return out


@pytest.mark.parametrize("vocab", [7, 300, 5000])
@pytest.mark.parametrize("top_k, top_p", [(0, 0.3), (0, 0.97), (3, 1.0), (250, 0.9),
                                          (0, 1.0), (6, 0.5)])
def test_the_kept_set_matches_a_full_sort(vocab, top_k, top_p) -> None:
    rng = np.random.default_rng(vocab + top_k)
    # Rounded logits: many exact ties, also at the top-k edge.
    logits = np.round(rng.standard_normal(vocab) * 2, 1)
    params = SamplingParams.create(temperature=0.7, top_k=top_k, top_p=top_p)
    np.testing.assert_allclose(distribution(logits, params),
                               _reference(logits, 0.7, top_k, top_p), rtol=1e-12, atol=0)


def test_a_flat_distribution_widens_the_nucleus_past_its_first_guess() -> None:
    probs = distribution(np.zeros(1000), SamplingParams.create(temperature=1.0, top_p=0.5))
    assert np.flatnonzero(probs).tolist() == list(range(500))

"""Choosing the next token from a model's logits: greedy, temperature, top-k, top-p and the
repetition penalty, as llama.cpp and Hugging Face apply them.

Every request gets its own :class:`Sampler` with its own seeded numpy ``Generator``, so a
request's tokens depend on its seed and its logits only, never on the other sequences that
share its decode steps. The order is Hugging Face's: penalty, temperature, top-k, top-p.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError

# More new tokens than this in one request is a mistake (a context this long does not exist
# for the models vkumd runs); the cap turns a typo into an error instead of an endless run.
MAX_NEW_TOKENS_LIMIT = 1 << 20


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise VkumdTypeError(f"{name} must be a number, not {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise VkumdValueError(f"{name} is NaN; give a number")
    return value


def _integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise VkumdTypeError(f"{name} must be an int, not {type(value).__name__}")
    return int(value)


def check_stop(stop: Any) -> tuple[str, ...]:
    """``stop`` (None, a string or a list of strings) as a tuple of non-empty strings.

    Raises:
        VkumdTypeError: not a str or a list of str.
        VkumdValueError: an empty string (it would end every request at once).
    """
    if stop is None:
        return ()
    items: Iterable[Any] = (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, str) and not isinstance(stop, (list, tuple)):
        raise VkumdTypeError(f"stop must be a string or a list of strings, not "
                             f"{type(stop).__name__}")
    result = []
    for index, item in enumerate(items):
        where = "stop" if isinstance(stop, str) else f"stop[{index}]"
        if not isinstance(item, str):
            raise VkumdTypeError(f"{where} must be a string, not {type(item).__name__}")
        if not item:
            raise VkumdValueError(f"{where} is an empty string; a stop sequence needs at "
                                  "least one character (leave it out to not stop on text)")
        result.append(item)
    return tuple(result)


@dataclass(frozen=True)
class SamplingParams:
    """What one request asks for; build it with :meth:`create`, which checks every field.

    Attributes:
        max_new_tokens: the most tokens to generate (0: none).
        temperature: 0 picks the most likely token (greedy, ties to the lowest id); above 0
            divides the logits before sampling.
        top_k: sample among the ``top_k`` most likely tokens only (0: all).
        top_p: sample among the smallest set of most likely tokens whose probabilities add
            up to at least ``top_p`` (1: all).
        repetition_penalty: logits of tokens already seen (prompt and generated) are divided
            by it when positive and multiplied when negative (1: off).
        seed: the sampler's seed; the same seed gives the same tokens (None: fresh entropy).
        stop: strings that end the request; the text stops before the first of them.
    """

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @classmethod
    def create(cls, max_new_tokens: Any = 128, temperature: Any = 0.0, top_k: Any = 0,
               top_p: Any = 1.0, repetition_penalty: Any = 1.0, seed: Any = None,
               stop: Any = None) -> SamplingParams:
        """Checked parameters (see the class's attributes).

        Raises:
            VkumdTypeError: a field of the wrong type.
            VkumdValueError: a value out of range: max_new_tokens < 0 or over
                :data:`MAX_NEW_TOKENS_LIMIT`, temperature < 0 or not finite, top_k < 0,
                top_p outside (0, 1], repetition_penalty <= 0 or not finite, a negative
                seed, NaN anywhere, an empty stop string.
        """
        tokens = _integer("max_new_tokens", max_new_tokens)
        if not 0 <= tokens <= MAX_NEW_TOKENS_LIMIT:
            raise VkumdValueError(f"max_new_tokens is {tokens}; it must be between 0 and "
                                  f"{MAX_NEW_TOKENS_LIMIT}")
        temp = _number("temperature", temperature)
        if temp < 0 or math.isinf(temp):
            raise VkumdValueError(f"temperature is {temp}; it must be >= 0 and finite "
                                  "(0: greedy)")
        k = _integer("top_k", top_k)
        if k < 0:
            raise VkumdValueError(f"top_k is {k}; it must be >= 0 (0: no limit)")
        p = _number("top_p", top_p)
        if not 0 < p <= 1:
            raise VkumdValueError(f"top_p is {p}; it must be in (0, 1] (1: no limit)")
        penalty = _number("repetition_penalty", repetition_penalty)
        if penalty <= 0 or math.isinf(penalty):
            raise VkumdValueError(f"repetition_penalty is {penalty}; it must be > 0 and "
                                  "finite (1: off)")
        if seed is not None:
            seed = _integer("seed", seed)
            if seed < 0:
                raise VkumdValueError(f"seed is {seed}; it must be >= 0")
        return cls(tokens, temp, k, p, penalty, seed, check_stop(stop))


def apply_repetition_penalty(logits: np.ndarray, seen: np.ndarray,
                             penalty: float) -> np.ndarray:
    """``logits`` (a copy) with the seen tokens' logits divided by ``penalty`` where
    positive and multiplied by it where negative, as llama.cpp and Hugging Face do.

    Args:
        logits: float [vocab].
        seen: the ids seen so far (any order, repeats allowed) or a bool mask [vocab].
        penalty: > 0; 1 leaves the logits as they are.
    """
    out = np.array(logits, dtype=np.float64)
    if penalty == 1.0:
        return out
    index = np.flatnonzero(seen) if seen.dtype == bool else np.unique(seen)
    chosen = out[index]
    out[index] = np.where(chosen > 0, chosen / penalty, chosen * penalty)
    return out


def _largest(scaled: np.ndarray, count: int) -> np.ndarray:
    """The ids of the ``count`` largest values, largest first; equal values keep ascending
    ids, also at the edge (a partition, then a sort of the few kept)."""
    vocab = scaled.shape[0]
    if count >= vocab:
        return np.argsort(-scaled, kind="stable")
    edge = np.partition(scaled, vocab - count)[vocab - count]
    above = np.flatnonzero(scaled > edge)
    chosen = np.concatenate([above, np.flatnonzero(scaled == edge)[:count - above.size]])
    return chosen[np.lexsort((chosen, -scaled[chosen]))]


# The nucleus search starts with this many candidates and widens 8x until they hold top_p.
_NUCLEUS_START = 64


def support(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The ids sampling may pick and their probabilities (float64, summing to 1) for
    ``temperature > 0``: softmax of ``logits / temperature`` restricted to the top ``top_k``
    (ties at the edge kept by lower id), then to the smallest most-likely set whose mass
    reaches ``top_p`` (the first token always stays)."""
    scaled = np.asarray(logits, dtype=np.float64) / params.temperature
    vocab = scaled.shape[0]
    limit = params.top_k if 0 < params.top_k < vocab else vocab
    if params.top_p >= 1.0:
        ids = _largest(scaled, limit) if limit < vocab else np.arange(vocab)
        weights = np.exp(scaled[ids] - scaled[ids].max())
        return ids, weights / weights.sum()
    kept = _largest(scaled, limit) if limit < vocab else None
    peak = scaled.max()
    total = np.exp((scaled if kept is None else scaled[kept]) - peak).sum()
    count = min(limit, _NUCLEUS_START)
    while True:
        if kept is None and count * 4 > vocab:
            count = vocab  # a flat distribution: one full sort beats more partitions
        ids = kept[:count] if kept is not None else _largest(scaled, count)
        cumulative = np.cumsum(np.exp(scaled[ids] - peak)) / total
        if cumulative[-1] >= params.top_p * (1 - 1e-12) or count >= limit:
            break
        count = min(limit, count * 8)
    keep = min(int(np.searchsorted(cumulative, params.top_p * (1 - 1e-12))) + 1, ids.size)
    ids = ids[:keep]
    weights = np.exp(scaled[ids] - peak)
    return ids, weights / weights.sum()


def distribution(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """:func:`support` as a dense float64 [vocab] array (zero outside the kept set)."""
    ids, probs = support(logits, params)
    out = np.zeros(np.asarray(logits).shape[0], dtype=np.float64)
    out[ids] = probs
    return out


class Sampler:
    """One request's token chooser, holding its seeded generator and the ids it has seen.

    Args:
        params: the request's :class:`SamplingParams`.
        vocab_size: the logits' length.
        prompt_ids: the prompt, counted as seen for the repetition penalty.
    """

    def __init__(self, params: SamplingParams, vocab_size: int,
                 prompt_ids: Sequence[int] = ()) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        self.seen = np.zeros(vocab_size, dtype=bool)
        self.seen[np.asarray(list(prompt_ids), dtype=np.int64)] = True

    def __call__(self, logits: np.ndarray) -> int:
        """The next token for ``logits`` (float [vocab]); records it as seen.

        Raises:
            VkumdValueError: the logits have the wrong length or hold NaN (a model fault).
        """
        logits = np.asarray(logits)
        if logits.shape != self.seen.shape:
            raise VkumdValueError(f"sampling: logits of shape {logits.shape}, the vocabulary "
                                  f"has {self.seen.shape[0]} tokens")
        if np.isnan(logits).any():
            raise VkumdValueError("sampling: the model produced NaN logits")
        params = self.params
        adjusted = apply_repetition_penalty(logits, self.seen, params.repetition_penalty)
        if params.temperature == 0.0:
            token = int(np.argmax(adjusted))  # the first maximum: ties go to the lowest id
        else:
            ids, probs = support(adjusted, params)
            cumulative = np.cumsum(probs)
            draw = self.rng.random() * cumulative[-1]
            index = min(int(np.searchsorted(cumulative, draw, side="right")), ids.size - 1)
            token = int(ids[index])
        self.seen[token] = True
        return token

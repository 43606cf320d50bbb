"""The decode step of :class:`~vkumd.framework.models.llama_runner.LlamaRunner`: one token for
every slot, captured once per (rows, cache-length bucket) with ``ctx.capture()`` and replayed.

A step's inputs live in fixed device tensors (``ids`` ``[slots, 1]``, ``positions`` and
``lengths`` ``[slots]``, int32) written from the host before each replay; its logits are a
tensor the recording owns, read back after. So a step costs the host three small writes, one
submit and one read, not the ~500 dispatches of recording it.

Rows: a recording runs the first ``rows`` slots (a power of two covering the highest slot
taking part), over views of the first ``rows`` entries of each tensor. A view at an
allocation's start has the allocation's hazard key, so these views are ordered against every
other use of the caches and inputs. Slots below ``rows`` that take no part run too (their
row's position is their length, where nothing valid lies yet, and their logits are ignored),
which costs less than a recording per subset.

Cache-length buckets: the cache is ``[slots, max_context, kv_heads, head_dim]`` per layer and
attention reads each slot's first ``lengths[b]`` keys, so the buckets do not change what is
read; they choose the attention path. While every length fits one key split
(:data:`SHORT_KEYS`) the single-pass kernel runs (one launch a layer); past it flash-decoding
splits the keys (two launches a layer: the splits and their combine), which keeps long
contexts parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd.framework.execute.arena import view
from vkumd.framework.models import llama

# At most this many keys per slot: one key split's worth (the attention planner's minimum
# split, DECODE_MIN_SPLIT_KEYS), so splitting would leave one split busy and add a combine.
SHORT_KEYS = 256


def length_bucket(longest: int, max_context: int) -> int:
    """The cache-length bucket of a step whose longest slot will hold ``longest`` keys."""
    return SHORT_KEYS if longest <= SHORT_KEYS and SHORT_KEYS < max_context else max_context


def row_bucket(highest_slot: int, slots: int) -> int:
    """Rows a step runs: the power of two covering ``highest_slot``, at most ``slots``."""
    rows = 1
    while rows <= highest_slot:
        rows *= 2
    return min(rows, slots)


@dataclass
class DecodeRecording:
    """One captured decode step.

    Attributes:
        rows: slots it runs (the first ``rows``).
        bucket: its cache-length bucket.
        graph: the captured :class:`~vkumd.runtime.capture.Graph`.
        logits: ``[rows, vocab]`` in the activation dtype, rewritten by each replay.
    """

    rows: int
    bucket: int
    graph: Any
    logits: Any

    @property
    def kernels(self) -> int:
        """Dispatches and copies one replay submits."""
        return self.graph.dispatches + self.graph.copies

    def release(self) -> None:
        """Free the command buffer and unpin its memory (safe twice)."""
        self.graph.release()
        self.logits.release()


class DecodeStep:
    """Fixed input tensors and the recordings of the decode step.

    Args:
        ctx: the context.
        weights: the device weights.
        keys, values: per layer, the cache ``[slots, max_context, kv_heads, head_dim]``.
    """

    def __init__(self, ctx: Any, weights: llama.LlamaWeights, keys: list[Any],
                 values: list[Any]) -> None:
        self.ctx = ctx
        self.weights = weights
        self.keys, self.values = keys, values
        self.slots, self.max_context = keys[0].shape[0], keys[0].shape[1]
        self.ids = ctx.zeros((self.slots, 1), "int32")
        self.positions = ctx.zeros((self.slots,), "int32")
        self.lengths = ctx.zeros((self.slots,), "int32")
        self.recordings: dict[tuple[int, int], DecodeRecording] = {}
        self.last: DecodeRecording | None = None
        self.steps = 0

    def _record(self, rows: int, bucket: int) -> DecodeRecording:
        def first(t: Any) -> Any:
            return view(t, (rows, *t.shape[1:])) if rows < t.shape[0] else t

        path = "tiled" if bucket <= SHORT_KEYS else "auto"
        attention = llama.Decode([first(t) for t in self.keys],
                                 [first(t) for t in self.values], first(self.positions),
                                 first(self.lengths), path)
        with self.ctx.capture() as graph:
            logits = llama.forward(self.weights, first(self.ids), first(self.positions),
                                   attention)
        return DecodeRecording(rows, bucket, graph, logits)

    def run(self, tokens: dict[int, int], lengths: list[int]) -> dict[int, np.ndarray]:
        """One step: each ``slot: id`` in ``tokens`` appended at position ``lengths[slot]``.

        Returns:
            float32 logits ``[vocab]`` per slot of ``tokens``.
        """
        rows = row_bucket(max(tokens), self.slots)
        longest = max(lengths[s] for s in tokens) + 1
        bucket = length_bucket(longest, self.max_context)
        key = (rows, bucket)
        recording = self.recordings.get(key)
        if recording is None:
            recording = self.recordings[key] = self._record(rows, bucket)
        ids = np.zeros((self.slots, 1), np.int32)
        for slot, token in tokens.items():
            ids[slot, 0] = token
        positions = np.minimum(np.asarray(lengths, np.int32), self.max_context)
        # A slot not in ``tokens`` still runs when below ``rows``: its key lands at its own
        # length, past what it holds, and its logits are dropped.
        self.ids.write(ids)
        self.positions.write(positions)
        self.lengths.write(positions + 1)
        recording.graph.replay()
        self.last = recording
        self.steps += 1
        logits = recording.logits.numpy()
        return {slot: np.asarray(logits[slot], dtype=np.float32) for slot in tokens}

    def release(self) -> None:
        """Free the recordings and the input tensors (safe twice)."""
        for recording in self.recordings.values():
            recording.release()
        self.recordings.clear()
        for t in (self.ids, self.positions, self.lengths):
            t.release()

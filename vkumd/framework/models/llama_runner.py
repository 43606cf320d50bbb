"""``LlamaRunner``: a Llama-family model on a vkumd device, with a KV cache of ``slots``
sequences (as llama.cpp's server slots).

- :meth:`LlamaRunner.prefill` runs one prompt into one slot through a compiled graph with a
  symbolic sequence (:func:`trace_prefill`: :func:`~vkumd.framework.models.llama.forward`
  traced, optimised, its memory bucketed by sequence length). The prompt's own keys attend
  causally to each other, so the graph never reads the cache: it returns each layer's
  rotated keys and values, which are then copied into the slot's rows of the cache.
  The cache is one tensor per layer for K and for V, ``[slots, max_context, kv_heads,
  head_dim]``, because the decode step attends over every slot in one launch; a slot's rows
  are a view inside it. The runtime keys hazards by a range's start, so work on such a view
  and on the whole cache is only ordered across submissions: the copies run in their own
  submission, after the graph's replay and before the next decode replay, both of which
  begin with a barrier against earlier work on the queue.
- :meth:`LlamaRunner.decode` runs one token for each slot given, every slot at its own
  position, through recorded steps (:mod:`~vkumd.framework.models.llama_decode`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from numbers import Integral
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes, ops
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.execute.arena import view
from vkumd.framework.graph import Graph, TracedTensor, Tracer, run_passes
from vkumd.framework.models import llama
from vkumd.framework.models.llama_decode import DecodeStep
from vkumd.vk.errors import OutOfDeviceMemory

# VK_ERROR_OUT_OF_DEVICE_MEMORY: the code the pool's own refusals carry too.
_OUT_OF_DEVICE_MEMORY = -2


def trace_prefill(weights: llama.LlamaWeights, cache_dtype: Any) -> Graph:
    """The prefill as a graph: inputs ``ids`` ``[1, seq]``, ``positions`` ``[1]`` and
    ``last`` ``[1]`` (``seq - 1``), all int32; outputs the last token's logits ``[1, vocab]``
    then each layer's keys and values ``[1, seq, kv_heads, head_dim]`` in ``cache_dtype``.

    Args:
        weights: :func:`llama.prepare`'s host arrays; each becomes a graph weight of its name.
        cache_dtype: the cache's dtype.
    """
    tracer = Tracer("llama_prefill")
    traced = weights.map(lambda name, array: TracedTensor(tracer.weight(name, array), tracer))
    ids = TracedTensor(tracer.input("ids", (1, "seq"), "int32"), tracer)
    positions = TracedTensor(tracer.input("positions", (1,), "int32"), tracer)
    last = TracedTensor(tracer.input("last", (1,), "int32"), tracer)
    attention = llama.Prefill(dtypes.dtype(cache_dtype))
    try:
        logits = llama.forward(traced, ids, positions, attention, last=last)
        kv = [t for pair in zip(attention.keys, attention.values, strict=True) for t in pair]
        outputs = [tracer.lift(t, "output") for t in (logits, *kv)]
    finally:
        tracer.open = False
    tracer.output(*outputs)
    return tracer.build()


def _index(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise VkumdTypeError(f"LlamaRunner: {what} must be an int, not {value!r}")
    return int(value)


class LlamaRunner:
    """A Llama-family model on ``ctx`` with a KV cache of ``slots`` sequences.

    Args:
        ctx: a :class:`vkumd.Context`.
        config: a ``LlamaConfig``.
        weights: per name a ``HostWeight`` (see ``llama_weights``).
        slots: sequences the cache holds (and one decode step runs) at once.
        max_context: positions per slot.
        cache_dtype: ``"float16"`` or ``"float32"`` keys and values.
        compute: ``"quantized"`` (block-quantized matrices stay raw blocks on the device),
            ``"float16"`` or ``"float32"`` (dequantised on load; activations in that dtype).

    Raises:
        VkumdValueError: bad sizes or options; a weight missing or of the wrong shape.
        VkumdTypeError: non-int sizes; a config without the LlamaConfig fields.
        OutOfDeviceMemory: the weights and the cache would not fit in the device's memory
            (or the pool's limit): says how many bytes each needs and what there is.
    """

    def __init__(self, ctx: Any, config: Any, weights: Mapping[str, Any], *, slots: int = 8,
                 max_context: int = 2048, cache_dtype: str = "float16",
                 compute: str = "quantized") -> None:
        self.context = ctx
        self.config = config
        self.slots = _index(slots, "slots")
        self.max_context = _index(max_context, "max_context")
        if self.slots < 1 or self.max_context < 1:
            raise VkumdValueError(f"LlamaRunner: slots={slots} and max_context={max_context}; "
                                  "both must be >= 1")
        if cache_dtype not in llama.CACHE_DTYPES:
            raise VkumdValueError(f"LlamaRunner: cache_dtype={cache_dtype!r}; choose one of "
                                  f"{', '.join(llama.CACHE_DTYPES)}")
        llama.check_config(config)
        self.compute = compute
        self.cache_dtype = dtypes.dtype(cache_dtype)
        self._lengths = [0] * self.slots
        self.prefills = 0
        self.weights: llama.LlamaWeights | None = None
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self._graph: CompiledGraph | None = None
        self._step: DecodeStep | None = None
        host = llama.prepare(config, weights, compute)
        self.weight_bytes = host.nbytes()
        self._check_memory()
        try:
            self.weights = llama.upload(ctx, host)
            cache_shape = (self.slots, self.max_context, config.num_kv_heads, config.head_dim)
            for _ in range(config.num_layers):
                self.keys.append(ctx.zeros(cache_shape, self.cache_dtype))
                self.values.append(ctx.zeros(cache_shape, self.cache_dtype))
            graph = run_passes(trace_prefill(host, self.cache_dtype))
            self._graph = CompiledGraph(graph, ctx, buckets={"seq": self._seq_buckets()},
                                        max_recordings=4, weights=self.weights.leaves)
            self._step = DecodeStep(ctx, self.weights, self.keys, self.values)
        except BaseException:
            self.close()
            raise

    # -- sizes -----------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Logits per token."""
        return int(self.config.vocab_size)

    @property
    def cache_bytes(self) -> int:
        """Bytes of the K and V caches of every layer."""
        c = self.config
        return (2 * c.num_layers * self.slots * self.max_context * c.num_kv_heads
                * c.head_dim * self.cache_dtype.itemsize)

    def _seq_buckets(self) -> list[int]:
        sizes, size = [], 16
        while size < self.max_context:
            sizes.append(size)
            size *= 2
        return [*sizes, self.max_context]

    def _check_memory(self) -> None:
        memory = self.context.memory
        heap = int(self.context.caps.device_local_bytes)
        limit = memory.get_limit()
        room = heap if limit is None else min(heap, limit)
        free = room - memory.used_bytes()
        need = self.weight_bytes + self.cache_bytes
        if need <= free:
            return
        where = (f"the device's {heap} bytes of device-local memory" if limit is None
                 or limit >= heap else f"the memory pool's limit of {limit} bytes")
        error = OutOfDeviceMemory(
            "vkAllocateMemory", _OUT_OF_DEVICE_MEMORY,
            f"LlamaRunner needs {need} bytes ({self.weight_bytes} of weights and "
            f"{self.cache_bytes} of {self.cache_dtype.name} KV cache for {self.slots} slots x "
            f"{self.max_context} positions x {self.config.num_layers} layers) and "
            f"{max(free, 0)} of {where} are free; lower slots or max_context, or use "
            "cache_dtype='float16'")
        error.requested, error.in_use, error.limit = need, memory.used_bytes(), limit
        raise error

    # -- the model -------------------------------------------------------------------------
    def _slot(self, slot: Any) -> int:
        index = _index(slot, "slot")
        if not 0 <= index < self.slots:
            raise VkumdValueError(f"LlamaRunner: slot {index} is out of range; this runner "
                                  f"has slots 0 to {self.slots - 1}")
        return index

    def _check_open(self) -> None:
        if self._step is None:
            raise VkumdValueError("LlamaRunner: this runner was closed; make a new one")

    def _token(self, token: Any, what: str) -> int:
        value = _index(token, what)
        if not 0 <= value < self.vocab_size:
            raise VkumdValueError(f"LlamaRunner: {what} is {value}, outside the vocabulary "
                                  f"[0, {self.vocab_size})")
        return value

    def prefill(self, slot: int, ids: Sequence[int]) -> np.ndarray:
        """Run a prompt into ``slot`` (replacing what it held).

        Args:
            slot: the cache slot, ``0 <= slot < slots``.
            ids: the prompt's token ids, 1 to ``max_context``.

        Returns:
            float32 logits ``[vocab]`` after the last prompt token. The slot's cache holds
            positions ``[0, len(ids))`` afterwards.

        Raises:
            VkumdValueError: a slot out of range, an empty prompt, one longer than
                ``max_context``, an id outside the vocabulary, a closed runner.
            VkumdTypeError: a non-int slot or id.
        """
        self._check_open()
        index = self._slot(slot)
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence | np.ndarray):
            raise VkumdTypeError(f"LlamaRunner.prefill: ids must be a list of ints, not "
                                 f"{type(ids).__name__}")
        tokens = [self._token(t, f"ids[{i}]") for i, t in enumerate(ids)]
        if not tokens:
            raise VkumdValueError("LlamaRunner.prefill: the prompt is empty; give at least one "
                                  "token id")
        n = len(tokens)
        if n > self.max_context:
            raise VkumdValueError(f"LlamaRunner.prefill: the prompt has {n} tokens and the "
                                  f"context holds {self.max_context}; shorten the prompt or "
                                  "make the runner with a larger max_context")
        self._lengths[index] = 0  # until the cache holds the prompt
        outputs = self._graph(ids=np.asarray([tokens], np.int32),
                              positions=np.zeros(1, np.int32),
                              last=np.asarray([n - 1], np.int32))
        logits, kv = outputs[0], outputs[1:]
        c = self.config
        row_bytes = self.max_context * c.num_kv_heads * c.head_dim * self.cache_dtype.itemsize
        rows = (1, n, c.num_kv_heads, c.head_dim)
        for i in range(c.num_layers):
            for cache, new in ((self.keys[i], kv[2 * i]), (self.values[i], kv[2 * i + 1])):
                ops.copy(new, out=view(cache, rows, offset=index * row_bytes))
        result = np.asarray(logits.numpy()[0], dtype=np.float32)
        self._lengths[index] = n
        self.prefills += 1
        return result

    def decode(self, tokens: Mapping[int, int]) -> dict[int, np.ndarray]:
        """One step for every slot in ``tokens``: its token is appended at position
        ``length(slot)`` and its logits after it are returned.

        Args:
            tokens: ``{slot: token id}``; each slot must hold a prompt and have room for
                one more position.

        Returns:
            ``{slot: float32 logits [vocab]}``.

        Raises:
            VkumdValueError: no slots, a slot out of range or without a prompt, a full slot,
                an id outside the vocabulary, a closed runner.
            VkumdTypeError: not a mapping; a non-int slot or id.
        """
        self._check_open()
        if not isinstance(tokens, Mapping):
            raise VkumdTypeError(f"LlamaRunner.decode: tokens must be a dict of slot -> "
                                 f"token id, not {type(tokens).__name__}")
        if not tokens:
            raise VkumdValueError("LlamaRunner.decode: no slots given; pass {slot: token id}")
        checked: dict[int, int] = {}
        for slot, token in tokens.items():
            index = self._slot(slot)
            length = self._lengths[index]
            if length == 0:
                raise VkumdValueError(f"LlamaRunner.decode: slot {index} holds no prompt; "
                                      "call prefill(slot, ids) first")
            if length >= self.max_context:
                raise VkumdValueError(f"LlamaRunner.decode: slot {index} is full ({length} of "
                                      f"{self.max_context} positions); release it or make "
                                      "the runner with a larger max_context")
            checked[index] = self._token(token, f"the token for slot {index}")
        result = self._step.run(checked, self._lengths)
        for index in checked:
            self._lengths[index] += 1
        return result

    def length(self, slot: int) -> int:
        """Positions ``slot``'s cache holds (0: free)."""
        return self._lengths[self._slot(slot)]

    def release(self, slot: int) -> None:
        """Free ``slot`` for another prompt (its cache rows are simply overwritten later)."""
        self._lengths[self._slot(slot)] = 0

    def stats(self) -> dict[str, Any]:
        """Sizes and counters: ``kernels_per_step`` (of the latest decode step),
        ``weight_bytes``, ``cache_bytes``, ``recordings`` (decode steps captured),
        ``prefill_recordings``, ``decode_steps``, ``prefills``."""
        step = self._step
        last = step.last if step is not None else None
        return {"kernels_per_step": last.kernels if last is not None else None,
                "barriers_per_step": last.graph.barriers if last is not None else None,
                "weight_bytes": self.weight_bytes, "cache_bytes": self.cache_bytes,
                "recordings": len(step.recordings) if step is not None else 0,
                "prefill_recordings": self._graph.recorded if self._graph is not None else 0,
                "decode_steps": step.steps if step is not None else 0,
                "prefills": self.prefills}

    def close(self) -> None:
        """Free the recordings, the cache and the weights (safe twice)."""
        if self._step is not None:
            self._step.release()
            self._step = None
        if self._graph is not None:
            self._graph.release()
            self._graph = None
        for t in (*self.keys, *self.values):
            t.release()
        self.keys, self.values = [], []
        if self.weights is not None:
            self.weights.release()
            self.weights = None

    def __enter__(self) -> LlamaRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

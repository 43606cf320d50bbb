"""The BERT encoder as a vkumd graph: :func:`vkumd.framework.models.bert.forward` traced, then
optimised by the passes and run by :class:`~vkumd.framework.execute.CompiledGraph`.

Nothing here restates the model: :func:`trace_forward` calls the eager forward on
:class:`~vkumd.framework.graph.proxy.TracedTensor` weights (each a named graph weight) and
inputs (``batch`` and ``seq`` symbolic), and every ``vkumd.ops`` call it makes records a node.
The forward already names its fusions (bias, GELU and residual in the GEMM epilogue, heads
read in place by attention); the passes still fuse the word + position sum into its layer
norm (``add_layer_norm``). Because ``batch`` and ``seq`` are symbolic, one bucket's memory
serves every batch up to it, each size recorded at its true sizes. Inputs, all int32:

- ``ids`` ``[batch, seq]``: token ids (0 past each sentence's length);
- ``positions`` ``[batch, seq]``: ``0 .. seq-1`` on every row;
- ``lengths`` ``[batch]``: tokens per sentence; attention masks the keys past it, so the
  batch's padding (to its longest sentence) never reaches a real token;
- ``pool_lengths`` ``[batch]``: the tokens pooled (the length; 1 for ``cls`` pooling);
- ``pool_scale`` ``[batch, 1]`` (float, ``mean_sqrt_len`` pooling only): ``sqrt(length)``.

Outputs: ``pooled`` ``[batch, hidden]`` and ``embeddings`` (its L2-normalised form). The eager
path feeds :func:`graph_inputs`'s arrays to the forward too, so both paths see one interface.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from vkumd.framework import dtypes
from vkumd.framework.graph import Graph, TracedTensor, Tracer, Value, run_passes
from vkumd.framework.models import bert
from vkumd.framework.models.config import BertConfig, SentenceConfig

INPUTS = ("ids", "positions", "lengths", "pool_lengths")
_MODEL_FILE = os.path.normcase(os.path.abspath(bert.__file__))


class _ModelTracer(Tracer):
    """A tracer that labels each node with the line of ``bert.py`` that recorded it (the
    plain tracer names the user's line, here the caller of the encoder)."""

    def _apply(self, op: str, inputs: Any, attrs: dict[str, Any]) -> Any:
        frame = sys._getframe(1)
        while frame is not None and os.path.normcase(frame.f_code.co_filename) != _MODEL_FILE:
            frame = frame.f_back
        label = f"bert.py:{frame.f_lineno}" if frame is not None else None
        return self.op(op, *inputs, label=label, **attrs)


def input_types(sentence: SentenceConfig, dtype: dtypes.DType
                ) -> dict[str, tuple[tuple[Any, ...], Any]]:
    """Each graph input's shape (symbol names for ``batch`` and ``seq``) and dtype."""
    types: dict[str, tuple[tuple[Any, ...], Any]] = {
        "ids": (("batch", "seq"), "int32"), "positions": (("batch", "seq"), "int32"),
        "lengths": (("batch",), "int32"), "pool_lengths": (("batch",), "int32")}
    if sentence.pooling == "mean_sqrt_len":
        types["pool_scale"] = (("batch", 1), dtype)
    return types


def trace_forward(weights: bert.BertWeights) -> Graph:
    """:func:`bert.forward` and :func:`bert.normalize` recorded as a graph.

    Args:
        weights: :func:`bert.prepare`'s host arrays; each becomes a graph weight of the name
            :meth:`bert.BertWeights.named` gives it.

    Returns:
        The checked, unoptimised graph (see the module docstring for its interface).
    """
    tracer = _ModelTracer("bert")
    traced = weights.map(lambda name, array: TracedTensor(tracer.weight(name, array), tracer))
    feeds = {name: TracedTensor(tracer.input(name, shape, dtype), tracer)
             for name, (shape, dtype) in input_types(weights.sentence, weights.dtype).items()}
    try:
        pooled = bert.forward(traced, **feeds)
        outputs: list[Value] = [tracer.lift(t, "output")
                                for t in (pooled, bert.normalize(traced, pooled))]
    finally:
        tracer.open = False
    tracer.output(*outputs)
    return tracer.build()


def build_graph(config: BertConfig, sentence: SentenceConfig, host: Mapping[str, np.ndarray],
                dtype: Any = "float32") -> Graph:
    """The encoder as an unoptimised graph, from checked host weights.

    Args:
        config: the encoder's sizes.
        sentence: pooling (mean, cls, mean_sqrt_len).
        host: the checked host weights, by Hugging Face name.
        dtype: float32 or float16: weights and activations (kernels accumulate in float32).

    Returns:
        The checked graph.

    Raises:
        VkumdValueError: another dtype.
    """
    return trace_forward(bert.prepare(config, sentence, dict(host), dtype))


def optimize(graph: Graph) -> Graph:
    """``graph`` through the default pass pipeline (fusion, folding, DCE)."""
    return run_passes(graph)


def graph_inputs(lengths: np.ndarray, ids: np.ndarray, pooling: str,
                 dtype: Any = "float32") -> dict[str, np.ndarray]:
    """The host arrays one padded batch feeds the graph (and the eager forward).

    Args:
        lengths: ``(batch,)`` tokens per sentence.
        ids: ``(batch, seq)`` token ids, 0 past each length.
        pooling: the sentence config's pooling mode.
        dtype: the graph's float type (for ``pool_scale``).

    Returns:
        Arrays by input name.
    """
    lengths = np.asarray(lengths, dtype=np.int32)
    batch, seq = ids.shape
    feeds = {"ids": np.ascontiguousarray(ids, dtype=np.int32),
             "positions": np.ascontiguousarray(
                 np.broadcast_to(np.arange(seq, dtype=np.int32), (batch, seq))),
             "lengths": lengths,
             "pool_lengths": np.ones_like(lengths) if pooling == "cls" else lengths}
    if pooling == "mean_sqrt_len":
        feeds["pool_scale"] = np.sqrt(lengths.astype(np.float64))[:, None].astype(
            dtypes.dtype(dtype).numpy)
    return feeds

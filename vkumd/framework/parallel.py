"""Several devices in one process: one context per device, a batch split across them.

``VKUMD_DEVICE`` may name a list (``0,1``; ``0,0`` opens two contexts on one device);
:func:`~vkumd.runtime.device.device_list` reads it, :func:`open_contexts` opens one context
per entry (a plain ``Context()`` takes the first).
:class:`DataParallelEncoder` holds one :class:`SentenceEncoder` per context and splits each
``encode`` call into contiguous slices, one per encoder, each run on its own thread. Nothing
here assumes the contexts sit on distinct devices: each context owns its own ``VkDevice``, so
two on the same physical device are as independent as two on different ones.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.context import Context
from vkumd.framework.models.encoder import SentenceEncoder, check_sentences
from vkumd.framework.models.loader import DEFAULT_MODEL
from vkumd.runtime.device import DeviceSpec, device_list

__all__ = ["DataParallelEncoder", "DeviceSpec", "device_list", "open_contexts",
           "split_evenly"]

def open_contexts(devices: str | Sequence[DeviceSpec] | None = None,
                  **options: Any) -> list[Context]:
    """Open one :class:`Context` per listed device.

    Args:
        devices: as :func:`device_list` takes (``None`` reads ``VKUMD_DEVICE``).
        options: passed to every ``Context`` (``validation``, ``memory_limit``, ...).

    Returns:
        The contexts, in list order; the caller closes them.

    Raises:
        DeviceUnavailable: an entry matches no device (contexts opened so far are closed).
    """
    wanted = device_list(devices)
    contexts: list[Context] = []
    try:
        # A plain Context would take only the list's first entry: name each device.
        for entry in wanted or [None]:
            contexts.append(Context(device=entry, **options))
    except BaseException:
        for ctx in contexts:
            ctx.close()
        raise
    return contexts


def split_evenly(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``(start, stop)`` ranges covering ``range(count)``, sizes within
    one of each other (the first ones get the remainder); empty ranges when count < parts."""
    base, extra = divmod(count, parts)
    ranges, start = [], 0
    for part in range(parts):
        stop = start + base + (1 if part < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


class DataParallelEncoder:
    """Sentence embeddings from several encoders at once, one thread per encoder.

    Build it from encoders you made (``DataParallelEncoder([enc_a, enc_b])``; they stay
    yours) or from devices (``DataParallelEncoder(devices=[0, 1])``, or ``devices=None`` to
    read ``VKUMD_DEVICE``), which opens one context and loads the model once per entry; those
    are closed by :meth:`close`. The same device may be listed twice.

    Args:
        encoders: ready encoders, each on its own context.
        devices: devices to open instead (exclusive with ``encoders``).
        model: the model to load on each device (with ``devices``).
        dtype: ``"float32"`` or ``"float16"`` (with ``devices``).
        context_options: passed to each ``Context`` (with ``devices``).
        compiled: as :meth:`SentenceEncoder.from_pretrained` (with ``devices``).

    Raises:
        VkumdValueError: both or neither source given in a way that names no encoder, or two
            encoders sharing one context (its streams are not meant for two threads at once).
        VkumdTypeError: an entry of ``encoders`` is not a :class:`SentenceEncoder`.
    """

    def __init__(self, encoders: Sequence[SentenceEncoder] | None = None, *,
                 devices: str | Sequence[DeviceSpec] | None = None,
                 model: str | os.PathLike[str] = DEFAULT_MODEL, dtype: Any = "float32",
                 context_options: dict[str, Any] | None = None,
                 compiled: bool = True) -> None:
        if encoders is not None and devices is not None:
            raise VkumdValueError("DataParallelEncoder: give encoders or devices, not both")
        self._owned: list[Context] = []
        if encoders is None:
            self._owned = open_contexts(devices, **(context_options or {}))
            made: list[SentenceEncoder] = []
            try:
                for ctx in self._owned:
                    made.append(SentenceEncoder.from_pretrained(model, ctx=ctx, dtype=dtype,
                                                                compiled=compiled))
            except BaseException:
                for enc in made:
                    enc.close()
                for ctx in self._owned:
                    ctx.close()
                raise
            encoders = made
        self.encoders = self._check(encoders)
        self._pool = ThreadPoolExecutor(max_workers=len(self.encoders),
                                        thread_name_prefix="vkumd-dp")

    @staticmethod
    def _check(encoders: Sequence[SentenceEncoder]) -> list[SentenceEncoder]:
        if isinstance(encoders, SentenceEncoder) or not isinstance(encoders, Sequence):
            raise VkumdTypeError("DataParallelEncoder: encoders must be a list of "
                                 "SentenceEncoder")
        found = list(encoders)
        if not found:
            raise VkumdValueError("DataParallelEncoder: no encoders; give at least one")
        seen: dict[int, int] = {}
        for index, enc in enumerate(found):
            if not isinstance(enc, SentenceEncoder):
                raise VkumdTypeError(f"DataParallelEncoder: encoders[{index}] is "
                                     f"{type(enc).__name__}, not SentenceEncoder")
            other = seen.setdefault(id(enc.context), index)
            if other != index:
                raise VkumdValueError(
                    f"DataParallelEncoder: encoders[{other}] and encoders[{index}] share one "
                    "context; give each its own (two contexts may sit on one device)")
        widths = {enc.hidden_size for enc in found}
        if len(widths) != 1:
            raise VkumdValueError(f"DataParallelEncoder: the encoders' embedding sizes differ "
                                  f"({sorted(widths)}); load the same model on each")
        return found

    @property
    def contexts(self) -> list[Context]:
        """Each encoder's context, in order."""
        return [enc.context for enc in self.encoders]

    @property
    def hidden_size(self) -> int:
        """Length of each embedding."""
        return self.encoders[0].hidden_size

    @property
    def max_seq_length(self) -> int:
        """Tokens per sentence; longer ones are truncated (as each encoder)."""
        return self.encoders[0].max_seq_length

    def encode(self, sentences: Sequence[str], batch_size: int = 32,
               normalize: bool = True, progress: bool | None = None,
               compiled: bool | None = None) -> np.ndarray:
        """Embed each sentence, the list cut into one contiguous slice per encoder.

        Args:
            sentences: a list of str, as :meth:`SentenceEncoder.encode` takes.
            batch_size: sentences per device batch within each slice.
            normalize: scale each embedding to unit length.
            progress: accepted as :meth:`SentenceEncoder.encode` takes it, so code written
                for one encoder runs unchanged; no bar is drawn (the slices run at once).
            compiled: as :meth:`SentenceEncoder.encode`.

        Returns:
            float32 array ``(len(sentences), hidden_size)`` in input order, the same values
            one encoder gives (an embedding does not depend on its batch).

        Raises:
            VkumdTypeError, VkumdValueError: as :meth:`SentenceEncoder.encode`; an error on
                one encoder's thread is raised here after every thread has stopped.
        """
        texts = check_sentences(sentences)
        if progress is not None and not isinstance(progress, bool):
            raise VkumdTypeError(f"encode: progress must be a bool or None, not {progress!r}")
        result = np.empty((len(texts), self.hidden_size), dtype=np.float32)
        ranges = split_evenly(len(texts), len(self.encoders))
        futures = [self._pool.submit(enc.encode, texts[start:stop], batch_size, normalize,
                                     False, compiled)
                   for enc, (start, stop) in zip(self.encoders, ranges, strict=True)
                   if stop > start]
        # Wait for every thread before raising, so no encoder is still running when the
        # caller reacts (e.g. closes the contexts).
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error
        busy = [r for r in ranges if r[1] > r[0]]
        for (start, stop), future in zip(busy, futures, strict=True):
            result[start:stop] = future.result()
        return result

    def close(self) -> None:
        """Stop the threads; free the encoders and contexts this object made (safe twice)."""
        self._pool.shutdown(wait=True)
        if self._owned:
            for enc in self.encoders:
                enc.close()
            for ctx in self._owned:
                ctx.close()
            self._owned = []

    def __enter__(self) -> DataParallelEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

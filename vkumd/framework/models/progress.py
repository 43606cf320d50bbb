"""A one-line progress bar on stderr for long encoding runs."""

from __future__ import annotations

import sys
import time
from typing import TextIO

# Runs of this many batches or fewer finish too soon for a bar to help.
AUTO_MIN_BATCHES = 4
_WIDTH = 24


class ProgressBar:
    """``[#######.........] 120/400 sentences 35.2/s`` rewritten in place.

    Args:
        total: sentences to encode.
        stream: where to draw (stderr by default).
    """

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.started = time.perf_counter()

    def advance(self, count: int) -> None:
        """``count`` more sentences are done; redraw (and end the line when all are)."""
        self.done = min(self.total, self.done + count)
        filled = _WIDTH * self.done // max(self.total, 1)
        rate = self.done / max(time.perf_counter() - self.started, 1e-9)
        end = "\n" if self.done >= self.total else ""
        self.stream.write(f"\r[{'#' * filled}{'.' * (_WIDTH - filled)}] {self.done}/"
                          f"{self.total} sentences {rate:.1f}/s{end}")
        self.stream.flush()


def wanted(progress: bool | None, batches: int, stream: TextIO | None = None) -> bool:
    """Whether to draw: as asked, or (``None``) for more than :data:`AUTO_MIN_BATCHES`
    batches on a terminal."""
    if progress is not None:
        return progress
    target = stream if stream is not None else sys.stderr
    return batches > AUTO_MIN_BATCHES and bool(getattr(target, "isatty", lambda: False)())

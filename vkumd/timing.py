"""Wall-clock medians for the demo and the benchmarks (machines here are shared and noisy)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(run: Callable[[], object], repeats: int = 5) -> float:
    """Call ``run`` ``repeats`` times and return the median wall time in seconds."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)

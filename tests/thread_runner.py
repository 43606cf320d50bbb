"""Run test bodies in threads: every error reaches the test, and a hang fails it instead of
hanging the run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest


def run_threads(targets: list[Callable[[], None]], timeout: float) -> None:
    """Run each target in its own thread; re-raise the first error; fail if one is still
    running ``timeout`` seconds after the start."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    end = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    hung = [thread.name for thread in threads if thread.is_alive()]
    if hung:
        pytest.fail(f"{len(hung)} thread(s) still running after {timeout} s: {hung}")
    if errors:
        raise errors[0]

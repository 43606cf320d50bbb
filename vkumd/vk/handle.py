"""Lifetime of native objects: release that is safe twice, and live-object counters."""

from __future__ import annotations

import functools
import sys
import threading
from collections import Counter
from typing import Any

_live: Counter[str] = Counter()
_live_lock = threading.Lock()


def live_objects() -> dict[str, int]:
    """Return how many objects of each :class:`Handle` subclass are alive (for leak tests)."""
    with _live_lock:
        return {name: count for name, count in _live.items() if count}


def _uncount_on_failure(init: Any) -> Any:
    """Wrap a subclass's ``__init__`` so that an object whose constructor raised is not counted.

    The constructor cleans up what it had created before raising; without this the half-built
    object (kept alive by the traceback) would show as a leak in :func:`live_objects`.
    """

    @functools.wraps(init)
    def counted_init(self: Handle, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except BaseException:
            counted = getattr(self, "_counted", None)
            if counted is not None:
                self._counted = None
                self.handle = None
                with _live_lock:
                    _live[counted] -= 1
            raise

    return counted_init


class Handle:
    """Base class of every object that owns a native resource.

    Subclasses implement :meth:`_release`; :meth:`release` calls it once, sets ``handle``
    to ``None`` first so a second call (or ``__del__`` after ``release``) does nothing, and
    keeps the per-class live counter.
    """

    handle: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            cls.__init__ = _uncount_on_failure(init)  # type: ignore[method-assign]

    def __init__(self) -> None:
        self._counted = type(self).__name__
        with _live_lock:
            _live[self._counted] += 1

    def _release(self) -> None:
        raise NotImplementedError

    @property
    def released(self) -> bool:
        """Whether :meth:`release` has run."""
        return self._counted is None

    def release(self) -> None:
        """Free the native object; calling it again does nothing."""
        counted = getattr(self, "_counted", None)
        if counted is None:
            return
        self._counted = None
        try:
            if self.handle is not None:
                self._release()
        finally:
            self.handle = None
            with _live_lock:
                _live[counted] -= 1

    def __del__(self) -> None:
        # At interpreter shutdown the binding may already be gone; releasing then can crash.
        if sys.is_finalizing():
            return
        try:
            self.release()
        except Exception:  # noqa: BLE001 - a destructor must not raise
            pass

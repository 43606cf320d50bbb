"""Serving the app with uvicorn, with a drain before shutdown.

uvicorn closes its listener as soon as SIGTERM arrives, so a load balancer that has not yet
seen the readiness probe fail still sends requests, which are refused at the socket. Here
the first SIGTERM (or SIGINT) starts a drain instead: ``GET /health`` answers 503
``draining`` while every route keeps serving for ``drain_grace_s`` seconds, long enough for
the probe to fail and traffic to move; then uvicorn's own shutdown runs (stop accepting,
wait for requests in flight, then the lifespan's shutdown computes what is still queued and
frees the device). A second signal during the drain shuts down at once (still finishing the
requests in flight, as uvicorn does).
"""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType
from typing import Any

import uvicorn

from vkumd.serve.config import ServeConfig


class DrainingServer(uvicorn.Server):
    """A :class:`uvicorn.Server` whose first exit signal drains ``app.state.server`` first.

    Args:
        config: uvicorn's settings; ``config.app`` is the app of
            :func:`vkumd.serve.app.create_app`.
        grace_s: seconds between the signal and closing the listener.
    """

    def __init__(self, config: uvicorn.Config, grace_s: float) -> None:
        super().__init__(config)
        self.grace_s = grace_s
        self.drain_until: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        served = self.config.app.state.server
        if self.drain_until is not None or self.grace_s <= 0 or not served.ready:
            super().handle_exit(sig, frame)  # nothing to drain, or a second signal
            return
        self._captured_signals.append(sig)  # re-raised after shutdown, as uvicorn does
        self.drain_until = time.monotonic() + self.grace_s
        served.drain()
        print(f"vkumd serve: {signal.Signals(sig).name}: draining for {self.grace_s:g} s "
              "(GET /health answers 503), then finishing what was accepted", file=sys.stderr,
              flush=True)

    async def on_tick(self, counter: int) -> bool:
        if self.drain_until is not None and time.monotonic() >= self.drain_until:
            self.should_exit = True
        return await super().on_tick(counter)


def serve(app: Any, config: ServeConfig) -> None:
    """Run ``app`` on ``config.host:config.port`` until a signal, draining first."""
    settings = uvicorn.Config(app, host=config.host, port=config.port,
                              log_level=config.log_level, lifespan="on",
                              timeout_graceful_shutdown=30)
    DrainingServer(settings, config.drain_grace_s).run()

"""``vkumd.serve``: an OpenAI-compatible embeddings server (``vkumd serve``; docs/serving.md).

Needs the ``serve`` extra (``pip install 'vkumd[serve]'``: Starlette, uvicorn,
prometheus-client). :func:`create_app` gives the ASGI app, :func:`run` serves it with uvicorn.
"""

from __future__ import annotations

from typing import Any

from vkumd.serve.config import FLAGS, ServeConfig

__all__ = ["FLAGS", "ServeConfig", "create_app", "run"]


def create_app(config: ServeConfig | None = None) -> Any:
    """The ASGI app (see :func:`vkumd.serve.app.create_app`)."""
    from vkumd.serve.app import create_app as make

    return make(config)


def run(config: ServeConfig) -> None:
    """Serve ``config`` with uvicorn until SIGINT or SIGTERM (which stop taking requests,
    finish those in flight and free the device)."""
    import uvicorn

    uvicorn.run(create_app(config), host=config.host, port=config.port,
                log_level=config.log_level, lifespan="on", timeout_graceful_shutdown=30)

"""``vkumd.serve``: an OpenAI-compatible server (``vkumd serve``; docs/serving.md): embeddings,
and text generation with ``--generate-model``.

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
    """Serve ``config`` with uvicorn until SIGINT or SIGTERM (which turn ``/health`` to 503
    for ``config.drain_grace_s`` seconds, then stop taking requests, finish those accepted
    and free the device)."""
    from vkumd.serve.runner import serve

    serve(create_app(config), config)

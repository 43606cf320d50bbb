"""The server as a Ray Serve deployment: the same app, one replica per device.

Each replica is a Ray actor holding one ``vulkan_gpu`` slot (:func:`vkumd.distributed.
node_resources`), which claims a device on its node as :class:`~vkumd.distributed.
EncoderActor` does and serves :func:`vkumd.serve.create_app` on it, batcher included, so the
routes, errors, limits and metrics are the app's. Ray Serve's HTTP proxy routes requests
across replicas.

Backpressure is Ray Serve's: a replica takes ``max_ongoing_requests`` requests at a time,
the proxy queues ``max_queued_requests`` more, and past that answers 429 with
``Retry-After`` (Ray's ``BackpressureConfig``). Ray writes that refusal as plain text;
:func:`proxy_middlewares`, named in ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` (see
:data:`PROXY_CALLBACK`), rewrites the proxy's own plain-text 408/429/503 refusals into
OpenAI's error body, so a client sees the same 429 as from ``vkumd serve``. A request
that reaches a replica can still get the app's own 429 (its queue is counted in inputs).

Needs ``ray[serve]`` (``pip install 'vkumd[ray]' 'ray[serve]'``); imported only when called.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from vkumd.serve.config import ServeConfig
from vkumd.serve.errors import ApiError

PROXY_CALLBACK = "vkumd.serve.ray_serve:proxy_middlewares"
CODES = {408: ("request_timeout", "the request timed out in Ray Serve's proxy; retry"),
         429: ("queue_full", "every replica is busy and Ray Serve's queue is full; retry "
                             "after the time in Retry-After"),
         503: ("not_ready", "no replica can take the request now; retry later")}


def deployment(config: ServeConfig | None = None, *, replicas: int | None = None,
               max_ongoing_requests: int = 64, max_queued_requests: int = 256,
               retry_after_s: float = 1.0, name: str = "vkumd-embeddings") -> Any:
    """The app as a bound Ray Serve application (give it to ``serve.run``).

    Args:
        config: the server's settings (host and port are Ray Serve's, not these).
        replicas: replicas to run (default: one per device of this node, counted by
            :func:`vkumd.devices`); each asks for one ``vulkan_gpu`` resource.
        max_ongoing_requests: requests one replica works on at a time (its batcher merges
            them; its own queue limit still applies, in inputs).
        max_queued_requests: requests Ray Serve holds waiting for a replica; past it the
            proxy answers 429.
        retry_after_s: the ``Retry-After`` of those 429s.
        name: the deployment's name.

    Returns:
        A ``ray.serve.Application``.

    Raises:
        VkumdError: ``ray[serve]`` is not installed.
        VkumdValueError: a bad setting.
    """
    serve, backpressure = _serve_module()
    from vkumd.distributed import RESOURCE

    settings = (config or ServeConfig()).check()
    if replicas is None:
        import vkumd

        replicas = max(1, len(vkumd.devices()))

    @serve.deployment(name=name, num_replicas=replicas,
                      ray_actor_options={"resources": {RESOURCE: 1}, "num_cpus": 0},
                      max_ongoing_requests=max_ongoing_requests,
                      max_queued_requests=max_queued_requests,
                      backpressure_config=backpressure(status_code=429,
                                                       retry_after_s=retry_after_s),
                      health_check_period_s=5, graceful_shutdown_timeout_s=30)
    @serve.ingress()
    class Embeddings:
        """One replica: a device claimed on this node and the app serving from it (not
        ``self.app``: Ray Serve's wrapper holds the ASGI app under that name)."""

        def __init__(self, settings: dict[str, Any]) -> None:
            self.settings = ServeConfig(**settings)
            self._vkumd_app: Any = None
            self._slot: Any = None

        def __serve_build_asgi_app__(self) -> Any:
            import ray

            import vkumd
            from vkumd.framework.ray_pool import claim_slot
            from vkumd.serve.app import create_app

            settings = self.settings
            if settings.device is None:
                node = ray.get_runtime_context().get_node_id()
                slot, self._slot = claim_slot(node)
                settings = dataclasses.replace(settings,
                                               device=str(slot % max(len(vkumd.devices()), 1)))
            self._vkumd_app = create_app(settings)
            return self._vkumd_app

        def check_health(self) -> None:
            """Ray restarts a replica whose model failed to load or whose device is lost."""
            app = self._vkumd_app
            served = app.state.server if app is not None else None
            if served is not None and (served.failure or served.status() not in
                                       (None, "warming up")):
                raise RuntimeError(f"vkumd replica unhealthy: {served.status()}")

    return Embeddings.bind(dataclasses.asdict(settings))


def _serve_module() -> tuple[Any, Any]:
    from vkumd.errors import VkumdError

    try:
        from ray import serve
        from ray.serve.config import BackpressureConfig
    except ImportError as exc:
        raise VkumdError(f"Ray Serve is not installed ({exc}); pip install 'vkumd[ray]' "
                         "'ray[serve]'") from None
    return serve, BackpressureConfig


class OpenAIRefusals:
    """ASGI middleware for Ray Serve's proxy: its own plain-text 408/429/503 refusals (a full
    queue, no replica) become OpenAI error bodies; the app's answers (JSON) pass untouched.

    Args:
        app: the proxy's ASGI app.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: dict[str, Any] = {}

        async def rewrite(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                kind = headers.get(b"content-type", b"")
                if message["status"] in CODES and kind.startswith(b"text/plain"):
                    held["start"], held["body"] = message, b""
                    return
            elif "start" in held and message["type"] == "http.response.body":
                held["body"] += message.get("body", b"")
                if message.get("more_body"):
                    return
                await _send_openai(send, held["start"], held["body"])
                return
            await send(message)

        await self.app(scope, receive, rewrite)


async def _send_openai(send: Any, start: dict, text: bytes) -> None:
    status = start["status"]
    code, advice = CODES[status]
    said = text.decode("utf-8", "replace").strip()
    err = ApiError(status, f"{advice} (Ray Serve: {said})", param=None, code=code)
    body = json.dumps(err.body()).encode()
    headers = [(k, v) for k, v in start.get("headers") or []
               if k.lower() not in (b"content-type", b"content-length")]
    headers += [(b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def proxy_middlewares() -> list[Any]:
    """The middlewares Ray Serve's HTTP proxy applies when ``RAY_SERVE_HTTP_PROXY_CALLBACK_
    IMPORT_PATH`` is :data:`PROXY_CALLBACK` in the environment Ray starts with."""
    from starlette.middleware import Middleware

    return [Middleware(OpenAIRefusals)]

"""The ASGI app: routes, body limit, API keys, readiness and request metrics.

:func:`create_app` returns a Starlette app. Its lifespan starts the batcher's worker, which
loads and warms the model (``/health`` answers 503 until then) and stops it at shutdown; an
app mounted inside another whose server does not run sub-apps' lifespans can call
``app.state.server.start()`` and ``.stop()`` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from vkumd.serve import api, gen_routes
from vkumd.serve.batcher import Batcher
from vkumd.serve.config import ServeConfig
from vkumd.serve.errors import ApiError
from vkumd.serve.http import disconnect, json_body
from vkumd.serve.metrics import Metrics

OPEN_PATHS = ("/health", "/metrics")
# Up to these, a request's texts are tokenized and its answer serialised on the event loop
# (under a millisecond here: 4096 characters tokenize in about 3 ms, 16 rows of float text
# serialise in about 3 ms); larger ones go to the thread pool.
INLINE_CHARS = 1024
INLINE_ROWS = 4
NOT_SERVED = ("/v1/responses", "/generate")


def _say(text: str) -> None:
    print(f"vkumd serve: {text}", file=sys.stderr, flush=True)


def _generation(config: ServeConfig, metrics: Metrics) -> tuple[Any, tuple[str, ...]]:
    """The generation service of ``--generate-model`` and the names it answers to."""
    from vkumd.serve.generation import Backend, GenerationService, load_generator, served_names

    spec = str(config.generate_model)

    def load() -> Backend:
        began = time.perf_counter()
        _say(f"loading the generator {spec}")
        backend = Backend(*load_generator(
            spec, config.generate_slots, config.generate_max_context, config.device,
            compute=config.generate_compute, cache_dtype=config.generate_cache_dtype))
        _say(f"generator ready in {time.perf_counter() - began:.1f} s ({backend.slots} "
             f"slots, context {backend.context})")
        return backend

    service = GenerationService(metrics, load, max_queue=config.generate_max_queue,
                                queue_timeout=config.queue_timeout_s)
    return service, served_names(spec)


class Server:
    """The state one app serves from: settings, metrics, batcher, readiness.

    Args:
        config: the settings (checked here).

    Raises:
        VkumdValueError: a bad setting or an unreadable key file.
    """

    def __init__(self, config: ServeConfig) -> None:
        self.config = config.check()
        self.keys = config.keys()
        self.metrics = Metrics()
        self.batcher = Batcher(self.metrics, policy=config.batch_policy,
                               max_tokens=config.max_batch_tokens,
                               max_batch=config.max_batch_size, window=config.batch_window,
                               max_wait=config.max_wait_ms / 1000, max_queue=config.max_queue,
                               queue_timeout=config.queue_timeout_s)
        names = config.served_model_name or f"{Path(str(config.model)).name},{config.model}"
        self.models = tuple(dict.fromkeys(n.strip() for n in names.split(",") if n.strip()
                                          and config.embeds))
        self.engine: Any = None
        self.generation: Any = None
        self.gen_models: tuple[str, ...] = ()
        self._loading = {"embed"} if config.embeds else set()
        if config.generate_model:
            self._loading.add("generate")
            self.generation, self.gen_models = _generation(self.config, self.metrics)
        self.ready = False
        self.draining = False
        self.failure: str | None = None
        self.started = int(time.time())

    def start(self) -> None:
        """Start the workers: load the models, warm up, then serve their queues."""
        def setup() -> tuple[Any, int]:
            from vkumd.serve.engine import Engine

            began = time.perf_counter()
            _say(f"loading {self.config.model}")
            self.engine = Engine(self.config)
            self.engine.warm_up()
            _say(f"ready in {time.perf_counter() - began:.1f} s")
            return self.engine.run, self.engine.hidden_size

        def ready(part: str) -> None:
            self._loading.discard(part)
            if not self._loading:
                self.ready = True
                self.metrics.ready.set(1)

        def failed(exc: BaseException) -> None:
            self.failure = f"{type(exc).__name__}: {exc}"
            _say(f"the model could not be loaded: {self.failure}")

        if self.config.embeds:
            self.batcher.start(setup, lambda: ready("embed"), failed, self._teardown)
        if self.generation is not None:
            self.generation.start(lambda: ready("generate"), failed)

    def _teardown(self) -> None:
        if self.engine is None:
            return
        try:
            self.engine.close()
        except Exception as exc:  # noqa: BLE001 - shutting down: report, do not raise
            print(f"vkumd serve: stopped; freeing the device raised {type(exc).__name__}: "
                  f"{exc}", file=sys.stderr, flush=True)
        else:
            print("vkumd serve: stopped; the model's device memory is freed", file=sys.stderr,
                  flush=True)

    def drain(self) -> None:
        """Turn ``/health`` to 503 ``draining`` while requests are still served (the
        shutdown that follows is :meth:`stop`)."""
        self.draining = True
        self.metrics.ready.set(0)

    def stop(self) -> None:
        """Turn ``/health`` to 503, compute what is queued, free the device."""
        self.ready = False
        self.metrics.ready.set(0)
        self.batcher.stop()
        if self.generation is not None:
            self.generation.stop()

    def status(self) -> str | None:
        """Why the server cannot embed now (warming up, failed, device lost), or None."""
        if not self.ready:
            return "failed: " + self.failure if self.failure else "warming up"
        lost = self.engine.lost if self.engine is not None else None
        backend = self.generation.backend if self.generation is not None else None
        lost = lost or (backend.lost if backend is not None else None)
        return f"device lost: {lost}; restart the server" if lost else None

    def check_ready(self) -> None:
        """Raise a 503 unless the server can embed now."""
        reason = self.status()
        if reason is not None:
            raise ApiError(503, f"not ready: {reason} (GET /health turns 200 when ready)",
                           code="not_ready", headers={"Retry-After": "2"})


async def _embed(server: Server, request: Request, seqs: list[list[int]],
                 normalize: bool) -> Any:
    """Queue the inputs and wait for them; if the client disconnects first, its inputs still
    queued are dropped uncomputed."""
    future = server.batcher.submit(seqs, normalize)
    result = asyncio.ensure_future(asyncio.wrap_future(future))
    gone = asyncio.ensure_future(disconnect(request))
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not result.done():
            future.cancel()
            result.cancel()
    if not result.done() or result.cancelled():
        raise ApiError(499, "the client closed the connection", param=None,
                       code="client_closed")
    return result.result()


async def embeddings(request: Request) -> Response:
    """``POST /v1/embeddings``: OpenAI's embeddings API (docs/serving.md)."""
    server: Server = request.app.state.server
    _embeds(server, request)
    body = await json_body(request)
    server.check_ready()
    engine = server.engine
    req = api.parse_embeddings(body, server.config.max_inputs, engine.hidden_size,
                               server.models)
    if req.inputs.texts is not None:
        began = time.perf_counter()
        seqs = await _off_loop(sum(map(len, req.inputs.texts)) > INLINE_CHARS, engine.tokenize,
                               req.inputs.texts)
        server.metrics.tokenize_seconds.observe(time.perf_counter() - began)
    else:
        seqs = engine.check_ids(req.inputs.ids)
    vectors = await _embed(server, request, seqs, True)
    return await _json(len(vectors) > INLINE_ROWS, api.embeddings_response, vectors, req.model,
                       req.encoding_format, sum(map(len, seqs)))


async def tei_embed(request: Request) -> Response:
    """``POST /embed``: TEI's embeddings route, a JSON list of vectors."""
    server: Server = request.app.state.server
    _embeds(server, request)
    body = await json_body(request)
    server.check_ready()
    req = api.parse_tei(body, server.config.max_inputs)
    began = time.perf_counter()
    seqs = await _off_loop(sum(map(len, req.texts)) > INLINE_CHARS, server.engine.tokenize,
                           req.texts, "inputs", req.truncate)
    server.metrics.tokenize_seconds.observe(time.perf_counter() - began)
    vectors = await _embed(server, request, seqs, req.normalize)
    return await _json(len(vectors) > INLINE_ROWS, vectors.tolist)


async def _off_loop(large: bool, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, in the thread pool when ``large``: a big request's tokenizing or JSON
    takes tens of milliseconds, which would stall every other connection, while a small
    one's takes less than the two thread hand-offs would add to its latency."""
    return await run_in_threadpool(fn, *args) if large else fn(*args)


async def _json(large: bool, build: Any, *args: Any) -> Response:
    """``build(*args)`` as a JSON response, built and serialised off the event loop when
    ``large`` (2048 embeddings as float text take tens of milliseconds)."""
    def render() -> bytes:
        return json.dumps(build(*args), separators=(",", ":")).encode()

    return Response(await _off_loop(large, render), media_type="application/json")


async def tei_info(request: Request) -> Response:
    """``GET /info``: TEI's description of the served model and limits."""
    server: Server = request.app.state.server
    _embeds(server, request)
    server.check_ready()
    c, e = server.config, server.engine
    return JSONResponse({
        "model_id": server.models[0], "model_sha": None, "model_dtype": c.dtype,
        "model_type": {"embedding": {"pooling": e.encoder.files.sentence.pooling}},
        "max_concurrent_requests": c.max_queue, "max_input_length": e.max_seq,
        "max_batch_tokens": c.max_batch_tokens, "max_batch_requests": c.max_batch_size,
        "max_client_batch_size": c.max_inputs, "auto_truncate": c.auto_truncate,
        "tokenization_workers": None, "version": _version(), "backend": "vkumd"})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vkumd")
    except PackageNotFoundError:
        return "unknown"


async def models(request: Request) -> Response:
    """``GET /v1/models``: the names the model answers to, as OpenAI's model list."""
    server: Server = request.app.state.server
    names = server.models + server.gen_models
    return JSONResponse({"object": "list", "data": [_model(server, n) for n in names]})


async def model(request: Request) -> Response:
    """``GET /v1/models/{name}``: one model object, or 404."""
    server: Server = request.app.state.server
    name = request.path_params["name"]
    if name not in server.models + server.gen_models:
        raise ApiError(404, f"The model `{name}` does not exist on this server; it serves "
                       f"{', '.join(server.models + server.gen_models)}", param="model",
                       code="model_not_found")
    return JSONResponse(_model(server, name))


def _model(server: Server, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": server.started, "owned_by": "vkumd"}


async def health(request: Request) -> Response:
    """``GET /health``: 200 when requests can be embedded, else 503 with the reason."""
    server: Server = request.app.state.server
    reason = server.status()
    if reason is None and server.draining:
        reason = "draining: shutting down; requests are still answered"
    if reason is None:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": reason}, status_code=503)


async def metrics(request: Request) -> Response:
    """``GET /metrics``: the Prometheus exposition text."""
    body, kind = request.app.state.server.metrics.render()
    return Response(body, media_type=kind)


async def not_served(request: Request) -> Response:
    """Generation routes this server does not have (OpenAI's Responses API, TGI's
    ``/generate``): 404."""
    raise gen_routes.not_available(request.url.path)


def _embeds(server: Server, request: Request) -> None:
    if not server.config.embeds:
        raise ApiError(404, f"{request.url.path}: this server serves no embeddings model "
                       "(started with --model none)", param=None, code="not_available")


def _error(_request: Request, exc: Exception) -> Response:
    if isinstance(exc, ApiError):
        return Response(exc.encoded(), exc.status, exc.headers, "application/json")
    if isinstance(exc, HTTPException):
        method, path = _request.method, _request.url.path
        text = {404: f"Invalid URL ({method} {path})",
                405: f"Method {method} is not allowed on {path}"}.get(
                    exc.status_code, str(exc.detail))
        err = ApiError(exc.status_code, text, param=None, headers=dict(exc.headers or {}))
        return Response(err.encoded(), err.status, err.headers, "application/json")
    err = ApiError(500, f"internal error ({type(exc).__name__}: {exc})", param=None,
                   code="internal_error")
    return Response(err.encoded(), 500, media_type="application/json")


ROUTES = [Route("/v1/embeddings", embeddings, methods=["POST"]),
          Route("/embeddings", embeddings, methods=["POST"]),
          Route("/embed", tei_embed, methods=["POST"]),
          Route("/info", tei_info, methods=["GET"]),
          Route("/v1/models", models, methods=["GET"]),
          Route("/v1/models/{name:path}", model, methods=["GET"]),
          Route("/health", health, methods=["GET"]),
          Route("/metrics", metrics, methods=["GET"])]
ROUTES += [Route("/v1/completions", gen_routes.completions, methods=["POST"]),
           Route("/v1/chat/completions", gen_routes.chat_completions, methods=["POST"])]
ROUTES += [Route(path, not_served, methods=["POST", "GET"]) for path in NOT_SERVED]
KNOWN = {r.path for r in ROUTES}


class _Guard:
    """Outermost layer: API keys, and the per-route request count and latency."""

    def __init__(self, app: Any, server: Server) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in KNOWN else ("/v1/models/{name}"
                                            if path.startswith("/v1/models/") else "other")
        began = time.perf_counter()
        status = [500]

        async def observed(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            refusal = self._auth(scope)
            if refusal is not None:
                await _send_error(observed, refusal)
            else:
                await self.app(scope, receive, observed)
        finally:
            m = self.server.metrics
            m.requests.labels(route, str(status[0])).inc()
            m.request_seconds.labels(route).observe(time.perf_counter() - began)

    def _auth(self, scope: dict) -> ApiError | None:
        keys = self.server.keys
        if not keys or (scope["path"] in OPEN_PATHS and not self.server.config.auth_probes):
            return None
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return ApiError(401, "You didn't provide an API key. Send it as "
                            "'Authorization: Bearer YOUR_KEY'", param=None)
        given = given.strip().encode()
        if not any(hmac.compare_digest(given, k.encode()) for k in keys):
            self.server.metrics.rejected.labels("auth").inc()
            return ApiError(401, "Incorrect API key provided", param=None,
                            code="invalid_api_key")
        return None


async def _send_error(send: Any, err: ApiError) -> None:
    body = err.encoded()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
    if err.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def create_app(config: ServeConfig | None = None) -> Any:
    """The server as an ASGI app (run it with uvicorn, or mount it).

    Args:
        config: settings (default: :class:`ServeConfig`'s defaults).

    Returns:
        An ASGI callable; ``.state.server`` is its :class:`Server` (a Starlette app wrapped
        by the key check and request metrics, so ``.state`` is forwarded).

    Raises:
        VkumdValueError: a bad setting or an unreadable key file.
    """
    server = Server(config or ServeConfig())

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        server.start()
        try:
            yield
        finally:
            await run_in_threadpool(server.stop)

    handlers: dict[Any, Any] = {ApiError: _error, HTTPException: _error, Exception: _error}
    inner = Starlette(routes=ROUTES, exception_handlers=handlers, lifespan=lifespan)
    inner.state.server = server
    guard = _Guard(inner, server)
    guard.state = inner.state  # type: ignore[attr-defined]
    return guard

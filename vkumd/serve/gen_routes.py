"""``POST /v1/completions`` and ``POST /v1/chat/completions``: OpenAI's text generation,
whole or streamed as server-sent events (docs/serving.md, "Text generation").

A request is checked and tokenized here, queued on the
:class:`~vkumd.serve.generation.GenerationService`, and answered from the events its loop
thread sends. The first event is awaited before the response starts, so a request that fails
before its first token (queue timeout, device fault) still gets its status and OpenAI error
body; after that a stream can only end with an error event. A client that disconnects, at
any point, cancels its sequence and frees its slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from vkumd.serve import gen_api
from vkumd.serve.errors import ApiError, invalid
from vkumd.serve.generation import Job, check_length
from vkumd.serve.http import disconnect, json_body

INLINE_CHARS = 1024  # prompts up to this are tokenized on the event loop (well under 1 ms)
CLOSED = ApiError(499, "the client closed the connection", param=None, code="client_closed")


def not_available(path: str) -> ApiError:
    """The 404 of a generation route on a server without a generator."""
    return ApiError(404, f"{path}: text generation is not available on this server; start "
                    "it with --generate-model PATH (a GGUF file) to serve it", param=None,
                    code="not_available")


async def completions(request: Request) -> Response:
    """``POST /v1/completions``: OpenAI's (legacy) text completion."""
    return await _generate(request, chat=False)


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``: OpenAI's chat completion, through the model's chat
    template."""
    return await _generate(request, chat=True)


async def _generate(request: Request, chat: bool) -> Response:
    server = request.app.state.server
    service = server.generation
    if service is None:
        raise not_available(request.url.path)
    body = await json_body(request)
    server.check_ready()
    req = gen_api.parse_generation(body, server.gen_models, chat,
                                   server.config.generate_max_tokens)
    backend = service.backend
    ids = await _prompt_ids(backend, req)
    max_tokens = check_length(backend, ids, req.max_tokens, server.config.generate_max_tokens,
                              "messages" if chat else "prompt")
    params = {"max_new_tokens": max_tokens, "temperature": req.temperature,
              "top_k": req.top_k, "top_p": req.top_p,
              "repetition_penalty": req.repetition_penalty, "seed": req.seed,
              "stop": tuple(req.stop) or None}
    job = Job(ids, params, asyncio.get_running_loop(), asyncio.Queue())
    service.submit(job)
    shaper = gen_api.Shaper(req)
    try:
        first = await _next(request, job)
    except BaseException:
        service.cancel(job)
        raise
    if first[0] == "error":
        raise first[1]
    if req.stream:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return _Events(_stream(shaper, job, first), lambda: service.cancel(job),
                       media_type="text/event-stream", headers=headers)
    pieces, event = [], first
    try:
        while event[0] == "text":
            pieces.append(event[1])
            event = await _next(request, job)
    finally:
        if event[0] != "done":
            service.cancel(job)
    if event[0] == "error":
        raise event[1]
    _, finish, prompt, completion = event
    return JSONResponse(shaper.whole("".join(pieces), finish, prompt, completion))


async def _prompt_ids(backend: Any, req: gen_api.GenerationRequest) -> list[int]:
    if req.prompt_ids is not None:
        vocab = backend.vocab_size
        bad = next((t for t in req.prompt_ids if t < 0 or t >= vocab), None)
        if bad is not None:
            raise invalid(f"'prompt' holds token id {bad}, outside this model's vocabulary "
                          f"[0, {vocab}); token arrays are read as this model's tokenizer's "
                          "ids", param="prompt", code="invalid_token_id")
        return req.prompt_ids
    if req.chat:
        size = sum(len(m["content"]) for m in req.messages or [])
        fn, arg = backend.chat_ids, req.messages
    else:
        size, fn, arg = len(req.prompt or ""), backend.encode, req.prompt
    return await run_in_threadpool(fn, arg) if size > INLINE_CHARS else fn(arg)


async def _next(request: Request, job: Job) -> tuple:
    """The job's next event, or :data:`CLOSED` raised if the client goes first."""
    get = asyncio.ensure_future(job.events.get())
    gone = asyncio.ensure_future(disconnect(request))
    try:
        await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not get.done():
            get.cancel()
    if get.cancelled() or not get.done():
        raise CLOSED
    return get.result()


class _Events(StreamingResponse):
    """A stream of server-sent events that calls ``on_close`` however it ends: finished,
    failed, or cancelled by Starlette when the client disconnects (possibly before the
    events' first chunk, when a ``finally`` inside them would never run)."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Any, **kw: Any) -> None:
        super().__init__(content, **kw)
        self.on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()  # a sequence still generating is cancelled; else nothing


async def _stream(shaper: gen_api.Shaper, job: Job, event: tuple) -> AsyncIterator[bytes]:
    """The server-sent events: a role chunk (chat), text chunks, the finish chunk, the usage
    chunk when asked for, ``[DONE]``."""
    if shaper.req.chat:
        yield shaper.chunk("", first=True)
    while event[0] == "text":
        yield shaper.chunk(event[1])
        event = await job.events.get()
    if event[0] == "error":
        yield gen_api.event(event[1].body())
    else:
        _, finish, prompt, completion = event
        yield shaper.chunk(None if shaper.req.chat else "", finish)
        if shaper.req.include_usage:
            yield shaper.usage_chunk(prompt, completion)
    yield gen_api.DONE

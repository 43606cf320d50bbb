"""Reading requests: the body under its limit, its JSON, and the client's disconnect."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from vkumd.serve import api
from vkumd.serve.errors import ApiError


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to pass ``limit`` bytes: from
    ``Content-Length`` before reading, else while streaming, never holding more."""
    declared = request.headers.get("content-length")
    too_big = ApiError(413, f"the request body is over this server's limit of {limit} bytes; "
                       "send fewer or shorter inputs (or raise --max-body-bytes)",
                       param=None, code="request_too_large")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


async def json_body(request: Request) -> Any:
    """The request's JSON, after its content type and size are checked."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind and kind != "application/json" and not kind.endswith("+json"):
        raise ApiError(415, f"the content type is {kind!r}; send the body as "
                       "application/json", param=None, code="unsupported_media_type")
    limit = request.app.state.server.config.max_body_bytes
    return api.parse_json(await read_body(request, limit))


async def disconnect(request: Request) -> None:
    """Returns when the client has gone (the body is read by now, so the next message the
    server sends is ``http.disconnect``)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass

"""Error answers in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Every refusal the server makes, from any route and from the body reader, goes through
:class:`ApiError`, so clients (the official ``openai`` library raises by status and reads
``error.message``) see one shape with OpenAI's statuses.
"""

from __future__ import annotations

import json
from typing import Any

from vkumd.errors import ContextClosed, DeviceUnavailable, VkumdError

# Statuses and the error type OpenAI's API sends with them.
TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
         403: "invalid_request_error", 404: "invalid_request_error",
         405: "invalid_request_error", 413: "invalid_request_error",
         415: "invalid_request_error", 429: "requests", 500: "server_error",
         503: "server_error"}


class ApiError(VkumdError):
    """A refusal to answer with ``status`` and an OpenAI error body (a vkumd error, so code
    calling the app's parts directly can catch every refusal as ``VkumdError``).

    Args:
        status: the HTTP status.
        message: what was refused, the limit, and what to do.
        param: the request field at fault (``"input"``, ``"input[3]"``), or None.
        code: a short machine-readable code (``"invalid_api_key"``), or None.
        headers: extra response headers (``Retry-After`` with a 429).
    """

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        return {"error": {"message": self.message,
                          "type": TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def encoded(self) -> bytes:
        """The body as UTF-8 JSON bytes."""
        return json.dumps(self.body()).encode()


def invalid(message: str, param: str | None = "input", code: str | None = None) -> ApiError:
    """A 400 for a request whose content is refused."""
    return ApiError(400, message, param, code)


def device_fault(exc: BaseException) -> ApiError:
    """The answer for a batch the device could not compute: 503 for out-of-memory or a lost
    or unavailable device (retrying later may work), 500 for anything else."""
    name = type(exc).__name__
    if isinstance(exc, MemoryError):
        return ApiError(503, f"the device ran out of memory computing this batch ({exc}); "
                        "retry, or send fewer or shorter inputs", code="device_out_of_memory",
                        headers={"Retry-After": "1"})
    if isinstance(exc, (DeviceUnavailable, ContextClosed)) or "DeviceLost" in name:
        return ApiError(503, f"the device is unavailable ({name}: {exc}); retry later",
                        code="device_unavailable", headers={"Retry-After": "5"})
    return ApiError(500, f"the batch holding this request failed on the device ({name}: "
                    f"{exc})", code="device_fault")

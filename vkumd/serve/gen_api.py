"""Request bodies in, response bodies out: OpenAI's ``/v1/completions`` and
``/v1/chat/completions``, whole and as server-sent-event chunks.

Host-side checking and shaping only. Each refusal is an
:class:`~vkumd.serve.errors.ApiError` naming the field and the limit. Fields OpenAI has that a
local model cannot honour (``n`` above 1, ``logprobs``, ``tools``, penalties other than 0)
are refused with 400 rather than silently ignored; fields that change nothing (``user``,
``metadata``, ``store``) are accepted.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from vkumd.serve.api import check_model, is_json_int, json_kind
from vkumd.serve.errors import invalid

MAX_STOPS = 4
ROLES = ("system", "developer", "user", "assistant")
# Accepted only at the value that changes nothing (OpenAI's default).
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (1,), "best_of": (1,), "echo": (False,), "logprobs": (False, 0),
    "top_logprobs": (0,), "presence_penalty": (0, 0.0), "frequency_penalty": (0, 0.0),
    "suffix": ("",), "logit_bias": ({},), "tools": ([],), "functions": ([],),
    "tool_choice": ("none",), "parallel_tool_calls": (False, True)}


@dataclass
class GenerationRequest:
    """A checked completion or chat body.

    Attributes:
        chat: a chat request (its prompt is ``messages``), else a completion (``prompt``).
        prompt: the completion's text, or None for token ids / chat.
        prompt_ids: the completion's token ids when given as an array.
        messages: the chat's messages, ``[{"role", "content"}]`` with string contents.
        max_tokens: the ceiling the client asked (None: the server's default).
    """

    chat: bool
    model: str
    prompt: str | None = None
    prompt_ids: list[int] | None = None
    messages: list[dict[str, str]] | None = None
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False


def _number(body: dict, name: str, default: float, low: float, high: float,
            low_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise invalid(f"'{name}' is {json_kind(value)}; give a number in "
                      f"{'(' if low_open else '['}{low:g}, {high:g}]", param=name)
    if value < low or value > high or (low_open and value == low):
        raise invalid(f"'{name}'={value!r} is out of range; give a number in "
                      f"{'(' if low_open else '['}{low:g}, {high:g}]", param=name,
                      code="invalid_value")
    return float(value)


def _same(value: Any, allowed: tuple[Any, ...]) -> bool:
    # JSON's true is not 1 here: each value matches only its own kind.
    return any(value is a if isinstance(a, bool) or isinstance(value, bool) else value == a
               for a in allowed)


def _neutral(body: dict) -> None:
    for name, allowed in NEUTRAL.items():
        value = body.get(name)
        if value is None or _same(value, allowed):
            continue
        if name == "n":
            raise invalid(f"'n'={json.dumps(value)[:40]}: this server generates one choice a "
                          "request (n=1); send several requests for several choices",
                          param="n", code="unsupported_value")
        raise invalid(f"'{name}'={json.dumps(value)[:60]} is not supported by this server "
                      f"(only {json.dumps(allowed[0])}); leave it out", param=name,
                      code="unsupported_value")


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid(f"'stop' is {json_kind(value)}; give a string or a list of up to "
                      f"{MAX_STOPS} strings", param="stop")
    if len(stops) > MAX_STOPS:
        raise invalid(f"'stop' holds {len(stops)} sequences; give at most {MAX_STOPS}",
                      param="stop")
    if any(not s for s in stops):
        raise invalid("'stop' holds an empty string, which would stop before the first "
                      "token; give non-empty sequences", param="stop")
    return stops


def _prompt(value: Any) -> tuple[str | None, list[int] | None]:
    kinds = "a string or an array of token ids (one prompt a request)"
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one
    if isinstance(value, str):
        if not value:
            raise invalid("'prompt' is an empty string; give non-empty text", param="prompt")
        return value, None
    if isinstance(value, list) and value and all(is_json_int(v) for v in value):
        return None, list(value)
    if isinstance(value, list) and len(value) > 1 and all(isinstance(v, (str, list))
                                                          for v in value):
        raise invalid(f"'prompt' holds {len(value)} prompts; this server takes one prompt a "
                      "request (send several requests)", param="prompt",
                      code="unsupported_value")
    what = "an empty list" if value == [] else json_kind(value)
    raise invalid(f"'prompt' is {what}; give {kinds}", param="prompt")


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        what = "an empty list" if value == [] else json_kind(value)
        raise invalid(f"'messages' is {what}; give a list of {{\"role\", \"content\"}} "
                      "objects", param="messages")
    out = []
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise invalid(f"'{where}' is {json_kind(msg)}; give an object with 'role' and "
                          "'content'", param=where)
        role, content = msg.get("role"), msg.get("content")
        if role not in ROLES:
            raise invalid(f"'{where}.role' is {json.dumps(role)[:40]}; give one of "
                          f"{', '.join(ROLES)} (tool messages are not supported)",
                          param=f"{where}.role")
        if isinstance(content, list):  # content parts: text only
            texts = []
            for j, part in enumerate(content):
                if not (isinstance(part, dict) and part.get("type") == "text"
                        and isinstance(part.get("text"), str)):
                    raise invalid(f"'{where}.content[{j}]' is not a text part "
                                  '({"type": "text", "text": ...}); this model reads text '
                                  "only", param=f"{where}.content[{j}]")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise invalid(f"'{where}.content' is {json_kind(content)}; give a string",
                          param=f"{where}.content")
        out.append({"role": "system" if role == "developer" else role, "content": content})
    return out


def parse_generation(body: Any, models: tuple[str, ...], chat: bool,
                     max_tokens_limit: int) -> GenerationRequest:
    """Check a ``/v1/completions`` (``chat=False``) or ``/v1/chat/completions`` body.

    Args:
        body: the JSON value.
        models: the names the generator answers to.
        chat: which route.
        max_tokens_limit: the largest ``max_tokens`` this server grants.

    Returns:
        The request.

    Raises:
        ApiError: 400 for a missing, mistyped or out-of-range field or an unsupported
            option; 404 for an unknown model.
    """
    example = ('{"model": "' + models[0] + '", ' + ('"messages": [{"role": "user", '
               '"content": "Hi"}]}' if chat else '"prompt": "Once upon a time"}'))
    if not isinstance(body, dict):
        raise invalid(f"the body is {json_kind(body)}; send a JSON object such as {example}",
                      param=None)
    req = GenerationRequest(chat=chat, model=check_model(body, models, "generates with"))
    if chat:
        req.messages = _messages(body.get("messages"))
    elif "prompt" not in body or body["prompt"] is None:
        raise invalid(f"'prompt' is required; send {example}", param="prompt")
    else:
        req.prompt, req.prompt_ids = _prompt(body["prompt"])
    _neutral(body)
    name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None \
        else "max_tokens"
    limit = body.get(name)
    if limit is not None:
        if not is_json_int(limit) or limit < 1:
            raise invalid(f"'{name}' is {json.dumps(limit)[:40]}; give a positive integer",
                          param=name)
        if limit > max_tokens_limit:
            raise invalid(f"'{name}'={limit} is over this server's limit of "
                          f"{max_tokens_limit} tokens a request; ask for fewer",
                          param=name, code="invalid_value")
        req.max_tokens = limit
    elif not chat:
        req.max_tokens = 16  # OpenAI's default for completions
    req.temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    req.top_p = _number(body, "top_p", 1.0, 0.0, 1.0, low_open=True)
    top_k = body.get("top_k")
    if top_k is not None and (not is_json_int(top_k) or top_k < 0):
        raise invalid(f"'top_k' is {json.dumps(top_k)[:40]}; give an integer >= 0 (0: no "
                      "limit)", param="top_k")
    req.top_k = top_k or 0
    req.repetition_penalty = _number(body, "repetition_penalty", 1.0, 0.0, 10.0,
                                     low_open=True)
    seed = body.get("seed")
    if seed is not None and (not is_json_int(seed) or seed < 0):
        raise invalid(f"'seed' is {json.dumps(seed)[:40]}; give an integer >= 0",
                      param="seed")
    req.seed = seed
    req.stop = _stop(body.get("stop"))
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise invalid(f"'stream' is {json_kind(stream)}; give true or false", param="stream")
    req.stream = bool(stream)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or not isinstance(
                options.get("include_usage", False), bool):
            raise invalid("'stream_options' must be an object such as "
                          '{"include_usage": true}', param="stream_options")
        if not req.stream:
            raise invalid("'stream_options' is only allowed with 'stream': true",
                          param="stream_options")
        req.include_usage = bool(options.get("include_usage", False))
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise invalid("'response_format' other than {\"type\": \"text\"} is not supported by "
                      "this server", param="response_format", code="unsupported_value")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid(f"'user' is {json_kind(user)}; give a string or leave it out", param="user")
    return req


class Shaper:
    """The response objects of one request: the whole answer, or its stream's chunks (all
    with one ``id`` and ``created``)."""

    def __init__(self, req: GenerationRequest) -> None:
        self.req = req
        self.id = ("chatcmpl-" if req.chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())
        self.object = "chat.completion" if req.chat else "text_completion"

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created,
                "model": self.req.model, "system_fingerprint": None}

    @staticmethod
    def usage(prompt: int, completion: int) -> dict[str, int]:
        """OpenAI's usage counts."""
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def whole(self, text: str, finish: str, prompt: int, completion: int) -> dict[str, Any]:
        """The non-streaming answer."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.req.chat:
            choice["message"] = {"role": "assistant", "content": text, "refusal": None}
        else:
            choice["text"] = text
        return {**self._head(self.object), "choices": [choice],
                "usage": self.usage(prompt, completion)}

    def chunk(self, text: str | None, finish: str | None = None,
              first: bool = False) -> bytes:
        """One server-sent event carrying ``text`` (and the finish reason on the last)."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.req.chat:
            delta: dict[str, Any] = {"role": "assistant"} if first else {}
            if text is not None:
                delta["content"] = text
            choice["delta"] = delta
            obj = self._head("chat.completion.chunk")
        else:
            choice["text"] = text or ""
            obj = self._head("text_completion")
        obj["choices"] = [choice]
        if self.req.include_usage:
            obj["usage"] = None
        return event(obj)

    def usage_chunk(self, prompt: int, completion: int) -> bytes:
        """The last chunk when ``stream_options.include_usage``: no choices, the usage."""
        obj = self._head("chat.completion.chunk" if self.req.chat else "text_completion")
        obj["choices"] = []
        obj["usage"] = self.usage(prompt, completion)
        return event(obj)


def event(obj: Any) -> bytes:
    """A server-sent event: ``data: <json>`` and a blank line."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"

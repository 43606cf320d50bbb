"""Request bodies in, response bodies out: OpenAI's ``/v1/embeddings`` and TEI's ``/embed``.

Everything here is host-side checking and shaping; nothing waits on the device. Each refusal
is an :class:`~vkumd.serve.errors.ApiError` naming the field (``param``) and the limit.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd.serve.errors import ApiError, invalid

FORMATS = ("float", "base64")


def parse_json(raw: bytes) -> Any:
    """The JSON value of a request body.

    Raises:
        ApiError: 400 for bytes that are not UTF-8 or not JSON.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(f"the request body is not UTF-8 (byte {exc.start}); send UTF-8 JSON",
                      param=None, code="invalid_json") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise invalid(f"We could not parse the JSON body of your request{where}: "
                      f"{getattr(exc, 'msg', exc)}. Send a JSON object",
                      param=None, code="invalid_json") from None


def is_json_int(value: Any) -> bool:
    """A JSON integer (Python parses true and false as bools, which are ints)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class Inputs:
    """A request's inputs: ``texts`` to tokenize, or token-id ``ids`` already."""

    texts: list[str] | None = None
    ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.ids or [])


def parse_input(value: Any, max_inputs: int, param: str = "input") -> Inputs:
    """OpenAI's ``input``: a string, a list of strings, a token array or a list of them.

    Raises:
        ApiError: 400 for a missing, empty, mixed or mistyped input, or more than
            ``max_inputs`` items.
    """
    kinds = "a string, a list of strings, an array of token ids or a list of such arrays"
    if value is None:
        raise invalid(f"'{param}' is required: give {kinds}", param=param)
    if isinstance(value, str):
        if not value:
            raise invalid(f"'{param}' is an empty string; give non-empty text", param=param)
        return Inputs(texts=[value])
    if not isinstance(value, list):
        raise invalid(f"'{param}' is {json_kind(value)}; give {kinds}", param=param)
    if not value:
        raise invalid(f"'{param}' is an empty list; give 1 to {max_inputs} inputs",
                      param=param)
    if all(is_json_int(v) for v in value):
        return Inputs(ids=[value])
    if len(value) > max_inputs:
        raise invalid(f"'{param}' holds {len(value)} inputs; this server takes at most "
                      f"{max_inputs} a request (split it)", param=param,
                      code="too_many_inputs")
    if isinstance(value[0], str):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise invalid(f"'{param}[{i}]' is {json_kind(item)} in a list of strings; every "
                              "item must be a string", param=f"{param}[{i}]")
            if not item:
                raise invalid(f"'{param}[{i}]' is an empty string; give non-empty text",
                              param=f"{param}[{i}]")
        return Inputs(texts=value)
    if isinstance(value[0], list):
        for i, item in enumerate(value):
            if not isinstance(item, list) or not all(is_json_int(v) for v in item):
                raise invalid(f"'{param}[{i}]' is not an array of integer token ids (it is "
                              f"{json_kind(item)}); a list of token arrays holds only such "
                              "arrays", param=f"{param}[{i}]")
        return Inputs(ids=value)
    bad = next(i for i, v in enumerate(value) if not is_json_int(v))
    raise invalid(f"'{param}[{bad}]' is {json_kind(value[bad])}; give {kinds}",
                  param=f"{param}[{bad}]")


def json_kind(value: Any) -> str:
    """How an error message names a JSON value's type ("a string", "null", ...)."""
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number",
             str: "a string", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def check_model(body: dict, models: tuple[str, ...], verb: str) -> str:
    """The request's ``model``, one of ``models``: 400 when it is not a name, 404 (OpenAI's
    ``model_not_found``) when this server has no such model. ``verb`` says what the server
    does with its models ("serves", "generates with")."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid(f"'model' is {json_kind(model)}; give the model's name ({models[0]})",
                      param="model")
    if model not in models:
        raise ApiError(404, f"The model `{model}` does not exist on this server; it {verb} "
                       f"{', '.join(models)} (GET /v1/models)", param="model",
                       code="model_not_found")
    return model


@dataclass
class EmbeddingRequest:
    """A checked ``POST /v1/embeddings`` body."""

    inputs: Inputs
    model: str
    encoding_format: str
    dimensions: int | None


def parse_embeddings(body: Any, max_inputs: int, hidden: int,
                     models: tuple[str, ...]) -> EmbeddingRequest:
    """Check an OpenAI embeddings body against this server.

    Raises:
        ApiError: 400 for a field of the wrong type or value, 404 for an unknown model.
    """
    if not isinstance(body, dict):
        raise invalid(f"the body is {json_kind(body)}; send a JSON object such as "
                      '{"input": "text", "model": "' + models[0] + '"}', param=None)
    inputs = parse_input(body.get("input"), max_inputs)
    model = check_model(body, models, "serves")
    fmt = body.get("encoding_format")
    fmt = "float" if fmt is None else fmt
    if fmt not in FORMATS:
        raise invalid(f"'encoding_format' is {fmt!r}; give 'float' or 'base64'",
                      param="encoding_format")
    dims = body.get("dimensions")
    if dims is not None:
        if not is_json_int(dims) or dims < 1:
            raise invalid(f"'dimensions' is {dims!r}; give a positive integer",
                          param="dimensions")
        if dims != hidden:
            raise invalid(f"'dimensions'={dims}: this model does not support other "
                          f"dimensions than its own {hidden}; leave it out",
                          param="dimensions", code="unsupported_dimensions")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid(f"'user' is {json_kind(user)}; give a string or leave it out", param="user")
    return EmbeddingRequest(inputs, model, fmt, dims)


def embeddings_response(vectors: np.ndarray, model: str, fmt: str,
                        tokens: int) -> dict[str, Any]:
    """OpenAI's response object. ``base64`` rows are the float32 values' little-endian
    bytes, so they decode to exactly the bits ``float`` rows print."""
    rows = np.ascontiguousarray(vectors, dtype="<f4")
    if fmt == "base64":
        data = [base64.b64encode(row.tobytes()).decode("ascii") for row in rows]
    else:
        data = rows.tolist()
    return {"object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": d}
                     for i, d in enumerate(data)],
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@dataclass
class TeiRequest:
    """A checked TEI ``POST /embed`` body."""

    texts: list[str]
    normalize: bool
    truncate: bool | None


def parse_tei(body: Any, max_inputs: int) -> TeiRequest:
    """TEI's ``{"inputs": str | [str], "normalize": bool, "truncate": bool}``.

    Raises:
        ApiError: 400 for a missing or mistyped field.
    """
    if not isinstance(body, dict):
        raise invalid(f"the body is {json_kind(body)}; send a JSON object such as "
                      '{"inputs": "text"}', param=None)
    inputs = parse_input(body.get("inputs"), max_inputs, param="inputs")
    if inputs.texts is None:
        raise invalid("'inputs' must be a string or a list of strings on /embed (token ids "
                      "go to /v1/embeddings)", param="inputs")
    flags = {}
    for name, default in (("normalize", True), ("truncate", None)):
        value = body.get(name, default)
        if value is not None and not isinstance(value, bool):
            raise invalid(f"'{name}' is {json_kind(value)}; give true or false", param=name)
        flags[name] = value
    return TeiRequest(inputs.texts, bool(flags["normalize"]), flags["truncate"])

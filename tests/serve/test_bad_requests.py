"""The bad-request corpus: each body gets its documented status and an OpenAI error body,
oversized bodies are refused before they are read, and the server is healthy after."""

from __future__ import annotations

import json
import select
import socket
import time

import pytest

from .conftest import KEYS, MODEL, Served

OK = {"model": MODEL, "input": "fine"}


def with_input(value: object, **extra: object) -> bytes:
    return json.dumps({"model": MODEL, "input": value, **extra}).encode()


# (name, path, body bytes, content type, status, param or None)
CASES = [
    ("empty list", "/v1/embeddings", with_input([]), None, 400, "input"),
    ("empty string", "/v1/embeddings", with_input(""), None, 400, "input"),
    ("empty string in a list", "/v1/embeddings", with_input(["a", ""]), None, 400,
     "input[1]"),
    ("null input", "/v1/embeddings", with_input(None), None, 400, "input"),
    ("no input", "/v1/embeddings", json.dumps({"model": MODEL}).encode(), None, 400, "input"),
    ("null in a list", "/v1/embeddings", with_input(["a", None]), None, 400, "input[1]"),
    ("number", "/v1/embeddings", with_input(5), None, 400, "input"),
    ("object", "/v1/embeddings", with_input({"text": "a"}), None, 400, "input"),
    ("boolean ids", "/v1/embeddings", with_input([True, False]), None, 400, "input[0]"),
    ("float ids", "/v1/embeddings", with_input([1.5, 2]), None, 400, "input[0]"),
    ("strings and ids", "/v1/embeddings", with_input(["a", 1]), None, 400, "input[1]"),
    ("ids and strings", "/v1/embeddings", with_input([1, "a"]), None, 400, "input[1]"),
    ("nested strings", "/v1/embeddings", with_input([["a"]]), None, 400, "input[0]"),
    ("nested deeper", "/v1/embeddings", with_input([[1, [2]]]), None, 400, "input[0]"),
    ("arrays and ids", "/v1/embeddings", with_input([[1, 2], 3]), None, 400, "input[1]"),
    ("empty token array", "/v1/embeddings", with_input([[101, 102], []]), None, 400,
     "input[1]"),
    ("id past the vocabulary", "/v1/embeddings", with_input([101, 30522, 102]), None, 400,
     "input"),
    ("negative id", "/v1/embeddings", with_input([[101, -1, 102]]), None, 400, "input"),
    ("huge id", "/v1/embeddings", with_input([10 ** 30]), None, 400, "input"),
    ("too many ids", "/v1/embeddings", with_input([100] * 257), None, 400, "input"),
    ("2049 inputs", "/v1/embeddings", with_input(["a"] * 2049), None, 400, "input"),
    ("text over the model's length", "/v1/embeddings", with_input("word " * 300), None, 400,
     "input[0]"),
    ("10 MB string", "/v1/embeddings", with_input("a" * 10_000_000), None, 400, "input[0]"),
    ("no model", "/v1/embeddings", json.dumps({"input": "a"}).encode(), None, 400, "model"),
    ("model not a string", "/v1/embeddings", json.dumps({"input": "a", "model": 3}).encode(),
     None, 400, "model"),
    ("unknown model", "/v1/embeddings", json.dumps({"input": "a", "model": "gpt"}).encode(),
     None, 404, "model"),
    ("bad encoding_format", "/v1/embeddings", with_input("a", encoding_format="int8"), None,
     400, "encoding_format"),
    ("dimensions zero", "/v1/embeddings", with_input("a", dimensions=0), None, 400,
     "dimensions"),
    ("dimensions string", "/v1/embeddings", with_input("a", dimensions="384"), None, 400,
     "dimensions"),
    ("user not a string", "/v1/embeddings", with_input("a", user=5), None, 400, "user"),
    ("body a list", "/v1/embeddings", b'["a"]', None, 400, None),
    ("body null", "/v1/embeddings", b"null", None, 400, None),
    ("empty body", "/v1/embeddings", b"", None, 400, None),
    ("invalid JSON", "/v1/embeddings", b'{"input": "a", ', None, 400, None),
    ("NaN", "/v1/embeddings", b'{"input": NaN, "model": "' + MODEL.encode() + b'"}', None,
     400, "input"),
    ("non-UTF-8", "/v1/embeddings", b'{"input": "\xff\xfe", "model": "x"}', None, 400, None),
    ("deep nesting", "/v1/embeddings", b"[" * 200_000 + b"]" * 200_000, None, 400, None),
    ("text/plain", "/v1/embeddings", with_input("a"), "text/plain", 415, None),
    ("form", "/v1/embeddings", b"input=a", "application/x-www-form-urlencoded", 415, None),
    ("TEI empty inputs", "/embed", json.dumps({"inputs": []}).encode(), None, 400, "inputs"),
    ("TEI ids", "/embed", json.dumps({"inputs": [1, 2]}).encode(), None, 400, "inputs"),
    ("TEI normalize not bool", "/embed", json.dumps({"inputs": "a", "normalize": "yes"}
                                                    ).encode(), None, 400, "normalize"),
    ("unknown route", "/v1/embedding", with_input("a"), None, 404, None),
]


@pytest.mark.parametrize("name, path, body, kind, status, param", CASES,
                         ids=[c[0] for c in CASES])
def test_refused_with_its_status(server: Served, name: str, path: str, body: bytes,
                                 kind: str | None, status: int, param: str | None) -> None:
    headers = {"Content-Type": kind} if kind else {}
    got, _, raw = server.request("POST", path, body, headers=headers)
    assert got == status, raw[:500]
    error = json.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["message"], error
    assert error["type"] == "invalid_request_error"


def test_wrong_method(server: Served) -> None:
    status, headers, raw = server.request("GET", "/v1/embeddings")
    assert status == 405 and "POST" in headers.get("allow", headers.get("Allow", ""))
    assert json.loads(raw)["error"]["message"]


def _raw(server: Served, head: bytes, chunks, limit_s: float = 60.0) -> bytes:
    """Send ``head`` then ``chunks`` on one connection, stopping as soon as an answer
    arrives; return what was read."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=limit_s) as s:
        s.sendall(head)
        deadline = time.monotonic() + limit_s
        for chunk in chunks:
            if select.select([s], [], [], 0)[0] or time.monotonic() > deadline:
                break
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = b""
        while b"\r\n\r\n" not in answer:
            part = s.recv(65536)
            if not part:
                break
            answer += part
        return answer


def _head(server: Served, extra: str) -> bytes:
    return (f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Authorization: Bearer {KEYS[0]}\r\nContent-Type: application/json\r\n"
            f"{extra}\r\n").encode()


def test_declared_200_mb_body_refused_before_reading(server: Served) -> None:
    answer = _raw(server, _head(server, "Content-Length: 200000000\r\n"),
                  [b'{"input": "' + b"a" * 65536])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_streamed_body_over_the_limit_is_cut_off(server: Served) -> None:
    piece = b"a" * (1 << 20)
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    chunks = [b"%x\r\n%s\r\n" % (11, b'{"input": "')] + [chunk] * 200  # 200 MiB if all read
    started = time.monotonic()
    answer = _raw(server, _head(server, "Transfer-Encoding: chunked\r\n"), chunks)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert time.monotonic() - started < 30


def test_healthy_after_the_corpus(server: Served) -> None:
    assert server.request("GET", "/health", key=None)[0] == 200
    status, _, body = server.post("/v1/embeddings", OK)
    assert status == 200 and len(body["data"][0]["embedding"]) == 384
    assert server.proc.poll() is None

"""A bounded hypothesis fuzz of request bodies: whatever JSON (or near-JSON bytes) arrives at
the embedding routes, the answer is a 2xx or 4xx with OpenAI's error body, never a 5xx, and
the server stays up."""

from __future__ import annotations

import json

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (the test "
                                 "extra)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from .conftest import MODEL, Served  # noqa: E402

SCALARS = (st.none() | st.booleans() | st.integers(-2, 40000) | st.integers()
           | st.floats(allow_nan=False) | st.text(max_size=40))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=6)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
INPUTS = (VALUES | st.text(min_size=1, max_size=60)
          | st.lists(st.text(max_size=30), min_size=0, max_size=8)
          | st.lists(st.integers(-5, 31000), max_size=20)
          | st.lists(st.lists(st.integers(-5, 31000), max_size=10), max_size=4))
BODIES = st.fixed_dictionaries(
    {}, optional={"input": INPUTS, "inputs": INPUTS, "model": st.sampled_from([MODEL, "x"])
                  | VALUES, "encoding_format": st.sampled_from(["float", "base64", "x"])
                  | VALUES, "dimensions": st.sampled_from([384, 0, -1]) | VALUES,
                  "normalize": VALUES, "truncate": VALUES, "user": VALUES}) | VALUES


def check(served: Served, path: str, raw: bytes) -> None:
    status, _, body = served.request("POST", path, raw)
    assert status < 500, (raw[:300], status, body[:300])
    if status >= 400:
        error = json.loads(body)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=BODIES, path=st.sampled_from(["/v1/embeddings", "/embed"]))
def test_json_bodies_never_give_a_5xx(server: Served, body: object, path: str) -> None:
    check(server, path, json.dumps(body).encode())


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=200), cut=st.integers(0, 60))
def test_broken_bytes_never_give_a_5xx(server: Served, raw: bytes, cut: int) -> None:
    valid = json.dumps({"model": MODEL, "input": ["a", "b"]}).encode()
    check(server, "/v1/embeddings", raw)
    check(server, "/v1/embeddings", valid[:cut] + raw[:8] + valid[cut:])


def test_still_healthy(server: Served) -> None:
    assert server.request("GET", "/health", key=None)[0] == 200
    assert server.proc.poll() is None

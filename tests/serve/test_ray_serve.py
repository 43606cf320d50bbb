"""The server as a Ray Serve deployment (vkumd.serve.ray_serve): deployed on a one-node Ray
cluster inside a network and PID namespace of the test's own (only ``lo``; see
tests/distributed/test_ray.py for why Ray never runs in the test's process), driven through
Ray Serve's HTTP proxy with the official client, answers as the in-process encoder does, and
past its backpressure limits answers 429 with Retry-After and OpenAI's error body (marked
``ray``); and, without Ray, the proxy middleware that rewrites Ray's plain-text refusals.
Skips, with the reason, without ray[serve], the serve extra, the model, root,
unshare or ip."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vkumd.testing import netns, ray_cluster

from .conftest import ROOT, missing

JOB = Path(__file__).with_name("ray_serve_job.py")


def _skip_reason() -> str | None:
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed: pip install 'vkumd[ray]' 'ray[serve]'"
    try:
        import ray.serve  # noqa: F401 - the import is the check
    except ImportError as exc:
        return f"Ray Serve cannot be imported ({exc}): pip install 'ray[serve]'"
    return missing() or netns.unavailable()


@pytest.mark.ray
def test_ray_serve_deployment_embeds_and_answers_overload_with_429() -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from vkumd.serve.ray_serve import PROXY_CALLBACK

    # PYTHONPATH: the job, Ray's workers and its proxy import this checkout's vkumd.
    env = ray_cluster.environment(RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=PROXY_CALLBACK,
                                  PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(netns.loopback_command([sys.executable, str(JOB)]), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        netns.end(proc)  # its PID only; --kill-child then ends the namespace's processes
    lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    report = json.loads(lines[-1][len("REPORT "):])
    assert report["indices"] == list(range(12))
    assert report["model"] == "all-MiniLM-L6-v2" == report["models"]
    assert report["max_diff"] < 1e-5 and report["float_diff"] < 1e-5, report
    assert report["not_found"]["error"]["message"].startswith("Invalid URL"), report
    statuses = report["statuses"]
    assert set(statuses) <= {200, 429}, statuses
    assert 200 in statuses and 429 in statuses, statuses
    assert report["ok_rows"] == [64]
    refusal = report["refusal"]
    assert refusal["retry_after"] == "2", refusal
    error = refusal["body"]["error"]
    assert error["code"] == "queue_full" and error["type"] == "requests", refusal
    assert "backpressure" in error["message"], refusal
    assert report["after"] == 200


def _run_asgi(app, status: int, kind: bytes, body: bytes) -> list[dict]:
    import asyncio

    async def inner(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind), (b"retry-after", b"3")]})
        await send({"type": "http.response.body", "body": body[:5], "more_body": True})
        await send({"type": "http.response.body", "body": body[5:]})

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    asyncio.run(app(inner)({"type": "http", "path": "/v1/embeddings"}, receive, send))
    return sent


def test_the_proxy_middleware_gives_ray_refusals_openai_bodies() -> None:
    pytest.importorskip("starlette", reason="the serve extra is not installed: "
                        "pip install -e '.[serve]'")
    from vkumd.serve.ray_serve import OpenAIRefusals, proxy_middlewares

    assert [m.cls for m in proxy_middlewares()] == [OpenAIRefusals]
    text = b"Request dropped due to backpressure (num_queued_requests=3, max_queued_requests=2)."
    start, body = _run_asgi(OpenAIRefusals, 429, b"text/plain; charset=utf-8", text)
    headers = dict(start["headers"])
    assert start["status"] == 429 and headers[b"retry-after"] == b"3"
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"content-length"] == str(len(body["body"])).encode()
    error = json.loads(body["body"])["error"]
    assert error["code"] == "queue_full" and error["type"] == "requests"
    assert "max_queued_requests=2" in error["message"]
    # The app's own answers (JSON, any status) and other statuses pass untouched.
    own = b'{"error": {"message": "queue full", "code": "queue_full"}}'
    sent = _run_asgi(OpenAIRefusals, 429, b"application/json", own)
    assert b"".join(m.get("body", b"") for m in sent[1:]) == own
    sent = _run_asgi(OpenAIRefusals, 500, b"text/plain", b"Internal Server Error")
    assert sent[0]["status"] == 500 and sent[1]["body"] == b"Inter"

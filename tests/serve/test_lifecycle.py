"""SIGTERM while a request is being computed: the accepted request is answered in full, then
the server frees the device and ends; with a drain grace, /health answers 503 first while
requests are still taken."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from .conftest import MODEL, missing, start_server


def test_sigterm_finishes_the_request_in_flight(tmp_path) -> None:
    if missing():
        pytest.skip(missing())
    served = start_server(tmp_path, "--max-batch-size", "8", "--drain-grace-s", "0")
    try:
        texts = [f"{i} a sentence of some length to keep the device busy for a while"
                 for i in range(256)]
        answer: dict = {}

        def call() -> None:
            answer["got"] = served.post("/v1/embeddings", {"model": MODEL, "input": texts},
                                        key=None)

        client = threading.Thread(target=call)
        client.start()
        deadline = time.monotonic() + 60
        while "vkumd_serve_queue_depth 0.0" in served.request("GET", "/metrics", key=None
                                                              )[2].decode():
            assert time.monotonic() < deadline and client.is_alive(), "never queued"
            time.sleep(0.02)
        served.proc.send_signal(signal.SIGTERM)
        client.join(120)
        status, _, body = answer["got"]
        assert status == 200, body
        assert [d["index"] for d in body["data"]] == list(range(256))
        served.proc.wait(60)
        assert served.proc.returncode in (0, -signal.SIGTERM)
        assert "vkumd serve: stopped; the model's device memory is freed" in served.output()
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(10)


def test_sigterm_drains_with_health_503_and_answers_everything_accepted(tmp_path) -> None:
    """With a drain grace, SIGTERM turns /health to 503 at once while the listener stays
    open: a request in flight and one sent during the drain are both answered in full, then
    the server shuts down and frees the device."""
    if missing():
        pytest.skip(missing())
    served = start_server(tmp_path, "--max-batch-size", "8", "--drain-grace-s", "3")
    try:
        texts = [f"{i} a sentence of some length to keep the device busy for a while"
                 for i in range(128)]
        answers: dict = {}

        def call(name: str, inputs: list[str]) -> None:
            answers[name] = served.post("/v1/embeddings", {"model": MODEL, "input": inputs},
                                        key=None)

        first = threading.Thread(target=call, args=("first", texts))
        first.start()
        deadline = time.monotonic() + 60
        while "vkumd_serve_queue_depth 0.0" in served.request("GET", "/metrics", key=None
                                                              )[2].decode():
            assert time.monotonic() < deadline and first.is_alive(), "never queued"
            time.sleep(0.02)
        signalled = time.monotonic()
        served.proc.send_signal(signal.SIGTERM)
        health: list[tuple[int, bytes]] = []
        while time.monotonic() - signalled < 1.0:
            status, _, body = served.request("GET", "/health", key=None)
            health.append((status, body))
            if status == 503:
                break
            time.sleep(0.05)
        assert health[-1][0] == 503 and b"draining" in health[-1][1], health
        # Sent during the drain: the listener is still open, and it is answered.
        call("during", texts[:3])
        first.join(120)
        for name in ("first", "during"):
            status, _, body = answers[name]
            assert status == 200, (name, body)
        assert [d["index"] for d in answers["first"][2]["data"]] == list(range(128))
        served.proc.wait(60)
        assert time.monotonic() - signalled >= 3.0  # the listener stayed up for the grace
        assert served.proc.returncode in (0, -signal.SIGTERM)
        out = served.output()
        assert "draining for 3 s" in out, out
        assert "vkumd serve: stopped; the model's device memory is freed" in out
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(10)

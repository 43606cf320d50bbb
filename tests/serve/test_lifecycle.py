"""SIGTERM while a request is being computed: the accepted request is answered in full, then
the server frees the device and ends."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from .conftest import MODEL, missing, start_server


def test_sigterm_finishes_the_request_in_flight(tmp_path) -> None:
    if missing():
        pytest.skip(missing())
    served = start_server(tmp_path, "--max-batch-size", "8")
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

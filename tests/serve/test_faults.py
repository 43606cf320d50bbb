"""Device faults under the server's batcher, in this process (faults are armed here and hit
the worker thread's calls): a failed submit fails only its batch's request, and the next one
is served; a lost device answers 503 to every request after it, and nothing crashes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from .conftest import missing


@pytest.fixture
def served() -> Iterator[object]:
    if missing():
        pytest.skip(missing())
    from vkumd.serve.app import Server
    from vkumd.serve.config import ServeConfig

    server = Server(ServeConfig(max_batch_size=4, max_batch_tokens=512))
    server.start()
    deadline = time.monotonic() + 180
    while not server.ready:
        assert server.failure is None, server.failure
        assert time.monotonic() < deadline, "warm-up did not end"
        time.sleep(0.05)
    yield server
    server.stop()


def test_a_failed_submit_fails_only_its_batch(served) -> None:
    from vkumd.serve.errors import ApiError
    from vkumd.testing import faults

    ids = served.engine.tokenize(["a sentence for the device", "and another one"])
    want = served.batcher.submit(ids, True).result(60)
    with faults.inject("vkQueueSubmit", nth=1) as rule:
        failing = served.batcher.submit(ids, True)
        with pytest.raises(ApiError) as caught:
            failing.result(60)
    assert rule.fired == 1
    assert caught.value.status == 503 and caught.value.code == "device_out_of_memory"
    assert "Retry-After" in caught.value.headers
    again = served.batcher.submit(ids, True).result(60)
    np.testing.assert_array_equal(again, want)
    assert served.metrics.failed_batches._value.get() == 1


def test_a_lost_device_answers_503_and_the_server_stays_up(served) -> None:
    from vkumd.serve.errors import ApiError
    from vkumd.testing import faults

    ids = served.engine.tokenize(["lost"])
    with faults.lose_device("submit", nth=1):
        with pytest.raises(ApiError) as caught:
            served.batcher.submit(ids, True).result(60)
    assert caught.value.status == 503 and caught.value.code == "device_unavailable"
    with pytest.raises(ApiError) as later:
        served.batcher.submit(ids, True).result(60)
    assert later.value.status == 503
    # /health says so (a probe restarts the server), and requests are refused up front.
    assert served.status().startswith("device lost")
    with pytest.raises(ApiError) as refused:
        served.check_ready()
    assert refused.value.status == 503 and refused.value.code == "not_ready"

"""A second server with tight limits: the queue limit's 429 with Retry-After, a key file,
keys on the probes, a small body limit, and the fifo policy giving the same embeddings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from .conftest import MODEL, Served, missing, start_server, stop_server

KEY = "key-from-a-file"


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if missing():
        pytest.skip(missing())
    tmp = tmp_path_factory.mktemp("tight")
    keys = tmp / "keys.txt"
    keys.write_text(f"# one key a line\n{KEY}\n")
    served = start_server(tmp, "--api-key-file", str(keys), "--auth-probes",
                          "--max-queue", "4", "--max-inputs", "4", "--max-batch-size", "2",
                          "--batch-policy", "fifo", "--max-body-bytes", "4096", key=KEY)
    yield served
    stop_server(served)


def client(served: Served, key: str = KEY):
    import openai

    return openai.OpenAI(base_url=served.base + "/v1", api_key=key, max_retries=0)


def test_probes_need_the_key_from_the_file(tight: Served) -> None:
    assert tight.request("GET", "/health", key=None)[0] == 401
    assert tight.request("GET", "/metrics", key=None)[0] == 401
    assert tight.request("GET", "/health", key=KEY)[0] == 200


def test_full_queue_answers_429_with_retry_after(tight: Served) -> None:
    import openai

    texts = ["a sentence of a few words to keep the device busy for a while"] * 4

    async def main() -> list:
        async with openai.AsyncOpenAI(base_url=tight.base + "/v1", api_key=KEY,
                                      max_retries=0) as c:
            calls = [c.embeddings.with_raw_response.create(model=MODEL, input=texts)
                     for _ in range(12)]
            return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    refused = [r for r in results if isinstance(r, openai.RateLimitError)]
    served = [r for r in results if not isinstance(r, Exception)]
    assert refused and served, results
    assert all(int(r.response.headers["retry-after"]) >= 1 for r in refused)
    assert refused[0].body["code"] == "queue_full"
    assert all(r.http_response.status_code == 200 for r in served)
    metrics = tight.request("GET", "/metrics", key=KEY)[2].decode()
    assert f'vkumd_serve_rejected_total{{reason="queue_full"}} {float(len(refused))}' in metrics


def test_fifo_gives_the_same_embeddings(tight: Served, local_encoder) -> None:
    texts = ["short", "a somewhat longer sentence than that", "mid sized one", "x"]
    with client(tight) as c:
        got = c.embeddings.create(model=MODEL, input=texts)
    vectors = np.array([d.embedding for d in got.data], np.float32)
    want = local_encoder.encode(texts)
    err = np.linalg.norm(vectors - want, axis=1) / np.linalg.norm(want, axis=1)
    assert err.max() < 1e-5


def test_small_limits(tight: Served) -> None:
    import openai

    with client(tight) as c:
        with pytest.raises(openai.BadRequestError, match="at most 4"):
            c.embeddings.create(model=MODEL, input=["a"] * 5)
        with pytest.raises(openai.APIStatusError) as caught:
            c.embeddings.create(model=MODEL, input=["x" * 5000])
        assert caught.value.status_code == 413
        assert caught.value.body["code"] == "request_too_large"

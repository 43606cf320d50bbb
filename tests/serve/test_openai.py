"""The server through the official ``openai`` client (sync and async) and TEI's routes:
every input form, both encodings bit for bit, agreement with in-process ``encode``, 2048
inputs in one request, keys, models, metrics."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time

import numpy as np
import pytest

from .conftest import KEYS, MODEL, Served

SENTENCES = ["The cat sits on the mat.", "A dog plays in the park with a red ball.",
             "Vulkan compute shaders run on lavapipe here.", "hi",
             "Sentence embeddings map text to vectors whose cosine similarity follows "
             "meaning, so a search can find passages that answer a question."]
RTOL = 1e-5


def rel(got: np.ndarray, want: np.ndarray) -> float:
    """Largest row-wise error relative to the row's norm."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float((np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)).max())


@pytest.fixture(scope="module")
def client(server: Served):
    import openai

    with openai.OpenAI(base_url=server.base + "/v1", api_key=KEYS[1], max_retries=0) as c:
        yield c


def vectors(resp) -> np.ndarray:
    assert [d.index for d in resp.data] == list(range(len(resp.data)))
    assert all(d.object == "embedding" for d in resp.data)
    return np.array([d.embedding for d in resp.data], np.float32)


def test_health_was_503_until_warm_up_ended(server: Served) -> None:
    assert server.health_seen[-1] == 200
    assert 503 in server.health_seen, f"/health answered {server.health_seen} while starting"
    text = server.output()
    assert "warm-up [1/" in text and "ready in" in text, text


def test_every_input_form_matches_in_process_encode(client, local_encoder) -> None:
    want = local_encoder.encode(SENTENCES)
    ids = local_encoder.tokenize(SENTENCES)
    one = client.embeddings.create(model=MODEL, input=SENTENCES[0], encoding_format="float")
    assert one.object == "list" and one.model == MODEL and len(one.data) == 1
    assert one.usage.prompt_tokens == one.usage.total_tokens == len(ids[0])
    assert rel(vectors(one), want[:1]) < RTOL
    many = client.embeddings.create(model=MODEL, input=SENTENCES, encoding_format="float")
    assert rel(vectors(many), want) < RTOL
    assert many.usage.prompt_tokens == sum(map(len, ids))
    tokens = client.embeddings.create(model=MODEL, input=ids[1], encoding_format="float")
    assert rel(vectors(tokens), want[1:2]) < RTOL
    arrays = client.embeddings.create(model=MODEL, input=ids, encoding_format="float")
    assert rel(vectors(arrays), want) < RTOL
    assert arrays.usage.total_tokens == sum(map(len, ids))


def test_base64_and_float_are_the_same_bits(server: Served, client) -> None:
    body = {"model": MODEL, "input": SENTENCES}
    status, _, floats = server.post("/v1/embeddings", {**body, "encoding_format": "float"})
    assert status == 200
    status, _, packed = server.post("/v1/embeddings", {**body, "encoding_format": "base64"})
    assert status == 200
    as_float = np.array([d["embedding"] for d in floats["data"]], np.float32)
    as_b64 = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4")
                       for d in packed["data"]])
    assert as_float.tobytes() == as_b64.tobytes()
    # The client asks for base64 when the caller does not choose, and decodes it.
    default = vectors(client.embeddings.create(model=MODEL, input=SENTENCES))
    assert default.tobytes() == as_float.tobytes()


def test_dimensions_only_the_models_own(client) -> None:
    import openai

    same = client.embeddings.create(model=MODEL, input="x", dimensions=384,
                                    encoding_format="float")
    assert len(same.data[0].embedding) == 384
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=MODEL, input="x", dimensions=128)
    assert caught.value.body["param"] == "dimensions"


def test_async_client_concurrent_requests_agree(server: Served, local_encoder) -> None:
    import openai

    want = local_encoder.encode(SENTENCES)

    async def main() -> list:
        async with openai.AsyncOpenAI(base_url=server.base + "/v1", api_key=KEYS[0],
                                      max_retries=0) as c:
            calls = [c.embeddings.create(model=MODEL, input=SENTENCES[i:] + SENTENCES[:i])
                     for i in range(len(SENTENCES)) for _ in range(2)]
            return await asyncio.gather(*calls)

    for n, resp in enumerate(asyncio.run(main())):
        i = n // 2
        assert rel(vectors(resp), np.roll(want, -i, axis=0)) < RTOL


def test_2048_inputs_in_one_request(client, local_encoder) -> None:
    texts = [f"sentence number {i} about {'cats' if i % 3 else 'the weather today'}"
             for i in range(2048)]
    resp = client.embeddings.create(model=MODEL, input=texts, encoding_format="base64")
    assert [d.index for d in resp.data] == list(range(2048))
    # Asked for by the caller, base64 comes back as the strings themselves.
    got = np.stack([np.frombuffer(base64.b64decode(d.embedding), "<f4") for d in resp.data])
    assert got.shape == (2048, 384)
    sample = list(range(0, 2048, 97)) + [2047]
    assert rel(got[sample], local_encoder.encode([texts[i] for i in sample])) < RTOL


def test_keys_are_checked_and_probes_are_open(server: Served) -> None:
    import openai

    for key in ("wrong-key", None):
        status, headers, body = server.post("/v1/embeddings", {"model": MODEL, "input": "x"},
                                            key=key)
        assert status == 401, body
        assert set(body["error"]) == {"message", "type", "param", "code"}
    with openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0) as c:
        with pytest.raises(openai.AuthenticationError):
            c.embeddings.create(model=MODEL, input="x")
    assert server.request("GET", "/health", key=None)[0] == 200
    assert server.request("GET", "/metrics", key=None)[0] == 200


def test_models_and_unknown_model(client) -> None:
    import openai

    assert MODEL in [m.id for m in client.models.list().data]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as caught:
        client.embeddings.create(model="text-embedding-3-small", input="x")
    assert caught.value.body["code"] == "model_not_found"


def test_generation_routes_say_not_available(client) -> None:
    import openai

    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert "not available" in caught.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model=MODEL, prompt="hi")


def test_tei_routes(server: Served, local_encoder) -> None:
    status, _, got = server.post("/embed", {"inputs": SENTENCES})
    assert status == 200
    assert rel(np.array(got, np.float32), local_encoder.encode(SENTENCES)) < RTOL
    status, _, one = server.post("/embed", {"inputs": SENTENCES[0], "normalize": False})
    assert status == 200 and len(one) == 1
    raw = local_encoder.encode(SENTENCES[:1], normalize=False)
    assert rel(np.array(one, np.float32), raw) < RTOL
    status, _, info = server.post("/embed", {"inputs": "word " * 600, "truncate": True})
    assert status == 200
    status, _, body = server.post("/embed", {"inputs": "word " * 600})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    status, _, raw_info = server.request("GET", "/info")
    info = json.loads(raw_info)
    assert status == 200 and info["model_id"] == MODEL and info["max_input_length"] == 256


def test_metrics_count_what_clients_saw(server: Served) -> None:
    def scrape() -> str:
        return server.request("GET", "/metrics", key=None)[2].decode()

    def value(text: str, name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    before = scrape()
    for _ in range(3):
        assert server.post("/v1/embeddings", {"model": MODEL, "input": SENTENCES})[0] == 200
    assert server.post("/v1/embeddings", {"model": MODEL, "input": ""})[0] == 400
    after = scrape()
    ok = 'vkumd_serve_requests_total{route="/v1/embeddings",status="200"}'
    bad = 'vkumd_serve_requests_total{route="/v1/embeddings",status="400"}'
    assert value(after, ok) - value(before, ok) == 3
    assert value(after, bad) - value(before, bad) == 1
    assert value(after, "vkumd_serve_inputs_total") - value(before, "vkumd_serve_inputs_total") \
        == 3 * len(SENTENCES)
    for name in ("vkumd_serve_queue_seconds_count", "vkumd_serve_inference_seconds_count",
                 "vkumd_serve_batch_size_count", "vkumd_serve_tokens_total",
                 "vkumd_serve_padded_tokens_total", "vkumd_serve_queue_depth",
                 "vkumd_serve_rejected_total", "vkumd_serve_tokenize_seconds_count",
                 "vkumd_serve_ready"):
        assert name in after, name
    assert value(after, "vkumd_serve_padded_tokens_total") >= value(after,
                                                                    "vkumd_serve_tokens_total")


def test_inputs_of_a_client_that_left_are_dropped(server: Served) -> None:
    def dropped() -> float:
        text = server.request("GET", "/metrics", key=None)[2].decode()
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("vkumd_serve_dropped_inputs_total"))

    before = dropped()
    texts = [f"{i} " + "a fairly long sentence about embeddings and batching " * 5
             for i in range(2048)]
    body = json.dumps({"model": MODEL, "input": texts}).encode()
    head = (f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            f"application/json\r\nAuthorization: Bearer {KEYS[0]}\r\nContent-Length: "
            f"{len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(head + body)
        time.sleep(1.0)  # tokenized and queued; a few batches computed
    deadline = time.monotonic() + 60
    while dropped() == before:
        assert time.monotonic() < deadline, "no input was dropped after the client left"
        time.sleep(0.2)
    assert server.post("/v1/embeddings", {"model": MODEL, "input": "still here"})[0] == 200

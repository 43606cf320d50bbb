"""The generation routes on a server whose generator is the real scheduler over a numpy
runner (tests/serve/fake_generator.py): OpenAI's shapes whole and streamed, the official
client on both routes, stop sequences, seeds, continuous batching of concurrent requests,
a disconnect freeing its slot, a full queue's 429, a device fault, and every bad input's
status and body."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import NEEDS, Served, start_server, stop_server
from .fake_generator import TEXT, available, make

GEN = "tests.serve.fake_generator:make"


def skip_reason() -> str | None:
    import importlib.util

    gone = [n for n in ("starlette", "uvicorn", "prometheus_client", "openai", "tokenizers")
            if importlib.util.find_spec(n) is None]
    if gone:
        return f"not installed: {', '.join(gone)} ({', '.join(NEEDS[n] for n in gone)})"
    return available()


def serve(tmp: object, *args: str) -> Served:
    return start_server(tmp, "--model", "none", "--generate-model", GEN, *args, timeout=60)


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    served = serve(tmp_path_factory.mktemp("gen"), "--generate-slots", "4",
                   "--generate-max-context", "256", "--generate-max-tokens", "200")
    yield served
    stop_server(served)
    assert "vkumd serve: stopped" in served.output(), served.output()


@pytest.fixture(scope="module")
def client(gen: Served):
    import openai

    with openai.OpenAI(base_url=gen.base + "/v1", api_key="none", max_retries=0) as c:
        yield c


def prefix(tokens: int) -> str:
    """The fake's greedy text after ``tokens`` tokens (one byte each)."""
    data = (TEXT.encode() * 8)[:tokens]
    return data.decode("utf-8", errors="ignore")


def metric(served: Served, name: str) -> float:
    text = served.request("GET", "/metrics", key=None)[2].decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def sse(served: Served, path: str, body: dict) -> tuple[int, dict, list]:
    """A streamed request's status, headers and ``data:`` payloads (``[DONE]`` as is)."""
    status, headers, raw = served.request("POST", path, json.dumps(body).encode(), key=None)
    events = [chunk for chunk in raw.decode().split("\n\n") if chunk]
    assert all(e.startswith("data: ") for e in events), events
    return status, headers, [e[6:] if e == "data: [DONE]" else json.loads(e[6:])
                             for e in events]


def test_completion_whole(gen: Served) -> None:
    before = time.time()
    status, _, body = gen.post("/v1/completions", {"model": GEN, "prompt": "Say hi",
                                                   "max_tokens": 8, "temperature": 0},
                               key=None)
    assert status == 200, body
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    assert before - 1 <= body["created"] <= time.time() + 1 and body["model"] == GEN
    (choice,) = body["choices"]
    assert choice == {"index": 0, "text": prefix(8), "logprobs": None,
                      "finish_reason": "length"}
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14}


def test_chat_whole_and_models(gen: Served, client) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    resp = client.chat.completions.create(model=GEN, messages=messages, max_tokens=12,
                                          temperature=0)
    assert resp.id.startswith("chatcmpl-") and resp.object == "chat.completion"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == prefix(12)
    assert resp.choices[0].finish_reason == "length"
    local = make()
    try:
        prompt = local.encode(local.render_chat(messages))
    finally:
        local.close()
    assert resp.usage.prompt_tokens == len(prompt)
    assert resp.usage.completion_tokens == 12
    assert GEN in [m.id for m in client.models.list().data]
    # Multi-byte characters that span tokens come out whole.
    whole = client.completions.create(model=GEN, prompt="x", max_tokens=len(TEXT.encode()),
                                      temperature=0)
    assert whole.choices[0].text == TEXT


def test_end_of_sequence_and_stop_sequences(client) -> None:
    eos = client.completions.create(model=GEN, prompt="[eos] go", max_tokens=50, temperature=0)
    assert eos.choices[0].text == prefix(5) and eos.choices[0].finish_reason == "stop"
    assert eos.usage.completion_tokens == 5
    for stop, want in (("fake", "Hello from the "), (["zzz", "café"], "Hello from the fake "
                                                      "model, ")):
        got = client.completions.create(model=GEN, prompt="p", max_tokens=100, stop=stop,
                                        temperature=0)
        assert got.choices[0].text == want and got.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(
        model=GEN, messages=[{"role": "user", "content": "x"}], max_tokens=100, stop="☕",
        temperature=0, stream=True)
    pieces = [c.choices[0].delta.content or "" for c in streamed if c.choices]
    assert "".join(pieces) == "Hello from the fake model, café "


def test_seeds_reproduce(client) -> None:
    def text(seed: int) -> str:
        return client.completions.create(model=GEN, prompt="[random]", max_tokens=24,
                                         seed=seed, temperature=1.0, top_p=0.95,
                                         extra_body={"top_k": 50, "repetition_penalty": 1.1}
                                         ).choices[0].text
    assert text(7) == text(7)
    assert text(7) != text(8)


def test_stream_raw_events(gen: Served) -> None:
    body = {"model": GEN, "prompt": "abc", "max_tokens": 10, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    status, headers, events = sse(gen, "/v1/completions", body)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]
    assert len({c["id"] for c in chunks + [usage]}) == 1
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == prefix(10)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3,
                                                         "completion_tokens": 10,
                                                         "total_tokens": 13}
    chat = {"model": GEN, "messages": [{"role": "user", "content": "q"}], "max_tokens": 6,
            "temperature": 0, "stream": True}
    status, _, events = sse(gen, "/v1/chat/completions", chat)
    assert status == 200 and events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == prefix(6)
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "length"}


def test_openai_client_streams_both_routes(client) -> None:
    stream = client.completions.create(model=GEN, prompt="hello", max_tokens=16,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == prefix(16)
    assert chunks[-1].usage.completion_tokens == 16
    stream = client.chat.completions.create(model=GEN, max_tokens=16, temperature=0,
                                            messages=[{"role": "user", "content": "x"}],
                                            stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == prefix(16)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_concurrent_requests_share_decode_steps(gen: Served) -> None:
    import openai

    steps, le1, le4 = (metric(gen, "vkumd_serve_decode_batch_size_count"),
                       metric(gen, 'vkumd_serve_decode_batch_size_bucket{le="1.0"}'),
                       metric(gen, 'vkumd_serve_decode_batch_size_bucket{le="4.0"}'))
    tokens = metric(gen, "vkumd_serve_generated_tokens_total")

    async def main() -> list:
        async with openai.AsyncOpenAI(base_url=gen.base + "/v1", api_key="none",
                                      max_retries=0) as c:
            calls = [c.completions.create(model=GEN, prompt=f"request {i}", max_tokens=20,
                                          temperature=0, stream=i % 2 == 0)
                     for i in range(12)]
            results = await asyncio.gather(*calls)
            texts = []
            for r in results:
                if isinstance(r, openai.AsyncStream):
                    texts.append("".join([c.choices[0].text async for c in r]))
                else:
                    texts.append(r.choices[0].text)
            return texts

    assert asyncio.run(main()) == [prefix(20)] * 12  # 12 requests on 4 slots: 8 waited
    steps_now = metric(gen, "vkumd_serve_decode_batch_size_count") - steps
    batched = steps_now - (metric(gen, 'vkumd_serve_decode_batch_size_bucket{le="1.0"}') - le1)
    assert batched > steps_now / 2, "most steps should decode several sequences"
    assert metric(gen, 'vkumd_serve_decode_batch_size_bucket{le="4.0"}') - le4 == steps_now
    assert metric(gen, "vkumd_serve_generated_tokens_total") - tokens == 12 * 20
    assert metric(gen, "vkumd_serve_time_to_first_token_seconds_count") >= 12


def test_disconnect_mid_stream_frees_the_slot(gen: Served) -> None:
    cancelled = metric(gen, 'vkumd_serve_sequences_total{finish="cancelled"}')
    body = json.dumps({"model": GEN, "prompt": "long", "max_tokens": 200, "temperature": 0,
                       "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", gen.port), timeout=30) as s:
        s.sendall(head + body)
        got = b""
        while b"data: " not in got:
            got += s.recv(4096)
        assert b" 200 OK" in got.split(b"\r\n")[0]
        assert metric(gen, "vkumd_serve_active_sequences") == 1
    deadline = time.monotonic() + 10  # 200 tokens would take over 2 s
    while metric(gen, 'vkumd_serve_sequences_total{finish="cancelled"}') == cancelled:
        assert time.monotonic() < deadline, "the sequence was not cancelled"
        time.sleep(0.05)
    assert metric(gen, "vkumd_serve_active_sequences") == 0
    status, _, body = gen.post("/v1/completions", {"model": GEN, "prompt": "x",
                                                   "max_tokens": 2}, key=None)
    assert status == 200, body


def test_a_device_fault_fails_its_request_only(gen: Served) -> None:
    status, _, body = gen.post("/v1/completions", {"model": GEN, "prompt": "[fault]",
                                                   "max_tokens": 4}, key=None)
    assert status == 500 and body["error"]["code"] == "device_fault", body
    assert "injected device fault" in body["error"]["message"]
    status, _, body = gen.post("/v1/completions", {"model": GEN, "prompt": "fine",
                                                   "max_tokens": 3, "temperature": 0},
                               key=None)
    assert status == 200 and body["choices"][0]["text"] == prefix(3)


def good(**over: object) -> dict:
    return {"model": GEN, "prompt": "hi", "max_tokens": 4, **over}


def chat(**over: object) -> dict:
    return {"model": GEN, "messages": [{"role": "user", "content": "hi"}], **over}


BAD = [
    ("/v1/completions", [1, 2], 400, None),
    ("/v1/completions", {"prompt": "hi"}, 400, "model"),
    ("/v1/completions", good(model="gpt-4o"), 404, "model"),
    ("/v1/completions", {"model": GEN}, 400, "prompt"),
    ("/v1/completions", good(prompt=""), 400, "prompt"),
    ("/v1/completions", good(prompt=[]), 400, "prompt"),
    ("/v1/completions", good(prompt=["a", "b"]), 400, "prompt"),
    ("/v1/completions", good(prompt={"text": "a"}), 400, "prompt"),
    ("/v1/completions", good(prompt=[1, 10**6]), 400, "prompt"),
    ("/v1/completions", good(prompt="x" * 300), 400, "prompt"),
    ("/v1/completions", good(prompt="x" * 250, max_tokens=10), 400, "prompt"),
    ("/v1/completions", good(n=2), 400, "n"),
    ("/v1/completions", good(n=True), 400, "n"),
    ("/v1/completions", good(max_tokens=0), 400, "max_tokens"),
    ("/v1/completions", good(max_tokens="4"), 400, "max_tokens"),
    ("/v1/completions", good(max_tokens=201), 400, "max_tokens"),
    ("/v1/completions", good(temperature=-0.1), 400, "temperature"),
    ("/v1/completions", good(temperature=2.5), 400, "temperature"),
    ("/v1/completions", good(temperature="hot"), 400, "temperature"),
    ("/v1/completions", good(top_p=0), 400, "top_p"),
    ("/v1/completions", good(top_p=1.5), 400, "top_p"),
    ("/v1/completions", good(top_k=-1), 400, "top_k"),
    ("/v1/completions", good(top_k=2.5), 400, "top_k"),
    ("/v1/completions", good(seed="x"), 400, "seed"),
    ("/v1/completions", good(seed=-1), 400, "seed"),
    ("/v1/completions", good(stop=""), 400, "stop"),
    ("/v1/completions", good(stop=[1]), 400, "stop"),
    ("/v1/completions", good(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    ("/v1/completions", good(stream="yes"), 400, "stream"),
    ("/v1/completions", good(stream_options={"include_usage": True}), 400, "stream_options"),
    ("/v1/completions", good(logprobs=3), 400, "logprobs"),
    ("/v1/completions", good(echo=True), 400, "echo"),
    ("/v1/completions", good(presence_penalty=0.5), 400, "presence_penalty"),
    ("/v1/completions", good(repetition_penalty=0), 400, "repetition_penalty"),
    ("/v1/completions", good(user=5), 400, "user"),
    ("/v1/chat/completions", chat(messages=[]), 400, "messages"),
    ("/v1/chat/completions", {"model": GEN}, 400, "messages"),
    ("/v1/chat/completions", chat(messages=["hi"]), 400, "messages[0]"),
    ("/v1/chat/completions", chat(messages=[{"role": "bot", "content": "x"}]), 400,
     "messages[0].role"),
    ("/v1/chat/completions", chat(messages=[{"role": "user", "content": 5}]), 400,
     "messages[0].content"),
    ("/v1/chat/completions", chat(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]), 400, "messages[0].content[0]"),
    ("/v1/chat/completions", chat(tools=[{"type": "function"}]), 400, "tools"),
    ("/v1/chat/completions", chat(response_format={"type": "json_object"}), 400,
     "response_format"),
    ("/v1/chat/completions", chat(max_completion_tokens=-3), 400, "max_completion_tokens"),
]


@pytest.mark.parametrize("path,body,status,param", BAD)
def test_bad_request(gen: Served, path: str, body: object, status: int,
                     param: str | None) -> None:
    got, _, answer = gen.post(path, body, key=None)
    assert got == status, answer
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    assert answer["error"]["param"] == param, answer
    assert answer["error"]["message"]


def test_bad_bytes_and_methods_then_healthy(gen: Served) -> None:
    for raw, status in ((b"{not json", 400), (b"\xff\xfe", 400)):
        got, _, body = gen.request("POST", "/v1/chat/completions", raw, key=None)
        assert got == status and json.loads(body)["error"]["code"] == "invalid_json"
    got, _, _ = gen.request("POST", "/v1/completions", b"{}", key=None,
                            headers={"Content-Type": "text/plain"})
    assert got == 415
    assert gen.request("GET", "/v1/completions", key=None)[0] == 405
    status, _, body = gen.post("/v1/embeddings", {"model": GEN, "input": "x"}, key=None)
    assert status == 404 and body["error"]["code"] == "not_available"
    assert gen.request("GET", "/health", key=None)[0] == 200
    status, _, body = gen.post("/v1/completions", good(), key=None)
    assert status == 200 and body["usage"]["completion_tokens"] == 4


def test_full_queue_answers_429_with_retry_after(tmp_path_factory) -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    served = serve(tmp_path_factory.mktemp("genq"), "--generate-slots", "1",
                   "--generate-max-queue", "1")
    try:
        def one(i: int) -> tuple[int, dict, dict]:
            return served.post("/v1/completions", good(prompt=f"p{i}", max_tokens=30),
                               key=None)

        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(one, range(6)))
        statuses = sorted(r[0] for r in results)
        assert statuses.count(200) >= 2 and statuses.count(429) >= 1, statuses
        refused = [r for r in results if r[0] == 429]
        assert all(int(h["retry-after"]) >= 1 for _, h, _ in refused)
        assert refused[0][2]["error"]["code"] == "queue_full"
        assert metric(served, 'vkumd_serve_rejected_total{reason="generate_queue_full"}') \
            == len(refused)
    finally:
        stop_server(served)


def test_settings_refused() -> None:
    from vkumd.errors import VkumdValueError
    from vkumd.serve.config import ServeConfig

    for bad, what in ((dict(model="none"), "nothing to serve"),
                      (dict(generate_model=GEN, generate_compute="int4"), "generate-compute"),
                      (dict(generate_model=GEN, generate_cache_dtype="int8"),
                       "generate-cache-dtype"),
                      (dict(generate_model=GEN, generate_slots=0), "generate-slots")):
        with pytest.raises(VkumdValueError, match=what):
            ServeConfig(**bad).check()

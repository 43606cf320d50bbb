"""The generation routes end to end on the device: ``vkumd serve --generate-model tiny.gguf``
(a random 2-layer Llama, tests/framework/models/tiny_llama.py) answers what
``TextGenerator`` answers in this process, whole, streamed and under concurrent requests."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Served, start_server, stop_server

MESSAGES = [{"role": "user", "content": "hello, how are you?"}]
PROMPTS = ["the cat", "hello there", "in 1969 the", "a b c d e f g"]
COMPUTE = "float32"  # the weights dequantised once: greedy text that does not hang on a tie


def skip_reason() -> str | None:
    gone = [n for n in ("starlette", "uvicorn", "prometheus_client", "openai", "tokenizers")
            if importlib.util.find_spec(n) is None]
    if gone:
        return f"not installed: {', '.join(gone)} (pip install -e '.[serve]' openai tokenizers)"
    for module in ("vkumd.framework.models.generation", "vkumd.framework.models.llama_runner"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} is not there yet ({exc}): issue 27's runner and generator"
    return None


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    from tests.framework.models.tiny_llama import write_tiny_gguf

    tmp = tmp_path_factory.mktemp("tinygen")
    path = tmp / "tiny.gguf"
    write_tiny_gguf(path, qtype="Q8_0", seed=3)
    served = start_server(tmp, "--model", "none", "--generate-model", str(path),
                          "--generate-slots", "2", "--generate-max-context", "128",
                          "--generate-compute", COMPUTE)
    yield served, path
    stop_server(served)
    assert "vkumd serve: stopped" in served.output(), served.output()


@pytest.fixture(scope="module")
def local(tiny: tuple[Served, Path], ctx: object) -> Iterator[object]:
    from vkumd.models import TextGenerator

    gen = TextGenerator.from_gguf(tiny[1], ctx, slots=2, max_context=128, compute=COMPUTE)
    yield gen
    gen.close()


def test_the_server_answers_what_the_generator_does(tiny, local) -> None:
    import openai

    served, _ = tiny
    with openai.OpenAI(base_url=served.base + "/v1", api_key="none", max_retries=0) as c:
        assert "tiny" in [m.id for m in c.models.list().data]
        chat = c.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=12,
                                         temperature=0)
        assert chat.choices[0].message.content == local.chat(MESSAGES, max_new_tokens=12)
        assert chat.usage.prompt_tokens == len(local.encode(local.render_chat(MESSAGES)))
        streamed = c.completions.create(model="tiny", prompt=PROMPTS[0], max_tokens=10,
                                        temperature=0, stream=True)
        text = "".join(chunk.choices[0].text for chunk in streamed)
        assert text == local.generate(PROMPTS[0], max_new_tokens=10)


def test_concurrent_requests_on_two_slots_agree(tiny, local) -> None:
    import openai

    served, _ = tiny
    want = [local.generate(p, max_new_tokens=8) for p in PROMPTS]

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=served.base + "/v1", api_key="none",
                                      max_retries=0) as c:
            calls = [c.completions.create(model="tiny", prompt=p, max_tokens=8, temperature=0)
                     for p in PROMPTS]
            return [r.choices[0].text for r in await asyncio.gather(*calls)]

    assert asyncio.run(main()) == want

"""``TextGenerator`` over the fake runner: plain and streamed calls agree, chat goes through
the template, batches match single calls, stats, and bad input refused with the context
still usable."""

from __future__ import annotations

import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.models.generation import TextGenerator
from vkumd.framework.models.llama_tokenizer import chatml
from vkumd.models import TextGenerator as exported

from .fake_llm import FakeConfig, FakeRunner, byte_tokenizer

TOKENIZER = byte_tokenizer()
CONFIG = FakeConfig(TOKENIZER)
EOS = CONFIG.eos_ids[0]


def _generator(slots: int = 3, max_context: int = 64, script=None) -> TextGenerator:
    runner = FakeRunner(CONFIG.vocab_size, slots=slots, max_context=max_context,
                        script=script, eos_id=EOS)
    return TextGenerator(runner, TOKENIZER, CONFIG)


def test_exported_from_vkumd_models() -> None:
    assert exported is TextGenerator


def test_greedy_is_deterministic_and_streaming_joins_to_the_plain_text() -> None:
    with _generator() as generator:
        text = generator.generate("hello there", max_new_tokens=20)
        assert text == generator.generate("hello there", max_new_tokens=20)
        stats = generator.last_stats
        assert stats["prompt_tokens"] == len(TOKENIZER.encode("hello there").ids)
        assert stats["generated_tokens"] == 20 and stats["finish_reasons"] == ["length"]
        assert stats["decode_tokens_per_s"] > 0 and stats["prefill_tokens_per_s"] > 0
        pieces = list(generator.generate("hello there", max_new_tokens=20, stream=True))
        assert len(pieces) > 1 and "".join(pieces) == text
        assert generator.last_stats["generated_tokens"] == 20


def test_seeded_sampling_repeats_and_stop_cuts_the_text() -> None:
    prompt = TOKENIZER.encode("x").ids
    script = {tuple(prompt): TOKENIZER.encode("hello world, bye").ids}
    with _generator(script=script) as generator:
        assert generator.generate("x", max_new_tokens=40) == "hello world, bye"
        assert generator.generate("x", max_new_tokens=40, stop=[",", "zz"]) == "hello world"
        options = dict(max_new_tokens=15, temperature=1.0, top_p=0.9, seed=42)
        assert generator.generate("abc", **options) == generator.generate("abc", **options)


def test_chat_renders_the_template_and_the_reply_comes_back() -> None:
    messages = [{"role": "user", "content": "hi"}]
    prompt = TOKENIZER.encode(chatml(messages)).ids
    script = {tuple(prompt): TOKENIZER.encode("Hello! 👋").ids}
    with _generator(script=script) as generator:
        assert generator.chat(messages) == "Hello! 👋"
        assert generator.last_stats["finish_reasons"] == ["stop"]
        assert "".join(generator.chat(messages, stream=True)) == "Hello! 👋"


def test_a_batch_matches_single_calls_and_shares_decode_steps() -> None:
    prompts = ["one", "two two", "three", "four!", "5"]
    options = dict(max_new_tokens=9, temperature=0.8, seed=1)
    with _generator(slots=3) as single:
        want = [single.generate(p, **options) for p in prompts]
    with _generator(slots=3) as batched:
        assert batched.generate_batch(prompts, **options) == want
        assert max(len(b) for b in batched.runner.decode_batches) == 3
        assert batched.last_stats["generated_tokens"] == 45
        assert batched.runner.history == {}


def test_a_dropped_stream_frees_its_slot() -> None:
    with _generator(slots=1) as generator:
        stream = generator.generate("abc", max_new_tokens=30, stream=True)
        next(stream)
        stream.close()
        assert generator.runner.history == {}
        assert generator.last_stats["finish_reasons"] == ["cancelled"]
        assert generator.last_stats["generated_tokens"] >= 1
        assert generator.generate("abc", max_new_tokens=3)


def test_a_prompt_longer_than_the_context_names_both_lengths() -> None:
    with _generator(max_context=16) as generator:
        with pytest.raises(VkumdValueError, match="the prompt is 20 tokens; the context "
                           "holds 16"):
            generator.generate("a" * 20)
        assert generator.generate("a" * 5, max_new_tokens=2)


@pytest.mark.parametrize("call, error, words", [
    (lambda g: g.generate(3), VkumdTypeError, "prompt must be a str"),
    (lambda g: g.generate("x", temperature=-1), VkumdValueError, "temperature is -1"),
    (lambda g: g.generate("x", stop=""), VkumdValueError, "stop is an empty string"),
    (lambda g: g.generate("x", top_p=0), VkumdValueError, "top_p is 0"),
    (lambda g: g.chat("hi"), VkumdTypeError, "chat messages must be a list"),
    (lambda g: g.chat([]), VkumdValueError, "chat messages are empty"),
    (lambda g: g.chat([{"role": "user"}]), VkumdValueError, "has no 'content'"),
    (lambda g: g.chat([{"role": "user", "content": 1}]), VkumdTypeError, "must be a string"),
    (lambda g: g.chat([{"role": "robot", "content": "x"}]), VkumdValueError, "role 'robot'"),
    (lambda g: g.generate_batch("x"), VkumdTypeError, "prompts must be a list"),
    (lambda g: g.generate_batch(["x", 2]), VkumdTypeError, "prompt must be a str"),
    (lambda g: g.generate_batch(["x"], stream=True), VkumdTypeError, "no stream option"),
])
def test_bad_input_is_refused_and_the_generator_stays_usable(call, error, words) -> None:
    with _generator() as generator:
        with pytest.raises(error) as caught:
            call(generator)
        assert words in str(caught.value)
        assert generator.scheduler.pending == 0
        assert generator.generate("ok", max_new_tokens=2)


def test_close_is_safe_twice_and_refuses_later_calls() -> None:
    generator = _generator()
    generator.close()
    generator.close()
    assert generator.runner.closed
    with pytest.raises(VkumdValueError, match="closed"):
        generator.generate("x")


def test_smollm2_tokenizer_streams_emoji_and_its_chat_template_renders() -> None:
    """SmolLM2's own tokenizer and template (read from its GGUF) over the fake runner."""
    from vkumd.framework.models.gguf import GGUFFile
    from vkumd.framework.models.llama_config import config_from_gguf
    from vkumd.framework.models.llama_tokenizer import tokenizer_from_gguf

    from .smollm2 import need_smollm2

    with GGUFFile(need_smollm2()) as gguf:
        config, tokenizer = config_from_gguf(gguf), tokenizer_from_gguf(gguf)
    messages = [{"role": "user", "content": "hi"}]
    probe = TextGenerator(FakeRunner(config.vocab_size), tokenizer, config)
    prompt = probe.encode(probe.render_chat(messages))
    assert prompt[0] == tokenizer.token_to_id("<|im_start|>")
    assert probe.render_chat(messages).endswith("<|im_start|>assistant\n")
    reply = "Bonjour 😀 🇫🇷 café! 日本語 END tail"
    ids = tokenizer.encode(reply, add_special_tokens=False).ids
    runner = FakeRunner(config.vocab_size, slots=2, max_context=256, eos_id=config.eos_ids[0],
                        script={tuple(prompt): ids})
    with TextGenerator(runner, tokenizer, config) as generator:
        pieces = list(generator.chat(messages, stream=True, stop=" END"))
        assert "".join(pieces) == "Bonjour 😀 🇫🇷 café! 日本語"
        assert all("\ufffd" not in piece for piece in pieces)
        assert generator.chat(messages) == reply
        assert generator.last_stats["finish_reasons"] == ["stop"]

"""Continuous batching over a fake runner: sequences join and leave without touching the
others, slots are freed and reused, cancellation, stop strings and UTF-8 across tokens,
a loop thread with submitters on other threads, and faults that fail only their requests."""

from __future__ import annotations

import threading

import pytest

from vkumd.errors import VkumdError, VkumdTypeError, VkumdValueError
from vkumd.framework.models.sampling import SamplingParams
from vkumd.framework.models.scheduler import RequestCancelled, Scheduler

from .fake_llm import FakeRunner, byte_tokenizer

TOKENIZER = byte_tokenizer()
EOS = TOKENIZER.token_to_id("<|im_end|>")
VOCAB = TOKENIZER.get_vocab_size()


def _ids(text: str) -> list[int]:
    return TOKENIZER.encode(text).ids


def _decode(ids: list[int]) -> str:
    return TOKENIZER.decode(ids, skip_special_tokens=True)


def _scheduler(slots: int = 4, max_context: int = 64, script=None,
               eos: bool = True) -> Scheduler:
    runner = FakeRunner(VOCAB, slots=slots, max_context=max_context, script=script,
                        eos_id=EOS)
    return Scheduler(runner, _decode, eos_ids=[EOS] if eos else [])


def _params(**options) -> SamplingParams:
    return SamplingParams.create(**{"max_new_tokens": 12, **options})


PROMPTS = ["once upon", "the sky", "hello", "a b c d", "zzz"]
SAMPLED = {"temperature": 0.9, "top_k": 40, "top_p": 0.95, "repetition_penalty": 1.2}


def _alone(prompt: str, eos: bool = True, **options) -> list[int]:
    scheduler = _scheduler(eos=eos)
    handle = scheduler.submit(_ids(prompt), _params(**options))
    handle.result()
    return handle.tokens


@pytest.mark.parametrize("options", [{}, {**SAMPLED, "seed": 11}], ids=["greedy", "sampled"])
def test_a_sequence_joining_midway_leaves_the_others_unchanged(options) -> None:
    # Without an end-of-sequence id every request runs its 12 tokens, so they overlap.
    want = {p: _alone(p, eos=False, **options) for p in PROMPTS[:3]}
    scheduler = _scheduler(slots=4, eos=False)
    first = scheduler.submit(_ids(PROMPTS[0]), _params(**options))
    for _ in range(3):
        scheduler.step()
    second = scheduler.submit(_ids(PROMPTS[1]), _params(**options))
    scheduler.step()
    third = scheduler.submit(_ids(PROMPTS[2]), _params(**options))
    for handle in (first, second, third):
        handle.result()
    assert first.tokens == want[PROMPTS[0]]
    assert second.tokens == want[PROMPTS[1]]
    assert third.tokens == want[PROMPTS[2]]
    assert len(first.tokens) == 12 and first.finish_reason == "length"
    # They really shared steps: some decode call carried all three.
    assert max(len(batch) for batch in scheduler.runner.decode_batches) == 3


def test_the_same_seed_gives_the_same_text_and_another_differs() -> None:
    a = _alone("hello", **SAMPLED, seed=5)
    assert a == _alone("hello", **SAMPLED, seed=5)
    assert a != _alone("hello", **SAMPLED, seed=6)


def test_more_requests_than_slots_queue_and_reuse_freed_slots() -> None:
    scheduler = _scheduler(slots=2)
    lengths = [3, 9, 5, 7, 2]
    handles = [scheduler.submit(_ids(p), _params(max_new_tokens=n))
               for p, n in zip(PROMPTS, lengths, strict=True)]
    assert scheduler.queued == 5 and scheduler.active == 0
    scheduler.step()
    assert scheduler.active == 2 and scheduler.queued == 3
    while scheduler.pending:
        scheduler.step()
        assert scheduler.active <= 2
    runner = scheduler.runner
    assert all(len(batch) <= 2 for batch in runner.decode_batches)
    assert [len(h.tokens) for h in handles] == lengths
    assert sorted(runner.released) == sorted(runner.prefills) and len(runner.prefills) == 5
    assert runner.history == {}  # every slot given back
    for handle, prompt in zip(handles, PROMPTS, strict=True):
        assert handle.tokens == _alone(prompt, max_new_tokens=len(handle.tokens))


def test_a_finished_sequence_frees_its_slot_for_the_queue_at_once() -> None:
    scheduler = _scheduler(slots=1)
    short = scheduler.submit(_ids("a"), _params(max_new_tokens=2))
    waiting = scheduler.submit(_ids("b"), _params(max_new_tokens=2))
    scheduler.step()   # prefill (token 1) and one decode (token 2): short is done
    assert short.done and scheduler.runner.released == [0]
    assert not waiting.done and scheduler.queued == 1
    scheduler.step()
    assert scheduler.runner.prefills == [0, 0]
    waiting.result()


def test_cancelling_a_running_request_frees_its_slot_and_spares_the_others() -> None:
    scheduler = _scheduler(slots=2)
    keep = scheduler.submit(_ids("hello"), _params())
    drop = scheduler.submit(_ids("the sky"), _params())
    scheduler.step()
    scheduler.step()
    drop.cancel()
    assert drop.done and drop.finish_reason == "cancelled"
    assert 1 in scheduler.runner.released
    with pytest.raises(RequestCancelled):
        drop.result()
    with pytest.raises(RequestCancelled):
        list(drop)
    keep.result()
    assert keep.tokens == _alone("hello")
    drop.cancel()  # twice: nothing


def test_cancelling_a_queued_request_never_runs_it() -> None:
    scheduler = _scheduler(slots=1)
    running = scheduler.submit(_ids("a"), _params(max_new_tokens=3))
    queued = scheduler.submit(_ids("b"), _params())
    scheduler.step()
    queued.cancel()
    assert queued.done and scheduler.queued == 0
    running.result()
    assert scheduler.runner.prefills == [0]


def test_end_of_sequence_ends_the_text_without_emitting_it() -> None:
    prompt = _ids("say")
    scheduler = _scheduler(script={tuple(prompt): _ids("hello world")})
    handle = scheduler.submit(prompt, _params(max_new_tokens=50))
    assert handle.result() == "hello world"
    assert handle.finish_reason == "stop" and EOS not in handle.tokens


@pytest.mark.parametrize("stop, text", [
    (["d ST"], "hello worl"),              # spans three tokens: 'l'+'d', ' ', 'S', 'T'
    (["STOP", "worl"], "hello "),          # the earliest match wins; " wor" is one token
    (["hello"], ""),                       # the very first text
    (["worx", "ST0"], "hello world STOP more"),  # prefixes held back, then let go
    (["more"], "hello world STOP "),
])
def test_stop_strings_across_token_boundaries(stop, text) -> None:
    prompt = _ids("say")
    scheduler = _scheduler(script={tuple(prompt): _ids("hello world STOP more")})
    handle = scheduler.submit(prompt, _params(max_new_tokens=50, stop=stop))
    pieces = list(handle)
    assert "".join(pieces) == text == handle.text
    # By the stop string, or (none matching) by the end-of-sequence id.
    assert handle.finish_reason == "stop"


def test_emoji_split_across_tokens_streams_whole_characters() -> None:
    prompt = _ids("go")
    text = "a😀b é 🇫🇷!"
    scheduler = _scheduler(script={tuple(prompt): _ids(text)})
    handle = scheduler.submit(prompt, _params(max_new_tokens=50))
    pieces = list(handle)
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces)
    assert "😀" in pieces  # four byte tokens, one piece
    assert len(handle.tokens) > len(pieces)


def test_text_cut_mid_character_by_max_new_tokens_ends_with_a_replacement() -> None:
    prompt = _ids("go")
    scheduler = _scheduler(script={tuple(prompt): _ids("a😀")})
    handle = scheduler.submit(prompt, _params(max_new_tokens=3))
    assert handle.result() == "a\ufffd" and handle.finish_reason == "length"


def test_the_context_end_finishes_with_length() -> None:
    scheduler = _scheduler(max_context=10)
    handle = scheduler.submit(_ids("abcdef"), _params(max_new_tokens=100))
    handle.result()
    # 6 prompt positions + 4 fed back fill the 10; the 5th token needs no cache slot.
    assert len(handle.tokens) == 5 and handle.finish_reason == "length"


def test_zero_new_tokens_finishes_at_once() -> None:
    scheduler = _scheduler()
    handle = scheduler.submit(_ids("abc"), _params(max_new_tokens=0))
    assert handle.done and handle.result() == "" and handle.finish_reason == "length"
    assert scheduler.runner.prefills == []


@pytest.mark.parametrize("ids, error, words", [
    ([], VkumdValueError, "the prompt is empty"),
    ([1, VOCAB], VkumdValueError, f"ids[1] is {VOCAB}; the vocabulary has ids 0 to"),
    ([1, -1], VkumdValueError, "ids[1] is -1"),
    (list(range(64)), VkumdValueError, "the prompt is 64 tokens; the context holds 64"),
    ("abc", VkumdTypeError, "must be a list of ints"),
    ([1, 2.0], VkumdTypeError, "ids[1] is float"),
])
def test_bad_prompts_are_refused(ids, error, words) -> None:
    scheduler = _scheduler()
    with pytest.raises(error) as caught:
        scheduler.submit(ids, _params())
    assert words in str(caught.value)
    assert scheduler.pending == 0
    assert scheduler.submit(_ids("ok"), _params(max_new_tokens=2)).result()


def test_a_decode_fault_fails_that_steps_requests_and_the_scheduler_goes_on() -> None:
    scheduler = _scheduler(slots=2)
    a = scheduler.submit(_ids("a"), _params())
    b = scheduler.submit(_ids("b"), _params())
    scheduler.step()
    scheduler.runner.fail_decode = True
    scheduler.step()
    assert a.finish_reason == b.finish_reason == "error"
    with pytest.raises(RuntimeError, match="injected device fault"):
        a.result()
    assert scheduler.runner.history == {}
    scheduler.runner.fail_decode = False
    c = scheduler.submit(_ids("hello"), _params())
    c.result()
    assert c.tokens == _alone("hello")


def test_a_prefill_fault_fails_only_that_request() -> None:
    scheduler = _scheduler(slots=2)
    bad = _ids("bad prompt")
    scheduler.runner.fail_prefill = tuple(bad)
    good = scheduler.submit(_ids("hello"), _params())
    failed = scheduler.submit(bad, _params())
    scheduler.step()
    assert failed.finish_reason == "error" and 1 in scheduler.runner.released
    with pytest.raises(RuntimeError, match="injected prefill fault"):
        list(failed)
    good.result()
    assert good.tokens == _alone("hello")
    again = scheduler.submit(_ids("hello"), _params())  # the freed slot serves again
    assert again.result() == good.text


def test_a_loop_thread_serves_submitters_on_other_threads() -> None:
    want = {p: _alone(p, **SAMPLED, seed=3) for p in PROMPTS}
    scheduler = _scheduler(slots=2)
    scheduler.start()
    results: dict[str, list[int]] = {}
    streamed: dict[str, str] = {}

    def client(prompt: str) -> None:
        handle = scheduler.submit(_ids(prompt), _params(**SAMPLED, seed=3))
        streamed[prompt] = "".join(handle)
        results[prompt] = handle.tokens

    threads = [threading.Thread(target=client, args=(p,)) for p in PROMPTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == want
    assert all(streamed[p] == _decode(want[p]) for p in PROMPTS)
    blocked = scheduler.submit(_ids("x"), _params(max_new_tokens=3))
    assert len(blocked.result(timeout=30)) > 0
    scheduler.close()
    scheduler.close()
    with pytest.raises(VkumdError, match="closed"):
        scheduler.submit(_ids("x"), _params())

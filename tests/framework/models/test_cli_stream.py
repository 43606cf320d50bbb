"""``vkumd embed`` on hostile input: line semantics (newline only), bounded lines, bad encodings,
unwritable outputs and streaming. Subprocess runs carry a timeout and an address-space limit,
so a regression to reading without bound fails instead of filling the machine's memory."""

from __future__ import annotations

import json
import os
import resource
import selectors
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from vkumd.cli import main

from .model_checks import needs_model

ROOT = Path(__file__).resolve().parents[3]
MEMORY_LIMIT = 4 << 30
# Every character str.splitlines() ends a line at, except \n and \r\n themselves.
NOT_NEWLINES = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_embed(*args: str | bytes, stdin: bytes | None = None,
              timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python -m vkumd.cli embed ARGS`` from the repository root."""
    return subprocess.run([sys.executable, "-m", "vkumd.cli", "embed", *args], input=stdin,
                          capture_output=True, timeout=timeout, cwd=ROOT, check=False,
                          preexec_fn=_limit_memory)


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one stderr line of a failed run (exit 2, no traceback)."""
    err = result.stderr.decode("utf-8", "backslashreplace")
    assert result.returncode == 2, (result.returncode, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith("vkumd: "), err
    return err


def jsonl_texts(path: Path) -> list[str]:
    # splitlines(), as many readers do: a record must not break at U+2028 and the like.
    return [json.loads(line)["text"] for line in path.read_text("utf-8").splitlines()]


@needs_model
def test_only_newline_ends_a_line(tmp_path: Path, encoder) -> None:
    """\\f, \\x1c, U+2028 and the rest of str.splitlines()' separators stay in their line; \\r\\n
    is one newline; blank lines count; the last line needs no newline."""
    texts = [f"a{NOT_NEWLINES}b", "c\fd", "", "e\u2028f\x1cg", "last"]
    source = tmp_path / "in.txt"
    source.write_bytes(("\r\n".join(texts[:3]) + "\n" + "\n".join(texts[3:])).encode("utf-8"))
    out = tmp_path / "e.jsonl"
    assert main(["embed", "--file", str(source), "--out", str(out)]) == 0
    assert jsonl_texts(out) == texts
    rows = np.array([json.loads(line)["embedding"] for line in out.read_text().splitlines()])
    np.testing.assert_allclose(rows, encoder.encode(texts), atol=1e-6)


@needs_model
def test_many_chunks_stream_to_the_same_rows(tmp_path: Path, encoder, capsys) -> None:
    """Read and embedded a chunk at a time, .npy and .jsonl hold the rows the API gives."""
    from vkumd.cli_embed import CHUNK_BATCHES

    texts = [f"sentence number {i} " * (1 + i % 5) for i in range(3 * CHUNK_BATCHES + 1)]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    want = encoder.encode(texts)
    for name in ("e.npy", "e.jsonl"):
        assert main(["embed", "--file", str(source), "--out", str(tmp_path / name),
                     "--batch-size", "1"]) == 0
    got = np.load(tmp_path / "e.npy")
    assert got.dtype == np.float32 and got.shape == (len(texts), 384)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert jsonl_texts(tmp_path / "e.jsonl") == texts
    assert f"wrote {len(texts)} embeddings of 384 values" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl", "e.npy", "in.txt"]


@needs_model
def test_rows_come_out_while_input_still_arrives() -> None:
    """stdin (``--file -``) is embedded as lines arrive: the rows of the lines written so far
    are on stdout while the writer still holds the pipe open."""
    proc = subprocess.Popen([sys.executable, "-m", "vkumd.cli", "embed", "--file", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, preexec_fn=_limit_memory)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"line 0\nline 1\nline 2\n")
        proc.stdin.flush()
        got = b""
        deadline = time.monotonic() + 180
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while got.count(b"\n") < 3 and time.monotonic() < deadline:
                if sel.select(timeout=1):
                    piece = os.read(proc.stdout.fileno(), 65536)
                    assert piece, proc.stderr.read() if proc.stderr else ""
                    got += piece
        lines = got.decode().splitlines()
        assert [line.split()[0] for line in lines] == ["0", "1", "2"]
        assert proc.poll() is None  # still waiting for more input
        proc.stdin.write(b"the end")
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
        assert proc.stdout.read().decode().endswith('"the end"\n')
    finally:
        proc.kill()
        proc.wait()


def test_the_reader_knows_when_the_next_line_would_wait() -> None:
    from vkumd.cli_input import LineReader

    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb", buffering=0) as stream:
        reader = LineReader(stream, "pipe", 100)
        lines = iter(reader)
        os.write(write_end, b"one\ntwo\r\nthr")
        assert reader.ready()
        assert [next(lines).text, next(lines).text] == ["one", "two"]
        assert not reader.ready()  # "thr" has no newline yet and the writer is open
        os.write(write_end, b"ee\n\xe2\x80\xa8\f")
        assert reader.ready()
        assert next(lines).text == "three"
        os.close(write_end)
        assert [s.text for s in lines] == ["\u2028\f"]
        assert reader.ready() and (reader.lines, reader.bytes_read) == (4, 19)


def test_dev_zero_is_a_line_length_error() -> None:
    """An endless device stops at the line bound: read in a bounded way, not to the end."""
    assert "line 1 is longer than 1048576 bytes (--max-line-bytes)" in error_line(
        run_embed("--file", "/dev/zero", timeout=120))


@needs_model
def test_a_line_over_the_byte_bound_is_an_error_naming_it(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("fine\n" + "word " * ((1 << 20) // 5 + 1) + "\nnever read\n")
    assert "line 2 is longer than 1048576 bytes" in error_line(
        run_embed("--file", str(source), "--out", str(tmp_path / "e.npy")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@needs_model
def test_max_line_bytes_counts_utf8_bytes_without_the_newline(tmp_path: Path, capsys) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes("ü12345678\r\n0123456789\n".encode())  # 10 bytes each
    assert main(["embed", "--max-line-bytes", "10", "--file", str(source)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["embed", "--max-line-bytes", "9", "--file", str(source)]) == 2
    assert "line 1 is longer than 9 bytes (--max-line-bytes)" in capsys.readouterr().err
    assert main(["embed", "--max-line-bytes", "3", "abcd"]) == 2
    assert "argument 1 is 4 bytes, over the limit of 3" in capsys.readouterr().err
    assert main(["embed", "--max-line-bytes", "0", "a"]) == 2
    assert "--max-line-bytes 0: it must be >= 1" in capsys.readouterr().err


@needs_model
def test_sentences_past_the_token_limit_are_truncated_with_a_note(tmp_path: Path,
                                                                  encoder, capsys) -> None:
    long = "word " * 400
    source = tmp_path / "in.txt"
    source.write_text(f"short\n{long}\n{'just right ' * 10}\n")
    assert main(["embed", "--file", str(source), "--out", str(tmp_path / "e.npy")]) == 0
    err = capsys.readouterr().err
    assert ("note: 1 of 3 sentences were longer than the model's limit of "
            f"{encoder.max_seq_length} tokens") in err
    assert "(line 2)" in err
    np.testing.assert_allclose(np.load(tmp_path / "e.npy")[1], encoder.encode([long])[0],
                               atol=1e-6)


def test_a_non_utf8_argument_is_an_error() -> None:
    assert ("argument 2 is not valid UTF-8 (byte 0xe9 at byte offset 3)"
            in error_line(run_embed("fine", b"caf\xe9")))


@needs_model
def test_a_non_utf8_line_is_an_error_naming_it(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"one\ntwo\nthr\xffee\n")
    assert "line 3 is not valid UTF-8 (byte 0xff at byte offset 3)" in error_line(
        run_embed("--file", str(source)))


@pytest.mark.parametrize("out", ["missing/e.npy", "plain/e.jsonl", "adir"])
def test_an_unwritable_out_is_refused_before_the_model_loads(tmp_path: Path, out: str,
                                                             monkeypatch, capsys) -> None:
    from vkumd.framework.models.encoder import SentenceEncoder

    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the model loaded before --out was checked")

    monkeypatch.setattr(SentenceEncoder, "from_pretrained", never)
    (tmp_path / "plain").write_text("a file, not a directory")
    (tmp_path / "adir").mkdir()
    source = tmp_path / "in.txt"
    source.write_text("a\nb\n")
    assert main(["embed", "--file", str(source), "--out", str(tmp_path / out)]) == 2
    assert f"embed --out {tmp_path / out}:" in capsys.readouterr().err


def test_a_failed_run_leaves_no_partial_file_and_keeps_the_old_one(tmp_path: Path, capsys,
                                                                    monkeypatch) -> None:
    """The rows go to a temporary file renamed at the end: a run failing part way (here at
    its second chunk) removes it and leaves an existing --out as it was."""
    from vkumd import cli_embed

    calls = []

    class Encoder:
        max_seq_length = 256
        files = SimpleNamespace(tokenizer=SimpleNamespace(
            encode_batch=lambda texts: [SimpleNamespace(overflowing=[]) for _ in texts]))

        def encode(self, texts: list[str], **_kwargs: object) -> np.ndarray:
            calls.append(len(texts))
            if len(calls) == 2:
                from vkumd.errors import VkumdError
                raise VkumdError("the device failed")
            return np.ones((len(texts), 8), np.float32)

    class Loaded:
        def __enter__(self) -> Encoder:
            return Encoder()

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(cli_embed, "_encoder", lambda _args: Loaded())
    source = tmp_path / "in.txt"
    source.write_text("line\n" * 4 * cli_embed.CHUNK_BATCHES)
    for name in ("e.npy", "e.jsonl"):
        calls.clear()
        (tmp_path / name).write_text("old contents")
        assert main(["embed", "--file", str(source), "--out", str(tmp_path / name),
                     "--batch-size", "1"]) == 2
        assert calls == [cli_embed.CHUNK_BATCHES] * 2
        assert "the device failed" in capsys.readouterr().err
        assert (tmp_path / name).read_text() == "old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl", "e.npy", "in.txt"]


def test_an_empty_file_or_a_directory_is_an_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    assert main(["embed", "--file", str(tmp_path / "empty.txt"), "--out",
                 str(tmp_path / "e.npy")]) == 2
    assert "it has no lines" in capsys.readouterr().err
    assert main(["embed", "--file", str(tmp_path)]) == 2
    assert "cannot read it (it is a directory)" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]


@needs_model
def test_a_closed_stdout_ends_quietly_with_141(tmp_path: Path) -> None:
    """``vkumd embed ... | head -1``: no traceback when the reader goes away."""
    source = tmp_path / "in.txt"
    source.write_text("a sentence\n" * 400)
    proc = subprocess.Popen([sys.executable, "-m", "vkumd.cli", "embed", "--batch-size", "1",
                             "--file", str(source)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, preexec_fn=_limit_memory)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b"0 [")
        proc.stdout.close()
        assert proc.wait(timeout=180) == 141
        assert proc.stderr.read() == b""
    finally:
        proc.kill()
        proc.wait()


def test_an_interrupt_exits_130(monkeypatch, capsys) -> None:
    from vkumd import cli_embed

    def interrupted(_path: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_embed, "open_input", interrupted)
    assert main(["embed", "--file", "in.txt"]) == 130
    assert capsys.readouterr().err == "vkumd: interrupted\n"


def test_progress_counts_sentences_and_bytes() -> None:
    import io

    from vkumd.cli_input import StreamProgress

    stream = io.StringIO()
    quiet = StreamProgress(True, 4096, stream=stream, after_s=60)
    quiet.update(10, 1024)
    quiet.close()
    assert stream.getvalue() == ""  # short runs draw nothing
    shown = StreamProgress(True, 4096, stream=stream, after_s=0)
    shown.update(10, 1024)
    shown.close()
    assert stream.getvalue().startswith("\r10 sentences, 25% of 4.0 KiB, ")
    assert stream.getvalue().endswith("/s \n")


def test_help_documents_lines_limits_and_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["embed", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("A line ends at \\n (\\r\\n counts as one newline)", "U+2028",
                   "--max-line-bytes", "truncated to it, as sentence-transformers does",
                   "no partial file", "exit status: 0 done; 2 an error", "130 interrupted"):
        assert phrase in text, phrase

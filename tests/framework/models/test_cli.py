"""``vkumd embed``: through the CLI's main with argv, and once as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vkumd.cli import main

from .model_checks import needs_model

pytestmark = needs_model

TEXTS = ["A man is eating food.", "Ein Mann isst.", "", "😀 emoji only"]


def test_sentences_print_one_compact_line_each(capsys) -> None:
    assert main(["embed", "--no-progress", "hello world", "second one"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("0 [-0.0345, +0.0310, +0.0067, +0.0261, ...")
    assert lines[0].endswith('(384) "hello world"')


def test_file_to_npy_and_jsonl_match_the_api(tmp_path: Path, encoder, capsys) -> None:
    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    want = encoder.encode(TEXTS)
    assert main(["embed", "--file", str(source), "--out", str(tmp_path / "e.npy"),
                 "--batch-size", "2"]) == 0
    got = np.load(tmp_path / "e.npy")
    assert got.dtype == np.float32 and got.shape == (4, 384)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert main(["embed", "--file", str(source), "--out", str(tmp_path / "e.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == TEXTS
    np.testing.assert_allclose(np.array([r["embedding"] for r in rows]), want, atol=1e-6)
    assert "wrote 4 embeddings of 384 values" in capsys.readouterr().err


def test_similarity_prints_the_cosine(encoder, capsys) -> None:
    assert main(["embed", "--similarity", TEXTS[0], TEXTS[1]]) == 0
    a, b = encoder.encode(TEXTS[:2]).astype(np.float64)
    assert float(capsys.readouterr().out) == pytest.approx(a @ b, abs=2e-6)


def test_float16_option(capsys) -> None:
    assert main(["embed", "--dtype", "float16", "--similarity", "cat", "cat"]) == 0
    assert float(capsys.readouterr().out) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("argv, text", [
    (["--similarity", "only one"], "exactly two sentences, got 1"),
    ([], "give sentences as arguments or with --file"),
    (["--out", "x.csv", "a"], "must end in .npy or .jsonl"),
    (["--file", "/no/such/file.txt"], "cannot read it"),
    (["--batch-size", "0", "a"], "--batch-size 0"),
    (["--model", "no-such-model", "a"], "'no-such-model': no such directory"),
])
def test_bad_arguments_exit_2_with_a_message(argv, text, capsys) -> None:
    assert main(["embed", *argv]) == 2
    assert text in capsys.readouterr().err


def test_the_installed_command_runs(tmp_path: Path) -> None:
    vkumd = Path(sys.executable).with_name("vkumd")
    command = [str(vkumd)] if vkumd.exists() else [sys.executable, "-m", "vkumd.cli"]
    result = subprocess.run([*command, "embed", "--no-progress", "--similarity", "a dog",
                             "a puppy"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert 0.5 < float(result.stdout) < 1.0

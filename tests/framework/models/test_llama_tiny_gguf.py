"""LlamaRunner on a tiny random GGUF (tests/framework/models/tiny_llama.py) in each block type,
quantized weights kept as blocks on the device and dequantised on load, against the float64
reference on the stored (dequantised) weights."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.testing.numerics import rel_error

from .llama_reference import greedy, reference_logits
from .tiny_llama import tiny_config, write_tiny_gguf

pytest.importorskip("vkumd.framework.models.llama_runner")
from vkumd.framework import ops  # noqa: E402
from vkumd.framework.models.gguf import GGUFFile  # noqa: E402
from vkumd.framework.models.llama_config import config_from_gguf  # noqa: E402
from vkumd.framework.models.llama_runner import LlamaRunner  # noqa: E402
from vkumd.framework.models.llama_weights import load_gguf_weights  # noqa: E402

STEPS = 8
PROMPT = [5, 40, 41, 99, 7, 120, 3]


def _load(tmp_path, qtype: str, **changes):
    path = tmp_path / f"tiny-{qtype}.gguf"
    stored = write_tiny_gguf(path, tiny_config(**changes), qtype=qtype, seed=11)
    with GGUFFile(path) as f:
        config = config_from_gguf(f)
        weights = load_gguf_weights(f, config)
    return config, weights, stored


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "F16"])
@pytest.mark.parametrize("compute", ["quantized", "float32"])
def test_tiny_gguf_greedy_matches_float64(ctx, tmp_path, qtype, compute):
    if compute == "quantized" and qtype != "F16" and not hasattr(ops, "qmatmul"):
        pytest.skip("ops.qmatmul is not merged yet")
    config, weights, stored = _load(tmp_path, qtype)
    want_tokens = greedy(config, stored, PROMPT, STEPS)
    want_first = reference_logits(config, stored, PROMPT)[-1]
    with LlamaRunner(ctx, config, weights, slots=2, max_context=64, cache_dtype="float32",
                     compute=compute) as runner:
        logits = runner.prefill(1, PROMPT)
        assert rel_error(logits, want_first) < 1e-4
        tokens = [int(np.argmax(logits))]
        for _ in range(STEPS - 1):
            tokens.append(int(np.argmax(runner.decode({1: tokens[-1]})[1])))
        assert tokens == want_tokens
        if compute == "quantized" and qtype != "F16":
            assert runner.weight_bytes < sum(w.nbytes for w in stored.values()) / 4


def test_traced_qmatmul_takes_no_forced_path():
    """The runner's prefill traces qmatmul; a forced kernel path cannot be recorded."""
    from vkumd.framework.graph import TracedTensor, TraceError, Tracer

    tracer = Tracer("qmatmul_path")
    x = TracedTensor(tracer.input("x", (2, 32), "float32"), tracer)
    w = TracedTensor(tracer.weight("w", np.zeros((4, 34), np.uint8)), tracer)
    assert ops.qmatmul(x, w, qtype="Q8_0", in_features=32).shape == (2, 4)
    with pytest.raises(TraceError, match="drop path="):
        ops.qmatmul(x, w, qtype="Q8_0", in_features=32, path="vec")

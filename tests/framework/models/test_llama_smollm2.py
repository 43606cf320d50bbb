"""The float64 reference on the real SmolLM2-135M-Instruct GGUF: the loader, the adjacent-pair
RoPE convention and the tokenizer together must make the model answer sensibly."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.models.llama_config import config_from_gguf
from vkumd.framework.models.llama_weights import load_gguf_weights

from .llama_reference import dequantized, forward, top_margin
from .smollm2 import need_smollm2


def test_reference_completes_a_fact() -> None:
    pytest.importorskip("tokenizers", reason="the tokenizers package is not installed")
    from vkumd.framework.models.llama_tokenizer import tokenizer_from_gguf

    with GGUFFile(need_smollm2()) as f:
        config = config_from_gguf(f)
        weights = dequantized(load_gguf_weights(f, config))
        tok = tokenizer_from_gguf(f)
    prompt = ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
              "<|im_start|>assistant\nThe capital of France is")
    logits = forward(config, weights, tok.encode(prompt).ids, last_only=True)[-1]
    assert logits.shape == (49152,) and np.all(np.isfinite(logits))
    assert tok.decode([int(np.argmax(logits))]) == " Paris"
    assert top_margin(logits) > 1.0

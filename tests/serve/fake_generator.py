"""A text generator without a device or a model file, for the server's generation tests:
``vkumd serve --generate-model tests.serve.fake_generator:make`` (run from the repository).

The generation logic is the real one (``vkumd.models.TextGenerator`` and its ``Scheduler``:
continuous batching, sampling, detokenizing, stop strings); only the runner is numpy. Its
greedy continuation of any prompt is :data:`TEXT` over and over, one byte a token (so
multi-byte characters span tokens), except after a prompt holding ``[random]``: then the
logits are noise and the sampler's seed decides. A prompt holding ``[eos]`` ends after five
tokens with the end-of-sequence id, one holding ``[fault]`` makes the decode step raise.
Each decode step sleeps :data:`STEP_S`, as a device would take time, so concurrent requests
overlap.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

TEXT = "Hello from the fake model, café ☕ and more words. "
STEP_S = float(os.environ.get("VKUMD_FAKE_STEP_S", "0.01"))
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def byte_tokenizer() -> Any:
    """Byte-level BPE with no merges: one token a byte, then the special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    return tokenizer


class Config:
    """The ``LlamaConfig`` fields generation reads."""

    def __init__(self, tokenizer: Any, context_length: int) -> None:
        self.vocab_size = tokenizer.get_vocab_size()
        self.eos_ids = (tokenizer.token_to_id("<|im_end|>"),)
        self.bos_id = None
        self.context_length = context_length
        self.chat_template = None  # ChatML


class SlowRunner:
    """``LlamaRunner``'s interface; logits favour the next byte of :data:`TEXT`.

    Thread-checked: every call must come from one thread (the server's loop thread)."""

    def __init__(self, tokenizer: Any, slots: int, max_context: int) -> None:
        self.vocab_size = tokenizer.get_vocab_size()
        self.slots = slots
        self.max_context = max_context
        self.eos = tokenizer.token_to_id("<|im_end|>")
        self.text_ids = [tokenizer.token_to_id(s) for s in _symbols(TEXT.encode())]
        self.history: dict[int, list[int]] = {}
        self.prompt_text: dict[int, str] = {}
        self.plen: dict[int, int] = {}
        self.decode_text = tokenizer.decode
        self.thread: threading.Thread | None = None

    def _logits(self, slot: int) -> np.ndarray:
        ids = self.history[slot]
        digest = hashlib.sha256(np.asarray(ids, np.int64).tobytes()).digest()
        logits = np.random.default_rng(int.from_bytes(digest[:8], "little")).standard_normal(
            self.vocab_size).astype(np.float32)
        produced = len(ids) - self.plen[slot]
        if "[eos]" in self.prompt_text[slot] and produced >= 5:
            logits[self.eos] += 100
        elif "[random]" not in self.prompt_text[slot]:
            logits[self.text_ids[produced % len(self.text_ids)]] += 100
        return logits

    def _check_thread(self) -> None:
        if self.thread is None:
            self.thread = threading.current_thread()
        assert self.thread is threading.current_thread(), "the runner is used from two threads"

    def prefill(self, slot: int, ids: Sequence[int]) -> np.ndarray:
        self._check_thread()
        assert 0 <= slot < self.slots and slot not in self.history, f"slot {slot} is busy"
        time.sleep(STEP_S / 2)
        self.history[slot] = list(ids)
        self.plen[slot] = len(ids)
        self.prompt_text[slot] = self.decode_text(list(ids))
        return self._logits(slot)

    def decode(self, tokens: dict[int, int]) -> dict[int, np.ndarray]:
        self._check_thread()
        time.sleep(STEP_S)
        if any("[fault]" in self.prompt_text[s] for s in tokens):
            raise RuntimeError("injected device fault")
        for slot, token in tokens.items():
            self.history[slot].append(int(token))
        return {slot: self._logits(slot) for slot in tokens}

    def release(self, slot: int) -> None:
        self.history.pop(slot)

    def close(self) -> None:
        pass


def _symbols(data: bytes) -> list[str]:
    from tokenizers import pre_tokenizers

    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return [s for piece, _ in pre.pre_tokenize_str(data.decode()) for s in piece]


def make(slots: int = 4, max_context: int = 256) -> Any:
    """The generator ``--generate-model tests.serve.fake_generator:make`` loads: the real
    ``TextGenerator`` over :class:`SlowRunner`."""
    from vkumd.framework.models.generation import TextGenerator

    tokenizer = byte_tokenizer()
    return TextGenerator(SlowRunner(tokenizer, slots, max_context), tokenizer,
                         Config(tokenizer, max_context))


def available() -> str | None:
    """Why the generation tests cannot run here (the scheduler not there yet), or None."""
    try:
        import tokenizers  # noqa: F401

        from vkumd.framework.models import generation  # noqa: F401
    except ImportError as exc:
        return (f"{exc}: the generation tests need vkumd.framework.models.generation (issue "
                "27's TextGenerator) and tokenizers")
    return None

"""A numpy stand-in for the device model, and a small byte-level BPE tokenizer, so the
generation logic is tested without a device or a model file.

:class:`FakeRunner` has ``LlamaRunner``'s interface. Its logits for a slot are a function of
that slot's whole history (the prompt and every token fed since), drawn from a generator
seeded by a hash of it, so a mixed-up slot, a lost token or a cross-talk between sequences
changes what comes next. ``script`` forces continuations: prompt ids -> the ids to produce
(then the end-of-sequence id).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or")]


def byte_tokenizer() -> Tokenizer:
    """Byte-level BPE: the 256 byte symbols (ids 0-255), a few merges (``hell``, `` wor``),
    then the special tokens."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    for left, right in MERGES:
        vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(SPECIALS)
    return tokenizer


class FakeConfig:
    """The few ``LlamaConfig`` fields generation reads."""

    def __init__(self, tokenizer: Tokenizer, context_length: int = 64) -> None:
        self.vocab_size = tokenizer.get_vocab_size()
        self.eos_ids = (tokenizer.token_to_id("<|im_end|>"),
                        tokenizer.token_to_id("<|endoftext|>"))
        self.bos_id = None
        self.context_length = context_length
        self.chat_template = None


class FakeRunner:
    """``LlamaRunner``'s interface over a history-hashing logits function."""

    def __init__(self, vocab_size: int, slots: int = 4, max_context: int = 64,
                 script: dict[tuple[int, ...], Sequence[int]] | None = None,
                 eos_id: int = 0) -> None:
        self.vocab_size = vocab_size
        self.slots = slots
        self.max_context = max_context
        self.script = {tuple(k): list(v) for k, v in (script or {}).items()}
        self.eos_id = eos_id
        self.history: dict[int, list[int]] = {}
        self.prompts: dict[int, tuple[int, ...]] = {}
        self.decode_batches: list[list[int]] = []
        self.prefills: list[int] = []
        self.released: list[int] = []
        self.fail_decode = False
        self.fail_prefill: tuple[int, ...] | None = None
        self.closed = False

    def _logits(self, slot: int) -> np.ndarray:
        ids = self.history[slot]
        digest = hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        logits = rng.standard_normal(self.vocab_size).astype(np.float32) * 3
        prompt = self.prompts[slot]
        if prompt in self.script:
            produced = len(ids) - len(prompt)
            wanted = self.script[prompt]
            logits[wanted[produced] if produced < len(wanted) else self.eos_id] += 1000
        return logits

    def prefill(self, slot: int, ids: Sequence[int]) -> np.ndarray:
        assert 0 <= slot < self.slots and slot not in self.history, f"slot {slot} is busy"
        assert 0 < len(ids) <= self.max_context
        self.history[slot] = list(ids)
        self.prompts[slot] = tuple(ids)
        self.prefills.append(slot)
        if tuple(ids) == self.fail_prefill:  # the slot was written in part, as on a fault
            raise RuntimeError("injected prefill fault")
        return self._logits(slot)

    def decode(self, tokens: dict[int, int]) -> dict[int, np.ndarray]:
        if self.fail_decode:
            raise RuntimeError("injected device fault")
        self.decode_batches.append(sorted(tokens))
        out = {}
        for slot, token in tokens.items():
            assert slot in self.history, f"decode of free slot {slot}"
            assert len(self.history[slot]) < self.max_context, "decode past the context"
            self.history[slot].append(int(token))
            out[slot] = self._logits(slot)
        return out

    def release(self, slot: int) -> None:
        assert slot in self.history, f"release of free slot {slot}"
        del self.history[slot]
        del self.prompts[slot]
        self.released.append(slot)

    def length(self, slot: int) -> int:
        return len(self.history.get(slot, ()))

    def close(self) -> None:
        self.closed = True

"""A Llama-family model's tokenizer and chat template.

From a GGUF file the tokenizer is rebuilt from the vocabulary and merges it carries (byte-level
BPE, as llama.cpp tokenizes: the file's ``tokenizer.ggml.pre`` picks the pre-tokenizer, e.g.
SmolLM's digits one by one, then GPT-2's pattern); control tokens become special tokens, so
``<|im_start|>`` in a rendered chat is one token. The tokenizer adds no BOS itself: the caller
puts :attr:`LlamaConfig.bos_id` first when it is not None.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.models.errors import ModelFileError, UnsupportedModelError
from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.models.llama_config import LlamaConfig
from vkumd.framework.untrusted import read_regular

MAX_TOKENIZER_BYTES = 64 * 2**20
ROLES = ("system", "user", "assistant", "tool")
# GPT-2's pre-tokenizer pattern (ByteLevel's own, with use_regex=True).
_GPT2 = None
# Llama 3's pattern: up to three digits at a time.
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
           r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> (an isolating pattern applied first, or None; the pattern after).
PRE_TOKENIZERS: dict[str, tuple[str | None, str | None]] = {
    "default": (None, _GPT2), "gpt2": (None, _GPT2), "gpt-2": (None, _GPT2),
    "smollm": (r"\p{N}", _GPT2), "starcoder": (r"\p{N}", _GPT2),
    "refact": (r"\p{N}", _GPT2), "codeshell": (r"\p{N}", _GPT2),
    "llama-bpe": (None, _LLAMA3), "llama3": (None, _LLAMA3),
}
_CONTROL, _USER_DEFINED = 3, 4


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ModelFileError("a language model's tokenizer needs the tokenizers package: "
                             "`pip install --no-deps tokenizers` (or vkumd[models])") from None
    return tokenizers


def tokenizer_from_vocab(tokens: Sequence[str], token_types: Sequence[int] | None,
                         merges: Sequence[str], pre: str = "smollm",
                         source: str = "the vocabulary") -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` from a vocabulary and its merges.

    Args:
        tokens: the token strings, by id (byte-level alphabet: ``Ġ`` for a space).
        token_types: llama.cpp's token types by id (3 control, 4 user-defined become special
            tokens), or None for none.
        merges: ``"left right"`` strings, highest priority first.
        pre: the pre-tokenizer's name (a key of :data:`PRE_TOKENIZERS`).
        source: where they came from, for the messages.

    Returns:
        The tokenizer (no padding, no truncation, no BOS/EOS added).

    Raises:
        UnsupportedModelError: ``pre`` is not a known pre-tokenizer.
        ModelFileError: a merge is not two tokens of the vocabulary, or tokenizers is
            missing.
    """
    tk = _tokenizers()
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedModelError(f"{source}: pre-tokenizer {pre!r} is not supported; "
                                    f"vkumd knows {', '.join(sorted(PRE_TOKENIZERS))}")
    vocab: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        vocab.setdefault(tok, i)  # the first of duplicates, as llama.cpp keeps
    pairs = []
    for i, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2 or parts[0] not in vocab or parts[1] not in vocab:
            raise ModelFileError(f"{source}: merge {i} ({merge!r}) is not two tokens of the "
                                 "vocabulary")
        pairs.append((parts[0], parts[1]))
    try:
        tokenizer = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception
        raise ModelFileError(f"{source}: tokenizers refused the vocabulary ({exc})") from None
    first, pattern = PRE_TOKENIZERS[pre]
    steps = []
    if first is not None:
        steps.append(tk.pre_tokenizers.Split(tk.Regex(first), behavior="isolated"))
    if pattern is not None:
        steps.append(tk.pre_tokenizers.Split(tk.Regex(pattern), behavior="isolated"))
    steps.append(tk.pre_tokenizers.ByteLevel(add_prefix_space=False,
                                             use_regex=pattern is None))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(steps)
    tokenizer.decoder = tk.decoders.ByteLevel()
    specials = [tok for i, tok in enumerate(tokens)
                if token_types is not None and i < len(token_types)
                and token_types[i] in (_CONTROL, _USER_DEFINED)]
    tokenizer.add_special_tokens([tk.AddedToken(t, special=True, normalized=False)
                                  for t in specials])
    return tokenizer


def tokenizer_from_gguf(gguf: GGUFFile) -> Any:
    """The tokenizer a GGUF file carries (``tokenizer.ggml.*``).

    Args:
        gguf: the open file.

    Returns:
        A ``tokenizers.Tokenizer``.

    Raises:
        UnsupportedModelError: the vocabulary is not byte-level BPE (``tokenizer.ggml.model``
            other than ``gpt2``) or its pre-tokenizer is unknown.
        ModelFileError: the tokens or merges are missing or malformed; tokenizers is missing.
    """
    meta, source = gguf.metadata, str(gguf.path)
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise UnsupportedModelError(f"{source}: tokenizer.ggml.model is {model!r}; vkumd "
                                    "reads byte-level BPE vocabularies ('gpt2') only")
    tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
    types = meta.get("tokenizer.ggml.token_type")
    for key, value in (("tokens", tokens), ("merges", merges)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ModelFileError(f"{source}: tokenizer.ggml.{key} is missing or not a list "
                                 "of strings")
    if types is not None and (not isinstance(types, list) or len(types) != len(tokens)
                              or not all(isinstance(t, int) for t in types)):
        raise ModelFileError(f"{source}: tokenizer.ggml.token_type is not one integer per "
                             f"token ({len(tokens)})")
    pre = meta.get("tokenizer.ggml.pre", "default")
    return tokenizer_from_vocab(tokens, types, merges, str(pre), source)


def load_hf_tokenizer(path: str | os.PathLike[str]) -> Any:
    """A Hugging Face model directory's ``tokenizer.json``, with its padding and truncation
    turned off.

    Raises:
        ModelFileError: the file is missing, too large, or tokenizers cannot read it.
    """
    tk = _tokenizers()
    file = Path(path) / "tokenizer.json"
    data = read_regular(file, MAX_TOKENIZER_BYTES)
    try:
        tokenizer = tk.Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception
        raise ModelFileError(f"{file}: tokenizers cannot read it ({exc})") from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _check_messages(messages: Any) -> list[dict[str, str]]:
    if not isinstance(messages, (list, tuple)):
        raise VkumdTypeError(f"chat messages must be a list of {{'role', 'content'}} dicts, "
                             f"not {type(messages).__name__}")
    if not messages:
        raise VkumdValueError("chat messages are empty; give at least one message")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise VkumdTypeError(f"chat message {i} is a {type(msg).__name__}; each message "
                                 "is a dict with 'role' and 'content'")
        for key in ("role", "content"):
            if key not in msg:
                raise VkumdValueError(f"chat message {i} has no {key!r}; each message is a "
                                      "dict with 'role' and 'content'")
            if not isinstance(msg[key], str):
                raise VkumdTypeError(f"chat message {i}'s {key!r} is a "
                                     f"{type(msg[key]).__name__}; it must be a string")
        if msg["role"] not in ROLES:
            raise VkumdValueError(f"chat message {i} has role {msg['role']!r}; use one of "
                                  f"{', '.join(ROLES)}")
    return [dict(m) for m in messages]


def chatml(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """The ChatML rendering of ``messages`` (the fallback chat template)."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def _raise(message: str) -> None:
    raise VkumdValueError(f"the chat template refused the messages: {message}")


def render_chat(config: LlamaConfig, messages: Sequence[dict[str, str]],
                add_generation_prompt: bool = True, **variables: Any) -> str:
    """Render ``messages`` through the model's chat template.

    The template runs in jinja2's immutable sandbox. Without a template in the model, or
    without jinja2 installed and a ChatML template, ChatML is used.

    Args:
        config: the model's config (its ``chat_template``).
        messages: ``[{"role": ..., "content": ...}, ...]``, roles from :data:`ROLES`.
        add_generation_prompt: end with the assistant's turn opened.
        **variables: more template variables (``bos_token``, ``eos_token``: empty strings
            unless given).

    Returns:
        The prompt text (to tokenize with special tokens recognised).

    Raises:
        VkumdTypeError: ``messages`` is not a list of dicts of strings.
        VkumdValueError: a message lacks a role or content, has an unknown role, or the
            template refuses or fails on them; the model's template needs jinja2 and it is
            not installed.
    """
    msgs = _check_messages(messages)
    template = config.chat_template
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        if template is None or "<|im_start|>" in template:
            return chatml(msgs, add_generation_prompt)
        raise VkumdValueError("the model's chat template needs jinja2: `pip install jinja2` "
                              "(or vkumd[models])") from None
    if template is None:
        return chatml(msgs, add_generation_prompt)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise
    context = {"bos_token": "", "eos_token": "", **variables, "messages": msgs,
               "add_generation_prompt": add_generation_prompt}
    try:
        return env.from_string(template).render(**context)
    except TemplateError as exc:
        raise VkumdValueError(f"the model's chat template failed: {exc}") from None


__all__ = ["PRE_TOKENIZERS", "ROLES", "chatml", "load_hf_tokenizer", "render_chat",
           "tokenizer_from_gguf", "tokenizer_from_vocab"]

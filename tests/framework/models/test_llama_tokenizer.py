"""The GGUF tokenizer against a byte-level BPE written here from the merges' ranks (GPT-2's
pre-tokenizer pattern hand-coded over Unicode categories), on the tiny model and SmolLM2."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tokenizers", reason="the tokenizers package is not installed "
                    "(pip install --no-deps tokenizers)")

from vkumd.errors import VkumdTypeError, VkumdValueError  # noqa: E402
from vkumd.framework.models.errors import ModelFileError, UnsupportedModelError  # noqa: E402
from vkumd.framework.models.gguf import GGUFFile  # noqa: E402
from vkumd.framework.models.llama_config import config_from_gguf  # noqa: E402
from vkumd.framework.models.llama_tokenizer import (  # noqa: E402
    chatml,
    load_hf_tokenizer,
    render_chat,
    tokenizer_from_gguf,
)

from .smollm2 import need_smollm2  # noqa: E402
from .tiny_llama import (  # noqa: E402
    byte_chars,
    tiny_config,
    write_tiny_gguf,
    write_tiny_hf,
)

TEXTS = ["Hello world", "12345", " 2024", "in 2024, the year", "  two  spaces   three",
         "tab\there\n\nnew lines \n", "café naïve résumé", "emoji 🎉🦙 and 👍🏽", "日本語テキスト",
         "def f(x):\n    return x**2  # it's\n", "a\u00a0b", "don't we'll they've I'M",
         "x=1;y=-2.5e3", "hello the assistant user system"]


def _cat(ch: str) -> str:
    c = unicodedata.category(ch)[0]
    return "L" if c == "L" else "N" if c == "N" else "S" if ch.isspace() else "O"


def gpt2_pieces(text: str) -> list[str]:
    """GPT-2's pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|
    \\s+(?!\\S)|\\s+) by hand."""
    out, i, n = [], 0, len(text)
    while i < n:
        rest = text[i:]
        hit = next((c for c in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
                    if rest.startswith(c)), None)
        if hit:
            out.append(hit)
            i += len(hit)
            continue
        start = i + 1 if text[i] == " " and i + 1 < n and _cat(text[i + 1]) != "S" else i
        kind = _cat(text[start])
        if kind in "LNO":
            j = start
            while j < n and _cat(text[j]) == kind:
                j += 1
            out.append(text[i:j])
            i = j
            continue
        j = i
        while j < n and _cat(text[j]) == "S":
            j += 1
        take = j - i if j == n or j - i == 1 else j - i - 1
        out.append(text[i:i + take])
        i += take
    return out


class Vocab:
    def __init__(self, tokens: list[str], merges: list[str]) -> None:
        self.ids = {t: i for i, t in reversed(list(enumerate(tokens)))}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.merges = merges


def bpe_ids(text: str, v: Vocab, specials: list[str]) -> list[int]:
    """Byte-level BPE: digits split off one by one, then GPT-2's pieces, then merges by
    rank (lowest first, every occurrence of the pair left to right)."""
    vocab, ranks, merges = v.ids, v.ranks, v.merges
    chars = byte_chars()
    for special in specials:  # longest first would matter only for overlapping ones
        if special in text:
            before, after = text.split(special, 1)
            return (bpe_ids(before, v, specials) + [vocab[special]]
                    + bpe_ids(after, v, specials))
    pieces: list[str] = []
    run = ""
    for ch in text:
        if unicodedata.category(ch)[0] == "N":
            pieces += gpt2_pieces(run) + [ch]
            run = ""
        else:
            run += ch
    pieces += gpt2_pieces(run)
    ids = []
    for piece in pieces:
        word = [chars[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = [(ranks.get((a, b), 1 << 30), k) for k, (a, b) in
                     enumerate(zip(word, word[1:], strict=False))]
            best, _ = min(pairs)
            if best == 1 << 30:
                break
            a, b = merges[best].split(" ")
            merged, k = [], 0
            while k < len(word):
                if k + 1 < len(word) and word[k] == a and word[k + 1] == b:
                    merged.append(a + b)
                    k += 2
                else:
                    merged.append(word[k])
                    k += 1
            word = merged
        ids += [vocab[w] for w in word]
    return ids


def check_tokenizer(path: Path, texts: list[str]) -> Any:
    with GGUFFile(path) as f:
        tok = tokenizer_from_gguf(f)
        config = config_from_gguf(f)
        meta = f.metadata
    tokens = meta["tokenizer.ggml.tokens"]
    vocab = Vocab(tokens, meta["tokenizer.ggml.merges"])
    specials = [t for t, k in zip(tokens, meta["tokenizer.ggml.token_type"], strict=True)
                if k == 3]
    for text in texts:
        ids = tok.encode(text).ids
        assert ids == bpe_ids(text, vocab, specials), text
        assert tok.decode(ids) == text
    chat = render_chat(config, [{"role": "user", "content": "hello 2024 🎉"},
                                {"role": "assistant", "content": "the user"},
                                {"role": "user", "content": "ok"}])
    ids = tok.encode(chat).ids
    assert ids == bpe_ids(chat, vocab, specials)
    start = tokens.index("<|im_start|>")
    assert ids[0] == start and ids.count(start) == chat.count("<|im_start|>")
    assert ids.count(2) == chat.count("<|im_end|>")  # end of turn is id 2 in both models
    assert tok.decode(ids, skip_special_tokens=False) == chat
    return tok


def test_tiny_tokenizer_matches_the_reference_bpe(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "t.gguf")
    check_tokenizer(tmp_path / "t.gguf", TEXTS)


def test_smollm2_tokenizer_matches_the_reference_bpe() -> None:
    path = need_smollm2()
    tok = check_tokenizer(path, TEXTS)
    # llama.cpp's ids for these (a space before digits is a token of its own).
    assert tok.encode(" 2024").ids == [216, 34, 32, 34, 36]
    assert tok.encode("12345").ids == [33, 34, 35, 36, 37]
    assert tok.encode("<|im_start|>user\n").ids == [1, 4093, 198]


def test_hf_directory_tokenizes_the_same(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "t.gguf")
    write_tiny_hf(tmp_path / "hf")
    with GGUFFile(tmp_path / "t.gguf") as f:
        ours = tokenizer_from_gguf(f)
    hf = load_hf_tokenizer(tmp_path / "hf")
    for text in TEXTS + ["<|im_start|>user\nhi<|im_end|>"]:
        assert hf.encode(text, add_special_tokens=False).ids == ours.encode(text).ids


def need_jinja2() -> None:
    pytest.importorskip("jinja2", reason="jinja2 is not installed (pip install jinja2, or "
                        "vkumd[models]); model chat templates other than ChatML need it")


def test_chat_templates() -> None:
    need_jinja2()
    config = tiny_config()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = render_chat(config, msgs)
    assert text == chatml(msgs) == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>"
                                    "user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert render_chat(config, msgs, add_generation_prompt=False) == chatml(msgs, False)
    none = tiny_config(chat_template=None)
    assert render_chat(none, msgs) == text
    custom = tiny_config(chat_template="{{ bos_token }}{% for m in messages %}[{{ m.role }}]"
                         "{{ m.content }}{% endfor %}")
    assert render_chat(custom, msgs, bos_token="<s>") == "<s>[system]Be brief.[user]Hi"


def test_smollm2_template_adds_its_system_prompt() -> None:
    need_jinja2()
    with GGUFFile(need_smollm2()) as f:
        config = config_from_gguf(f)
    text = render_chat(config, [{"role": "user", "content": "Hi"}])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("messages,error,match", [
    ("hello", VkumdTypeError, "must be a list"),
    ([], VkumdValueError, "empty"),
    (["hi"], VkumdTypeError, "message 0 is a str"),
    ([{"content": "hi"}], VkumdValueError, "no 'role'"),
    ([{"role": "user"}], VkumdValueError, "no 'content'"),
    ([{"role": "user", "content": 5}], VkumdTypeError, "'content' is a int"),
    ([{"role": "wizard", "content": "hi"}], VkumdValueError, "role 'wizard'"),
])
def test_bad_messages(messages: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        render_chat(tiny_config(), messages)  # type: ignore[arg-type]


def test_template_failures_are_clear() -> None:
    need_jinja2()
    refusing = tiny_config(chat_template="{{ raise_exception('no system role') }}")
    with pytest.raises(VkumdValueError, match="refused the messages: no system role"):
        render_chat(refusing, [{"role": "user", "content": "x"}])
    broken = tiny_config(chat_template="{% for %}")
    with pytest.raises(VkumdValueError, match="chat template failed"):
        render_chat(broken, [{"role": "user", "content": "x"}])
    sneaky = tiny_config(chat_template="{{ messages.append(1) }}")
    with pytest.raises(VkumdValueError, match="chat template failed"):
        render_chat(sneaky, [{"role": "user", "content": "x"}])


@pytest.mark.parametrize("metadata,error,match", [
    ({"tokenizer.ggml.model": "llama"}, UnsupportedModelError, "'llama'; vkumd reads"),
    ({"tokenizer.ggml.pre": "qwen9"}, UnsupportedModelError, "'qwen9' is not supported"),
    ({"tokenizer.ggml.merges": ["Ġ zzz"]}, ModelFileError, "merge 0"),
    ({"tokenizer.ggml.tokens": None}, ModelFileError, "tokens is missing"),
    ({"tokenizer.ggml.token_type": [1, 2]}, ModelFileError, "one integer per token"),
])
def test_bad_vocabularies(tmp_path: Path, metadata: dict, error: type[Exception], match: str
                          ) -> None:
    path = tmp_path / "t.gguf"
    write_tiny_gguf(path, metadata=metadata)
    with GGUFFile(path) as f, pytest.raises(error, match=match):
        tokenizer_from_gguf(f)


@pytest.mark.parametrize("pre,pieces", [
    ("smollm", ["Ġ", "1", "2", "3", "4", "5", "Ġab", "'s"]),
    ("default", ["Ġ12345", "Ġab", "'s"]),
    ("llama-bpe", ["Ġ", "123", "45", "Ġab", "'s"]),
])
def test_pre_tokenizers_split_digits_as_llama_cpp_does(tmp_path: Path, pre: str,
                                                       pieces: list[str]) -> None:
    path = tmp_path / "t.gguf"
    write_tiny_gguf(path, metadata={"tokenizer.ggml.pre": pre})
    with GGUFFile(path) as f:
        tok = tokenizer_from_gguf(f)
    assert [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(" 12345 ab's")] == pieces
    assert tok.decode(tok.encode(" 12345 ab's").ids) == " 12345 ab's"


def test_without_jinja2_chatml_still_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "jinja2", None)  # import now fails
    monkeypatch.setitem(__import__("sys").modules, "jinja2.sandbox", None)
    msgs = [{"role": "user", "content": "Hi"}]
    assert render_chat(tiny_config(), msgs) == chatml(msgs)
    other = tiny_config(chat_template="{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(VkumdValueError, match="needs jinja2"):
        render_chat(other, msgs)

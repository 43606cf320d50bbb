"""SentenceEncoder against the float64 numpy reference, and its input handling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError

from .model_checks import assert_close, edit_json, needs_model

pytestmark = needs_model

SHORT = ["A man is eating food.", "The quick brown fox jumps over the lazy dog by the river."]
NON_LATIN = ["Съешь же ещё этих мягких французских булок.", "我们今天去公园散步吧",
             "مرحبا بالعالم", "Party time 🎉🥳🚀 with emoji", "naïve café — déjà vu"]
# Past the 256-token window: the tail is cut and must not change the embedding.
LONG = " ".join(["the history of vulkan compute drivers spans many years of work"] * 40)
F32 = {"min_cos": 0.99999, "max_abs": 1e-4}
F16 = {"min_cos": 0.999, "max_abs": 3e-3}


def test_float32_matches_the_reference(encoder, reference) -> None:
    texts = SHORT + NON_LATIN + ["hello"]
    assert_close(encoder.encode(texts), reference.encode(texts), **F32)


def test_float16_matches_the_reference(encoder16, reference) -> None:
    texts = SHORT + NON_LATIN[:2]
    assert_close(encoder16.encode(texts), reference.encode(texts), **F16)


def test_a_long_text_is_truncated_at_the_window(encoder, reference) -> None:
    assert len(encoder.tokenize([LONG])[0]) == encoder.max_seq_length == 256
    cut = encoder.encode([LONG, LONG + " and a different ending that lies past the window"])
    assert_close(cut, reference.encode([LONG, LONG]), **F32)
    np.testing.assert_array_equal(cut[0], cut[1])


def test_very_different_lengths_in_one_batch_match_one_by_one(encoder, reference) -> None:
    texts = ["hi", LONG[:400], SHORT[1], "", NON_LATIN[3]]
    batched = encoder.encode(texts, batch_size=8)
    single = np.concatenate([encoder.encode([t]) for t in texts])
    assert_close(batched, reference.encode(texts), **F32)
    # Padding is masked, so a sentence does not see its batch; GEMM tiling may still
    # round differently for another row count.
    assert np.abs(batched - single).max() <= 1e-6


def test_results_come_back_in_input_order_across_batches(encoder) -> None:
    texts = ["one", "two words here", "a somewhat longer third sentence of text", "four"]
    together = encoder.encode(texts, batch_size=2)
    reversed_ = encoder.encode(texts[::-1], batch_size=2)
    np.testing.assert_allclose(together, reversed_[::-1], atol=1e-6)


def test_the_reference_masked_path_matches_its_unpadded_one(reference) -> None:
    np.testing.assert_allclose(reference.encode_padded(SHORT[0], 12),
                               reference.encode([SHORT[0]])[0], atol=1e-12)


def test_normalize_false_gives_the_mean_pooled_vector(encoder, reference) -> None:
    got = encoder.encode(SHORT, normalize=False)
    assert_close(got, reference.encode(SHORT, normalize=False), min_cos=0.99999, max_abs=1e-4)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0)
    np.testing.assert_allclose(np.linalg.norm(encoder.encode(SHORT), axis=1), 1.0, atol=1e-6)


def test_empty_list_and_empty_string(encoder, reference) -> None:
    empty = encoder.encode([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    # sentence-transformers embeds "" as [CLS] [SEP]; so does vkumd.
    assert encoder.tokenize([""]) == [[101, 102]]
    assert_close(encoder.encode([""]), reference.encode([""]), **F32)


@pytest.mark.parametrize("bad, kind, text", [
    ("a sentence", VkumdTypeError, "one string"),
    (["ok", 3], VkumdTypeError, r"sentences\[1\] is int"),
    ([None], VkumdTypeError, r"sentences\[0\] is NoneType"),
    (42, VkumdTypeError, "list of str"),
])
def test_bad_sentences_are_refused(encoder, bad, kind, text) -> None:
    with pytest.raises(kind, match=text):
        encoder.encode(bad)


@pytest.mark.parametrize("kwargs, kind, text", [
    ({"batch_size": 0}, VkumdValueError, "batch_size=0"),
    ({"batch_size": 2.5}, VkumdTypeError, "batch_size"),
    ({"normalize": "yes"}, VkumdTypeError, "normalize"),
    ({"progress": 1}, VkumdTypeError, "progress"),
])
def test_bad_options_are_refused(encoder, kwargs, kind, text) -> None:
    with pytest.raises(kind, match=text):
        encoder.encode(["x"], **kwargs)


def test_progress_bar_on_stderr_and_off(encoder, capsys) -> None:
    texts = ["a", "b", "c"]
    encoder.encode(texts, batch_size=1, progress=True)
    err = capsys.readouterr().err
    assert "3/3 sentences" in err and err.endswith("\n")
    encoder.encode(texts, batch_size=1, progress=False)
    encoder.encode(texts, batch_size=1)  # auto: not a terminal, few batches
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("mode", ["cls", "mean_sqrt_len"])
def test_other_pooling_modes(ctx, copy: Path, reference, mode: str) -> None:
    from vkumd.models import SentenceEncoder

    edit_json(copy / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False,
              **{f"pooling_mode_{'cls_token' if mode == 'cls' else 'mean_sqrt_len_tokens'}": True})
    texts = SHORT[:1] + ["hi"]
    with SentenceEncoder.from_pretrained(copy, ctx=ctx) as enc:
        assert enc.files.sentence.pooling == mode
        got = enc.encode(texts, normalize=False)
        # The eager path runs the same forward, pooling included.
        assert np.array_equal(enc.encode(texts, normalize=False, compiled=False), got)
    states = [reference.hidden(reference.ids(t)) for t in texts]
    want = np.array([h[0] if mode == "cls" else h.sum(0) / np.sqrt(len(h)) for h in states])
    assert_close(got, want, min_cos=0.99999, max_abs=1e-4)


def test_embed_tokens_is_one_batch_of_encode(encoder) -> None:
    """The server's entry: a batch of token ids as given, rows in order, per-row normalize."""
    texts = ["a short one", "a rather longer sentence than the first one, with commas",
             "mid length text"]
    ids = encoder.tokenize(texts)
    got = encoder.embed_tokens(ids, [True, False, True])
    want = encoder.encode(texts)
    raw = encoder.encode(texts[1:2], normalize=False)
    assert got.shape == (3, encoder.hidden_size) and got.dtype == np.float32
    np.testing.assert_allclose(got[[0, 2]], want[[0, 2]], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], raw[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(encoder.embed_tokens(ids), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch, normalize, text", [
    ([], True, "empty"),
    ([[101, 102], []], True, "sequence 1 has 0 ids"),
    ([[101] * 257], True, "give 1 to 256"),
    ([[101, 30522]], True, r"outside the vocabulary \[0, 30522\)"),
    ([[-1]], True, "outside the vocabulary"),
    ([[101], [102]], [True], "1 normalize flags for 2 sequences"),
])
def test_embed_tokens_refuses(encoder, batch, normalize, text) -> None:
    with pytest.raises(VkumdValueError, match=text):
        encoder.embed_tokens(batch, normalize)

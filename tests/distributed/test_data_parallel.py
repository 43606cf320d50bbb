"""Several contexts in one process: VKUMD_DEVICE lists, and DataParallelEncoder splitting a
batch across contexts on threads, results in input order.

lavapipe lists one device, so the main tests open two contexts on that one device (the
helper must not assume distinct devices). Where the loader lists two drivers (the system's
lavapipe beside the Mesa 26 lane's) a test runs one context on each; it skips with the reason
when only one is listed.
"""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd.distributed import DataParallelEncoder, device_list, open_contexts, split_evenly
from vkumd.errors import DeviceUnavailable, VkumdTypeError, VkumdValueError
from vkumd.models import SentenceEncoder

from .conftest import MISSING, model_installed

needs_model = pytest.mark.skipif(not model_installed(), reason=MISSING)
SENTENCES = [f"sentence number {i} is about {topic}" for i, topic in enumerate(
    ["cats", "the weather in Paris", "a long walk", "GPUs", "tea", "rivers and bridges",
     "an old book", "x", "", "music at night", "the sea"])]


def test_device_list_reads_vkumd_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VKUMD_DEVICE", raising=False)
    assert device_list() == []
    monkeypatch.setenv("VKUMD_DEVICE", "0, 0,llvmpipe")
    assert device_list() == [0, 0, "llvmpipe"]
    assert device_list("1") == [1]
    assert device_list([0, "lvp"]) == [0, "lvp"]


@pytest.mark.parametrize(("value", "error", "words"), [
    ("0,,1", VkumdValueError, "entry 1 is empty"),
    ([], VkumdValueError, "empty list"),
    ([0, 1.5], VkumdTypeError, "devices[1] is float"),
    (7, VkumdTypeError, "not int"),
])
def test_device_list_refuses_bad_input(value: object, error: type, words: str) -> None:
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        device_list(value)  # type: ignore[arg-type]


def test_split_evenly_covers_in_order() -> None:
    assert split_evenly(11, 3) == [(0, 4), (4, 8), (8, 11)]
    assert split_evenly(1, 3) == [(0, 1), (1, 1), (1, 1)]
    assert split_evenly(0, 2) == [(0, 0), (0, 0)]


def test_open_contexts_twice_on_one_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKUMD_DEVICE", "0,0")
    contexts = open_contexts()
    try:
        assert len(contexts) == 2 and contexts[0].handle != contexts[1].handle
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        for ctx in contexts:
            np.testing.assert_array_equal(ctx.tensor(a).numpy(), a)
    finally:
        for ctx in contexts:
            ctx.close()


def test_open_contexts_unknown_device_closes_the_opened_ones() -> None:
    before = vkumd.live_objects()
    with pytest.raises(DeviceUnavailable, match="no device name contains"):
        open_contexts([0, "no-such-gpu"])
    assert vkumd.live_objects() == before


@needs_model
def test_two_contexts_on_one_device_match_one_encoder(encoder) -> None:
    want = encoder.encode(SENTENCES)
    with DataParallelEncoder(devices=[0, 0]) as dp:
        assert len({id(c) for c in dp.contexts}) == 2
        got = dp.encode(SENTENCES, batch_size=4)
        assert got.shape == want.shape and got.dtype == np.float32
        # The same kernels on the same driver: only the batch split differs, which the
        # encoder's masking makes irrelevant, so the rows match to rounding.
        np.testing.assert_allclose(got, want, atol=2e-6)
        assert dp.encode([]).shape == (0, encoder.hidden_size)
        np.testing.assert_allclose(dp.encode(SENTENCES[:1]), want[:1], atol=2e-6)


@needs_model
def test_encoders_given_stay_open_and_bad_ones_are_refused(encoder, ctx) -> None:
    with pytest.raises(VkumdValueError, match="share one context"):
        DataParallelEncoder([encoder, encoder])
    with pytest.raises(VkumdTypeError, match=r"encoders\[1\] is str"):
        DataParallelEncoder([encoder, "enc"])  # type: ignore[list-item]
    with pytest.raises(VkumdValueError, match="not both"):
        DataParallelEncoder([encoder], devices=[0])
    dp = DataParallelEncoder([encoder])
    dp.close()
    assert encoder.encode(["still open"]).shape == (1, encoder.hidden_size)
    with pytest.raises(VkumdTypeError, match="one string"):
        DataParallelEncoder([encoder]).encode("a bare string")  # type: ignore[arg-type]


@needs_model
def test_two_drivers_when_the_loader_lists_them(encoder) -> None:
    listed = vkumd.devices()
    drivers = {c.driver_info for c in listed}
    if len(listed) < 2:
        pytest.skip(f"the loader lists one device ({listed[0].name}, {listed[0].driver_info});"
                    " run under two ICDs (docs/scale-out.md) to test two drivers")
    want = encoder.encode(SENTENCES)
    with DataParallelEncoder(devices=[0, 1]) as dp:
        got = dp.encode(SENTENCES, batch_size=4)
    # Two LLVM versions may round differently: compare as embeddings, not bit for bit.
    assert len(drivers) >= 1
    np.testing.assert_allclose(got, want, atol=1e-4)
    cos = (got.astype(np.float64) * want).sum(1)
    assert cos.min() > 1 - 1e-6


def _random_sentences(count: int) -> list[str]:
    """Fresh sentences each run, 1 to 30 words drawn from a small vocabulary."""
    rng = np.random.default_rng()
    words = ["river", "cat", "tea", "proof", "train", "night", "GPU", "bridge", "a", "the"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 31)))) for _ in range(count)]


@needs_model
def test_from_pretrained_with_devices_splits_across_two_contexts(encoder) -> None:
    texts = _random_sentences(13)  # odd: the two slices differ in size (7 and 6)
    want = encoder.encode(texts).astype(np.float64)
    with SentenceEncoder.from_pretrained(devices=[0, 0]) as dp:
        assert isinstance(dp, DataParallelEncoder) and len(dp.encoders) == 2
        assert dp.contexts[0] is not dp.contexts[1]
        assert dp.max_seq_length == encoder.max_seq_length
        got = dp.encode(texts, batch_size=3, progress=False)
        assert got.shape == want.shape and got.dtype == np.float32
        # Rows in input order: each matches its own sentence's embedding, by relative error.
        error = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
        assert error.max() < 1e-5, (error.max(), texts)
        assert dp.encode(texts, compiled=False).shape == want.shape


@needs_model
def test_from_pretrained_with_a_device_list_string(encoder) -> None:
    texts = _random_sentences(3)
    want = encoder.encode(texts)
    with SentenceEncoder.from_pretrained(devices="0, 0") as dp:
        got = dp.encode(texts)
    assert np.abs(got - want).max() < 1e-5


@needs_model
@pytest.mark.parametrize(("devices", "error", "words"), [
    ("0,,0", VkumdValueError, "entry 1 is empty"),
    ([], VkumdValueError, "empty list"),
    ([0, "no-such-gpu"], DeviceUnavailable, "no device name contains"),
    ([0, 2.0], VkumdTypeError, r"devices\[1\] is float"),
])
def test_from_pretrained_refuses_bad_devices_and_frees_what_it_made(
        encoder, devices: object, error: type, words: str) -> None:
    before = vkumd.live_objects()
    with pytest.raises(error, match=words):
        SentenceEncoder.from_pretrained(devices=devices)
    assert vkumd.live_objects() == before
    assert encoder.encode(["still usable"]).shape == (1, encoder.hidden_size)


@needs_model
def test_from_pretrained_refuses_ctx_and_devices_together(ctx) -> None:
    with pytest.raises(VkumdValueError, match="ctx or devices, not both"):
        SentenceEncoder.from_pretrained(ctx=ctx, devices=[0])

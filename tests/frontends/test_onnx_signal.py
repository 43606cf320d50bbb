"""ONNX's signal operators (DFT, STFT, Hann/Hamming/Blackman windows, MelWeightMatrix) on
single-node models against float64 numpy (``np.fft``), fresh random data at odd lengths,
and refusals that name what is unsupported."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError  # noqa: E402

_TYPES = {np.dtype(np.float32): T.FLOAT, np.dtype(np.int64): T.INT64}


def model(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
          inputs: list[str] | None = None, opset: int = 20, **attrs: object
          ) -> onnx.ModelProto:
    """One ``op`` node: the feeds are graph inputs, the constants initializers."""
    consts = consts or {}
    node = helper.make_node(op, inputs if inputs is not None else [*feeds, *consts], ["y"],
                            **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, _TYPES[v.dtype], list(v.shape))
                      for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert not np.isnan(got).any()
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def _pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


@pytest.mark.parametrize(("shape", "axis", "length", "inverse", "onesided", "complex_in"), [
    ((3, 13, 5), 1, None, False, False, False), ((3, 13, 5), 2, 8, False, True, False),
    ((2, 7, 9), 1, 11, True, False, True), ((4, 11), 0, None, False, False, True),
    ((2, 6, 3), 1, 10, True, True, True), ((2, 7, 3), 1, None, True, True, True),
    ((5, 9), 0, 9, False, True, False)])
def test_dft_matches_numpy_fft(ctx, shape: tuple[int, ...], axis: int, length: int | None,
                               inverse: bool, onesided: bool, complex_in: bool) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((*shape, 2 if complex_in else 1)).astype(np.float32)
    z = x[..., 0] + (1j * x[..., 1] if complex_in else 0)
    n = length if length is not None else (2 * (shape[axis] - 1) if inverse and onesided
                                            else shape[axis])
    if inverse and onesided:
        want = np.fft.irfft(z, n=n, axis=axis)[..., None]
    elif inverse:
        want = _pairs(np.fft.ifft(z, n=n, axis=axis))
    else:
        spectrum = np.fft.fft(z, n=n, axis=axis)
        if onesided:
            spectrum = np.take(spectrum, range(n // 2 + 1), axis=axis)
        want = _pairs(spectrum)
    consts = {"axis": np.array(axis, np.int64)}
    names = ["x", "", "axis"]
    if length is not None:
        consts["n"] = np.array(length, np.int64)
        names[1] = "n"
    m = model("DFT", {"x": x}, consts, names, inverse=int(inverse), onesided=int(onesided))
    got = vkumd.onnx.load(m, ctx=ctx)(x=x)["y"]
    assert rel_error(got, want) < 1e-5


def test_dft_on_the_complex_axis_is_refused(ctx) -> None:
    x = np.ones((3, 4, 2), np.float32)
    with pytest.raises(UnsupportedModelError, match="the last is the complex pair"):
        vkumd.onnx.load(model("DFT", {"x": x}, {"axis": np.array(-1, np.int64)},
                              ["x", "", "axis"]), ctx=ctx)


@pytest.mark.parametrize(("frame", "step", "with_window", "onesided"), [
    (16, 8, True, 1), (15, 7, False, 1), (12, 5, True, 0)])
def test_stft_matches_numpy_fft(ctx, frame: int, step: int, with_window: bool,
                                onesided: int) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 101, 1)).astype(np.float32)
    taper = rng.uniform(0.1, 1.0, frame).astype(np.float32) if with_window else np.ones(frame)
    frames = (101 - frame) // step + 1
    chunks = np.stack([x[:, f * step:f * step + frame, 0] * taper for f in range(frames)], 1)
    spectrum = np.fft.fft(chunks.astype(np.float64), axis=-1)
    if onesided:
        spectrum = spectrum[..., :frame // 2 + 1]
    consts = {"step": np.array(step, np.int64), "frame": np.array(frame, np.int64)}
    names = ["x", "step", "", "frame"]
    if with_window:
        consts["window"] = taper
        names[2] = "window"
    m = model("STFT", {"x": x}, consts, names, opset=17, onesided=onesided)
    got = vkumd.onnx.load(m, ctx=ctx)(x=x)["y"]
    assert rel_error(got, _pairs(spectrum)) < 1e-5


@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_windows_are_the_formulas(ctx, op: str, periodic: int) -> None:
    size = 11
    span = size if periodic else size - 1
    phase = 2 * np.pi * np.arange(size) / span
    want = {"HannWindow": np.sin(np.pi * np.arange(size) / span) ** 2,
            "HammingWindow": 25 / 46 - 21 / 46 * np.cos(phase),
            "BlackmanWindow": 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)}[op]
    if not periodic:  # numpy's windows are the symmetric ones
        assert np.allclose(want, {"HannWindow": np.hanning, "BlackmanWindow": np.blackman,
                                  "HammingWindow": lambda n: want}[op](size), atol=1e-12)
    size_in = {"size": np.array(size, np.int64)}
    got = vkumd.onnx.load(model(op, size_in, opset=17, periodic=periodic), ctx=ctx)(**size_in)
    assert got["y"].dtype == np.float32
    np.testing.assert_allclose(got["y"], want, rtol=1e-6, atol=1e-7)


def test_mel_weight_matrix_matches_onnx_reference(ctx) -> None:
    """The filter bank is folded at import time; ONNX's evaluator is the oracle for its
    edge rounding (ONNX's own definition, not TensorFlow's)."""
    consts = {"bins": np.array(10, np.int64), "n": np.array(64, np.int64),
              "rate": np.array(8000, np.int64), "low": np.array(100.0, np.float32),
              "high": np.array(3800.0, np.float32)}
    m = model("MelWeightMatrix", {}, consts, opset=17)
    want = ReferenceEvaluator(m).run(None, {})[0]
    got = vkumd.onnx.load(m, ctx=ctx)()["y"]
    assert got.shape == (33, 10)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_mel_weight_matrix_past_nyquist_is_refused(ctx) -> None:
    consts = {"bins": np.array(4, np.int64), "n": np.array(16, np.int64),
              "rate": np.array(1000, np.int64), "low": np.array(0.0, np.float32),
              "high": np.array(900.0, np.float32)}
    with pytest.raises(UnsupportedModelError, match="Nyquist"):
        vkumd.onnx.load(model("MelWeightMatrix", {}, consts, opset=17), ctx=ctx)

"""Converters of ONNX's signal operators: DFT, STFT, the windows (Hann, Hamming, Blackman)
and MelWeightMatrix.

- The windows and the mel matrix depend on sizes alone: they are computed here, in float64,
  as constants of the requested type (a model whose sizes are graph inputs is specialized on
  their values, as a Reshape's shape is).
- DFT is a ``matmul`` by a constant real matrix that maps a signal's real (and imaginary)
  parts to the spectrum's: the transform axis (zero-padded or truncated to ``dft_length``)
  and the complex pair are moved last and flattened into one row. Forward, inverse,
  one-sided (real to half spectrum) and inverse one-sided (half spectrum to real, numpy's
  ``irfft``) are each one such matrix. It costs ``O(n^2)`` per row, which suits the frame
  sizes audio front ends use; an FFT kernel would be the next step for long transforms.
- STFT is a ``conv2d`` whose filters are the windowed DFT basis (one output channel per
  frequency and real/imaginary part, stride ``frame_step``): framing, windowing and the
  transform in one kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from vkumd.framework.frontends.onnx.errors import NeedsConstant, Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter, ir_dtype
from vkumd.framework.graph import Value

_FLOATS = ("float32", "float16", "bfloat16")


def _size(st: State, node: onnx.NodeProto, i: int, what: str) -> int:
    (value,) = st.ints(node.input[i], what)
    return value


def _number(st: State, node: onnx.NodeProto, i: int, what: str) -> float:
    value = st.scalar(node.input[i])
    if value is None:
        raise NeedsConstant(f"{what} must be a constant (it is computed at run time)",
                            node.input[i])
    return float(value)


def _as_output(values: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """``values`` as ``output_datatype`` (ONNX's default: float32)."""
    elem = int(attrs.get("output_datatype", onnx.TensorProto.FLOAT))
    ir_dtype(elem)  # refuses a type vkumd does not store
    return values.astype(helper.tensor_dtype_to_np_dtype(elem))


def window(kind: str, size: int, periodic: bool) -> np.ndarray:
    """ONNX's ``kind`` window (``hann``, ``hamming``, ``blackman``) of ``size`` points in
    float64; periodic windows divide by ``size``, symmetric ones by ``size - 1``."""
    span = size if periodic else size - 1
    phase = 2.0 * np.pi * np.arange(size) / span if span > 0 else np.zeros(size)
    if kind == "hann":
        return 0.5 - 0.5 * np.cos(phase)
    if kind == "hamming":
        alpha = 25.0 / 46.0  # ONNX's alpha, not the rounded 0.54 of textbooks
        return alpha - (1.0 - alpha) * np.cos(phase)
    return 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2.0 * phase)


_WINDOWS = {"HannWindow": "hann", "HammingWindow": "hamming", "BlackmanWindow": "blackman"}


@converter(*_WINDOWS, attrs=("output_datatype", "periodic"))
def windows(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """A window of a known size, computed at import time."""
    size = _size(st, node, 0, f"{node.op_type}'s size")
    if size < 0:
        raise Unsupported(f"a window of {size} points")
    values = window(_WINDOWS[node.op_type], size, bool(attrs.get("periodic", 1)))
    return [_as_output(values, attrs)]


def mel_weight_matrix(mel_bins: int, dft_length: int, sample_rate: int, lower_hz: float,
                      upper_hz: float) -> np.ndarray:
    """ONNX's ``[dft_length // 2 + 1, mel_bins]`` triangular filter bank in float64: band
    edges equally spaced on the mel scale (``2595 log10(1 + f / 700)``) between the two
    frequencies, in ``mel_bins + 2`` steps, each edge floored to a spectrogram bin."""
    def mel(hz: float) -> float:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    low, high = mel(lower_hz), mel(upper_hz)
    points = low + np.arange(mel_bins + 2) * (high - low) / (mel_bins + 2)
    hz = 700.0 * (10.0 ** (points / 2595.0) - 1.0)
    edges = np.floor((dft_length + 1) * hz / sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, mel_bins))
    for i in range(mel_bins):
        left, centre, right = edges[i], edges[i + 1], edges[i + 2]
        if centre == left:
            out[centre, i] = 1.0
        else:
            rise = np.arange(left, centre + 1)
            out[rise, i] = (rise - left) / (centre - left)
        if right > centre:
            fall = np.arange(centre, right)
            out[fall, i] = (right - fall) / (right - centre)
    return out


@converter("MelWeightMatrix", attrs=("output_datatype",))
def mel_weights(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The mel filter bank of known sizes and edges, computed at import time."""
    bins = _size(st, node, 0, "num_mel_bins")
    length = _size(st, node, 1, "dft_length")
    rate = _size(st, node, 2, "sample_rate")
    if bins < 1 or length < 1 or rate < 1:
        raise Unsupported(f"num_mel_bins {bins}, dft_length {length}, sample_rate {rate} "
                          "(each must be at least 1)")
    low = _number(st, node, 3, "lower_edge_hertz")
    high = _number(st, node, 4, "upper_edge_hertz")
    if not 0 <= low < high or high > rate / 2:
        raise Unsupported(f"edges {low} and {high} Hz (they must satisfy 0 <= low < high <= "
                          f"the Nyquist frequency {rate / 2})")
    return [_as_output(mel_weight_matrix(bins, length, rate, low, high), attrs)]


def dft_matrix(n_in: int, pairs_in: int, length: int, inverse: bool, onesided: bool
               ) -> np.ndarray:
    """The real ``[n_in * pairs_in, n_out * pairs_out]`` matrix of one DFT, float64.

    Rows run over the input's points (then real, imaginary when ``pairs_in`` is 2), columns
    over the output's. Points past ``length`` are dropped (truncation); missing ones are
    zeros (padding). ``inverse and onesided`` is numpy's ``irfft``: the half spectrum's
    points past the first and the Nyquist count twice, and the output is real."""
    half = length // 2 + 1
    real_out = inverse and onesided
    n_out = half if onesided and not inverse else length
    used = min(n_in, half if real_out else length)
    t = np.arange(used)[:, None]
    k = np.arange(n_out)[None, :]
    angle = 2.0 * np.pi * t * k / length * (1.0 if inverse else -1.0)
    cos, sin = np.cos(angle), np.sin(angle)
    scale = 1.0 / length if inverse else 1.0
    if real_out:  # x[k] = (1/N) sum_t w_t Re(X_t e^{+i angle})
        weight = np.where((t == 0) | ((length % 2 == 0) & (t == length // 2)), 1.0, 2.0)
        mat = np.zeros((n_in, pairs_in, n_out, 1))
        mat[:used, 0, :, 0] = weight * cos * scale
        if pairs_in == 2:
            mat[:used, 1, :, 0] = -weight * sin * scale
        return mat.reshape(n_in * pairs_in, n_out)
    mat = np.zeros((n_in, pairs_in, n_out, 2))
    mat[:used, 0, :, 0], mat[:used, 0, :, 1] = cos * scale, sin * scale
    if pairs_in == 2:  # (a + ib)(cos + i sin) = (a cos - b sin) + i (a sin + b cos)
        mat[:used, 1, :, 0], mat[:used, 1, :, 1] = -sin * scale, cos * scale
    return mat.reshape(n_in * pairs_in, n_out * 2)


@converter("DFT", attrs=("axis", "inverse", "onesided"))
def dft(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The DFT along one axis of ``[..., n, 1 or 2]`` (real, or real and imaginary), as a
    matmul by :func:`dft_matrix`."""
    x = st.value(node.input[0])
    if x.dtype.name not in _FLOATS:
        raise Unsupported(f"DFT of {x.dtype.name} (float tensors only)")
    shape = tuple(x.shape)
    ndim = len(shape)
    if ndim < 2 or shape[-1] not in (1, 2):
        raise Unsupported(f"a signal of shape {shape} (its last dimension must be 1 or 2)")
    if st.opset >= 20:
        axis = _size(st, node, 2, "DFT's axis") if st.present(node, 2) else -2
    else:
        axis = int(attrs.get("axis", 1))
    if not -ndim <= axis < ndim or axis % ndim == ndim - 1:
        raise Unsupported(f"axis {axis} for a {ndim}-d signal (the last is the complex pair)")
    axis %= ndim
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    n_in, pairs = shape[axis], shape[-1]
    if not all(isinstance(d, int) for d in shape):
        raise Unsupported(f"a signal of symbolic shape {shape}")
    if st.present(node, 1):
        length = _size(st, node, 1, "dft_length")
    else:
        length = 2 * (n_in - 1) if inverse and onesided else n_in
    if length < 1:
        raise Unsupported(f"dft_length {length} (it must be at least 1)")
    mat = dft_matrix(n_in, pairs, length, inverse, onesided)
    return [_along(st, x, axis, mat, 1 if inverse and onesided else 2)]


def _along(st: State, x: Value, axis: int, mat: np.ndarray, pairs_out: int) -> Value:
    """``mat`` applied to the (``axis``, complex pair) rows of ``x``, giving ``pairs_out``
    numbers (real, or real and imaginary) per output point in place of the pair."""
    shape = tuple(x.shape)
    ndim = len(shape)
    order = [d for d in range(ndim - 1) if d != axis] + [axis, ndim - 1]
    moved = x if order == list(range(ndim)) else st.b.permute(x, order)
    lead = tuple(shape[d] for d in order[:-2])
    rows = st.b.reshape(moved, (int(np.prod(lead, dtype=np.int64)), mat.shape[0]))
    weights = st.constant(mat.astype(np.float32), x.dtype.name)
    y = st.b.matmul(rows, weights)
    y = st.b.reshape(y, (*lead, mat.shape[1] // pairs_out, pairs_out))
    inverse = [order.index(d) for d in range(ndim)]
    return y if order == list(range(ndim)) else st.b.permute(y, inverse)


@converter("STFT", attrs=("onesided",))
def stft(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``[batch, frames, bins, 2]`` spectra of ``[batch, length, 1 or 2]`` signals: one
    ``conv2d`` whose filters are the windowed DFT basis, stride ``frame_step``."""
    x = st.value(node.input[0])
    shape = tuple(x.shape)
    if x.dtype.name not in _FLOATS or len(shape) != 3 or shape[2] not in (1, 2):
        raise Unsupported(f"a {x.dtype.name} signal of shape {shape} (float [batch, length, "
                          "1 or 2])")
    taper = None
    if st.present(node, 2):
        taper = st.known(node.input[2])
        if taper is None:  # asked first, so one specialization folds it with the sizes
            raise NeedsConstant("STFT's window must be a constant", node.input[2])
    step = _size(st, node, 1, "STFT's frame_step")
    if st.present(node, 3):
        frame = _size(st, node, 3, "STFT's frame_length")
    else:
        frame = shape[1] if taper is None else int(taper.shape[0])
    if taper is None:
        taper = np.ones(frame)
    batch, length, pairs = shape
    if (not isinstance(length, int) or step < 1 or not 1 <= frame <= length
            or taper.shape != (frame,)):
        raise Unsupported(f"frame_step {step}, frame_length {frame} and a window of shape "
                          f"{taper.shape} for a signal of length {length}")
    onesided = bool(attrs.get("onesided", 1))
    if onesided and pairs == 2:
        raise Unsupported("a one-sided STFT of a complex signal (ONNX: real signals only)")
    basis = dft_matrix(frame, pairs, frame, False, onesided).reshape(frame, pairs, -1)
    filters = (basis * np.asarray(taper, np.float64)[:, None, None]).transpose(2, 1, 0)
    channels = filters.shape[0]
    w = st.constant(filters[:, :, None, :].astype(np.float32), x.dtype.name)
    signal = st.b.reshape(st.b.permute(x, [0, 2, 1]), (batch, pairs, 1, length))
    y = st.b.conv2d(signal, w, None, stride=(1, step))
    frames = (length - frame) // step + 1
    y = st.b.reshape(y, (batch, channels // 2, 2, frames))
    return [st.b.permute(y, [0, 3, 1, 2])]

"""The float64 references of the recurrent layers (``lstm``, ``gru``, ``rnn``), step by step
as ONNX defines them (gate orders ``i, o, f, c`` and ``z, r, h``; LSTM's and GRU's default
activations, RNN's tanh, relu or sigmoid; ``clip`` bounding every activation's input, as
onnxruntime applies it)."""

from __future__ import annotations

from typing import Any

import numpy as np

DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _bound(x: np.ndarray, clip: float | None) -> np.ndarray:
    return x if clip is None else np.clip(x, -clip, clip)


def _f64(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.asarray(a, np.float64)


def _times(direction: str, d: int, length: int) -> range:
    backwards = direction == "reverse" or (direction == "bidirectional" and d == 1)
    return range(length - 1, -1, -1) if backwards else range(length)


def _lengths(lens: np.ndarray | None, seq: int, batch: int) -> list[int]:
    """Each batch row's steps: sequence_lens clamped to [0, seq], or seq."""
    if lens is None:
        return [seq] * batch
    return [int(min(max(v, 0), seq)) for v in np.asarray(lens).reshape(-1)]


def lstm_reference(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
                   lens: np.ndarray | None, h0: np.ndarray | None, c0: np.ndarray | None,
                   p: np.ndarray | None,
                   attrs: dict[str, Any]) -> list[np.ndarray]:
    """``[Y, Y_h, Y_c]`` of an ONNX LSTM with layout 0, in float64 (each batch row on its
    own: with ``lens``, row ``i`` runs its first ``lens[i]`` steps; Y is zero after them)."""
    x, w, r, b, h0, c0, p = (_f64(a) for a in (x, w, r, b, h0, c0, p))
    assert x is not None and w is not None and r is not None
    seq, batch, _ = x.shape
    dirs, hidden = r.shape[0], r.shape[2]
    clip = attrs["clip"]
    y = np.zeros((seq, dirs, batch, hidden))
    y_h = np.zeros((dirs, batch, hidden))
    y_c = np.zeros((dirs, batch, hidden))
    for d, row in np.ndindex(dirs, batch):
        h = np.zeros(hidden) if h0 is None else h0[d, row].copy()
        c = np.zeros(hidden) if c0 is None else c0[d, row].copy()
        bias = np.zeros(4 * hidden) if b is None else b[d, :4 * hidden] + b[d, 4 * hidden:]
        pi, po, pf = (np.zeros(hidden),) * 3 if p is None else np.split(p[d], 3)
        for t in _times(attrs["direction"], d, _lengths(lens, seq, batch)[row]):
            gates = x[t, row] @ w[d].T + h @ r[d].T + bias
            gi, go, gf, gc = np.split(gates, 4)
            i = _sigmoid(_bound(gi + pi * c, clip))
            f = 1.0 - i if attrs["input_forget"] else _sigmoid(_bound(gf + pf * c, clip))
            c = f * c + i * np.tanh(_bound(gc, clip))
            o = _sigmoid(_bound(go + po * c, clip))
            h = o * np.tanh(c)
            y[t, d, row] = h
        y_h[d, row], y_c[d, row] = h, c
    return [y, y_h, y_c]


def gru_reference(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
                  lens: np.ndarray | None, h0: np.ndarray | None, attrs: dict[str, Any]
                  ) -> list[np.ndarray]:
    """``[Y, Y_h]`` of an ONNX GRU with layout 0, in float64 (``lens`` as LSTM's)."""
    x, w, r, b, h0 = (_f64(a) for a in (x, w, r, b, h0))
    assert x is not None and w is not None and r is not None
    seq, batch, _ = x.shape
    dirs, hidden = r.shape[0], r.shape[2]
    clip = attrs["clip"]
    y = np.zeros((seq, dirs, batch, hidden))
    y_h = np.zeros((dirs, batch, hidden))
    for d, row in np.ndindex(dirs, batch):
        h = np.zeros(hidden) if h0 is None else h0[d, row].copy()
        wb, rb = (np.zeros(3 * hidden),) * 2 if b is None else np.split(b[d], 2)
        rz, rr, rh = np.split(r[d], 3)
        for t in _times(attrs["direction"], d, _lengths(lens, seq, batch)[row]):
            xz, xr, xh = np.split(x[t, row] @ w[d].T + wb, 3)
            z = _sigmoid(_bound(xz + h @ rz.T + rb[:hidden], clip))
            rg = _sigmoid(_bound(xr + h @ rr.T + rb[hidden:2 * hidden], clip))
            if attrs["linear_before_reset"]:
                n = np.tanh(_bound(xh + rg * (h @ rh.T + rb[2 * hidden:]), clip))
            else:
                n = np.tanh(_bound(xh + (rg * h) @ rh.T + rb[2 * hidden:], clip))
            h = (1.0 - z) * n + z * h
            y[t, d, row] = h
        y_h[d, row] = h
    return [y, y_h]


_RNN_ACTIVATIONS = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0),
                    "sigmoid": _sigmoid}


def rnn_reference(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
                  lens: np.ndarray | None, h0: np.ndarray | None, attrs: dict[str, Any]
                  ) -> list[np.ndarray]:
    """``[Y, Y_h]`` of an ONNX RNN with layout 0, in float64 (``lens`` as LSTM's)."""
    x, w, r, b, h0 = (_f64(a) for a in (x, w, r, b, h0))
    assert x is not None and w is not None and r is not None
    seq, batch, _ = x.shape
    dirs, hidden = r.shape[0], r.shape[2]
    names = attrs["activations"]
    names = (names,) if isinstance(names, str) else tuple(names)
    names = names * (dirs // len(names))
    y = np.zeros((seq, dirs, batch, hidden))
    y_h = np.zeros((dirs, batch, hidden))
    for d, row in np.ndindex(dirs, batch):
        h = np.zeros(hidden) if h0 is None else h0[d, row].copy()
        bias = np.zeros(hidden) if b is None else b[d, :hidden] + b[d, hidden:]
        act = _RNN_ACTIVATIONS[names[d]]
        for t in _times(attrs["direction"], d, _lengths(lens, seq, batch)[row]):
            h = act(_bound(x[t, row] @ w[d].T + h @ r[d].T + bias, attrs["clip"]))
            y[t, d, row] = h
        y_h[d, row] = h
    return [y, y_h]

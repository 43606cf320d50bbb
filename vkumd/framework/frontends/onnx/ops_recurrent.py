"""Converters of the recurrent layers: LSTM, GRU and RNN (opsets 7 to 22) onto ``lstm``,
``gru`` and ``rnn``.

``layout=1`` (batch first) runs as the layout-0 op between permutes. A ``sequence_lens``
known at import time whose every entry is the whole sequence is dropped (the plain layer);
any other is the op's int32 input. LSTM's and GRU's activations other than ONNX's defaults
are refused; RNN takes Tanh, Relu and Sigmoid (one per direction).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vkumd.compiler.kernels.recurrent import RNN_ACTIVATIONS
from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Value

_COMMON = ("activation_alpha", "activation_beta", "activations", "clip", "direction",
           "hidden_size", "layout")
_DEFAULTS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh")}


def _rnn_activations(attrs: dict[str, Any]) -> tuple[str, ...]:
    """RNN's activations (Tanh when not given), lower-cased; others refused."""
    for name in ("activation_alpha", "activation_beta"):
        if name in attrs:
            raise Unsupported(f"attribute {name}: vkumd's RNN takes Tanh, Relu and Sigmoid, "
                              "which take no parameters")
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    given = tuple(a.decode().lower() if isinstance(a, bytes) else str(a).lower()
                  for a in attrs.get("activations", [])) or ("tanh",) * dirs
    if len(given) != dirs or any(a not in RNN_ACTIVATIONS for a in given):
        raise Unsupported(f"attribute activations={list(given)}: vkumd's RNN takes one of "
                          f"{', '.join(a.capitalize() for a in RNN_ACTIVATIONS)} per direction "
                          f"({dirs} here)")
    return given


def _activations(op: str, attrs: dict[str, Any]) -> None:
    """Refuse activations other than the defaults (written out or left implicit)."""
    given = [a.decode() if isinstance(a, bytes) else str(a)
             for a in attrs.get("activations", [])]
    default = _DEFAULTS[op]
    if given and ([a.lower() for a in given] not in (list(default), list(default) * 2)):
        raise Unsupported(f"attribute activations={given}: vkumd's {op} takes only ONNX's "
                          f"defaults ({', '.join(a.capitalize() for a in default)} per "
                          "direction)")
    for name in ("activation_alpha", "activation_beta"):
        if name in attrs:
            raise Unsupported(f"attribute {name}: the default activations take no parameters "
                              f"and vkumd's {op} takes only those")


def _sequence_lens(st: State, node: onnx.NodeProto, seq: Any) -> Value | None:
    """The sequence_lens input, or None where it is absent or the whole sequence for every
    batch entry."""
    if not st.present(node, 4):
        return None
    known = st.known(node.input[4])
    if known is not None and isinstance(seq, int) and known.dtype != object:
        lens = np.asarray(known).reshape(-1)
        if lens.size and np.all(lens == seq):
            return None
    return st.value(node.input[4])


def _recurrent(st: State, node: onnx.NodeProto, attrs: dict[str, Any], op: str,
               extra: dict[str, Any]) -> list[Bound | None]:
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise Unsupported(f"attribute layout={layout}: ONNX defines 0 and 1")
    if op != "rnn":
        _activations(node.op_type, attrs)
    x = st.value(node.input[0])
    if len(x.shape) != 3:
        raise Unsupported(f"X has shape {tuple(x.shape)}; {node.op_type} takes a 3-D X")
    if layout == 1:
        x = st.b.permute(x, (1, 0, 2))
    # ONNX's optional inputs are the op's, in the same order: B, sequence_lens, initial_h
    # (and LSTM's initial_c, P).
    optional: list[Value | None] = []
    for i in range(3, 8 if op == "lstm" else 6):
        v = st.value(node.input[i]) if st.present(node, i) else None
        if i == 4:
            v = _sequence_lens(st, node, x.shape[0])
        elif v is not None and layout == 1 and i in (5, 6):
            v = st.b.permute(v, (1, 0, 2))  # initial states: [batch, dirs, hidden]
        optional.append(v)
    clip = attrs.get("clip")
    outs = st.b.op(op, x, st.value(node.input[1]), st.value(node.input[2]), *optional,
                   label=node.name or None, hidden_size=attrs.get("hidden_size"),
                   direction=str(attrs.get("direction", "forward")),
                   clip=None if clip is None else float(clip), **extra)
    if layout == 1:
        outs = (st.b.permute(outs[0], (2, 0, 1, 3)),
                *(st.b.permute(v, (1, 0, 2)) for v in outs[1:]))
    return list(outs)[:len(node.output)]


@converter("LSTM", attrs=(*_COMMON, "input_forget"))
def lstm(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """LSTM, with peepholes, initial states, clip and input_forget."""
    return _recurrent(st, node, attrs, "lstm",
                      {"input_forget": bool(attrs.get("input_forget", 0))})


@converter("GRU", attrs=(*_COMMON, "linear_before_reset"))
def gru(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """GRU, either linear_before_reset."""
    return _recurrent(st, node, attrs, "gru",
                      {"linear_before_reset": bool(attrs.get("linear_before_reset", 0))})


@converter("RNN", attrs=_COMMON)
def rnn(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The simple RNN, Tanh, Relu or Sigmoid per direction."""
    return _recurrent(st, node, attrs, "rnn", {"activations": _rnn_activations(attrs)})

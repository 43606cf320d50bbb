"""Converters of the recurrent layers: LSTM and GRU (opsets 7 to 22) onto ``lstm`` and
``gru``.

``layout=1`` (batch first) runs as the layout-0 op between permutes. ``sequence_lens`` is
taken when it is known at import time and every entry is the whole sequence (the layer is
then the plain one); anything else is refused, as are activations other than ONNX's
defaults.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Value

_COMMON = ("activation_alpha", "activation_beta", "activations", "clip", "direction",
           "hidden_size", "layout")
_DEFAULTS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh")}


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


def _sequence_lens(st: State, node: onnx.NodeProto, seq: Any) -> None:
    """Accept a sequence_lens that is the whole sequence for every batch entry."""
    if not st.present(node, 4):
        return
    known = st.known(node.input[4])
    if known is None or not isinstance(seq, int):
        raise Unsupported("sequence_lens computed at run time is not supported: vkumd runs "
                          "every batch entry for the whole sequence (drop the input, or make "
                          "it a constant equal to seq_length)")
    lens = np.asarray(known).reshape(-1)
    if lens.size and not np.all(lens == seq):
        raise Unsupported(f"sequence_lens={lens.tolist()[:8]} differs from seq_length {seq}: "
                          "sequences of different lengths are not supported (pad them and "
                          "drop sequence_lens)")


def _recurrent(st: State, node: onnx.NodeProto, attrs: dict[str, Any], op: str,
               extra: dict[str, Any]) -> list[Bound | None]:
    layout = int(attrs.get("layout", 0))
    if layout not in (0, 1):
        raise Unsupported(f"attribute layout={layout}: ONNX defines 0 and 1")
    _activations(node.op_type, attrs)
    x = st.value(node.input[0])
    if len(x.shape) != 3:
        raise Unsupported(f"X has shape {tuple(x.shape)}; {node.op_type} takes a 3-D X")
    if layout == 1:
        x = st.b.permute(x, (1, 0, 2))
    _sequence_lens(st, node, x.shape[0])
    optional: list[Value | None] = []
    names = (3, 5, 6, 7) if op == "lstm" else (3, 5)
    for i in names:
        v = st.value(node.input[i]) if st.present(node, i) else None
        if v is not None and layout == 1 and i in (5, 6):
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

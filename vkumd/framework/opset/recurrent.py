"""Recurrent layers as ONNX defines them: ``lstm``, ``gru`` and ``rnn`` over
``x[seq, batch, input]``, forward, reverse or bidirectional, each returning every output
(``Y``, ``Y_h`` and LSTM's ``Y_c``).

They run as GEMMs and a small cell kernel per time step (the plan is
:mod:`vkumd.compiler.kernels.recurrent_plan`'s). The activations are ONNX's defaults
(sigmoid for the gates, tanh for the candidate and the cell output); ``clip`` bounds every
activation's input; RNN's one activation per direction is tanh, relu or sigmoid. Weights
follow ONNX's layouts: ``w[dirs, G * H, input]``, ``r[dirs, G * H, H]``, ``b[dirs, 2 * G *
H]`` (the input biases, then the recurrent ones) with gates ``i, o, f, c`` (LSTM, G = 4),
``z, r, h`` (GRU, G = 3) and ``i`` (RNN, G = 1).
"""

from __future__ import annotations

import numbers
from typing import Any

from vkumd.compiler.kernels.limits import RECURRENT_DTYPES
from vkumd.compiler.kernels.recurrent import RNN_ACTIVATIONS
from vkumd.compiler.kernels.recurrent_plan import GATES, RecurrentProblem, recurrent_plan
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, flag, real, same_dtype
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, live_inputs, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.recurrent_reference import (
    DIRECTIONS,
    gru_reference,
    lstm_reference,
    rnn_reference,
)
from vkumd.framework.tensor import Tensor

_VERDICTS: Verdicts = {}
LSTM_INPUTS = ("x", "w", "r", "b?", "sequence_lens?", "initial_h?", "initial_c?", "p?")
GRU_INPUTS = ("x", "w", "r", "b?", "sequence_lens?", "initial_h?")


def _expect(op: str, what: str, t: TensorType | None, want: tuple[Any, ...], meaning: str,
            dims: DimTable) -> None:
    """Refuse ``t`` unless its shape is ``want`` (entries may be symbolic)."""
    if t is None:
        return
    if t.ndim != len(want) or not all(dims.same(a, b) for a, b in zip(t.shape, want,
                                                                        strict=False)):
        raise VkumdValueError(f"{op}: {what} has shape {format_shape(t.shape)}; expected "
                              f"{format_shape(want)} ({meaning})")


def _rule(op: str, ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    gates = GATES[op]
    names = ("x", "w", "r", "b", "initial_h", "initial_c", "p")
    x, w, r, lens = ins[0], ins[1], ins[2], ins[4]
    assert x is not None and w is not None and r is not None  # required inputs
    floats = ins[:4] + ins[5:]
    dt = same_dtype(op, *zip(names, floats, strict=False))
    if dt.name not in RECURRENT_DTYPES:
        raise VkumdTypeError(f"{op}: x is {dt.name}; {op} takes {', '.join(RECURRENT_DTYPES)} "
                             "(cast() converts)")
    direction = attrs["direction"]
    if direction not in DIRECTIONS:
        raise VkumdValueError(f"{op}: direction={direction!r}; use one of "
                              f"{', '.join(repr(d) for d in DIRECTIONS)}")
    dirs = DIRECTIONS[direction]
    if x.ndim != 3 or w.ndim != 3 or r.ndim != 3:
        raise VkumdValueError(f"{op}: x {format_shape(x.shape)}, w {format_shape(w.shape)} and "
                              f"r {format_shape(r.shape)} must be 3-D: x [seq, batch, input], "
                              f"w [directions, {gates} * hidden, input], r [directions, "
                              f"{gates} * hidden, hidden]")
    hidden = dims.resolve(r.shape[2])
    size = attrs["hidden_size"]
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
            raise VkumdValueError(f"{op}: hidden_size={size!r}; it must be an int >= 1")
        if not dims.same(size, hidden):
            raise VkumdValueError(f"{op}: hidden_size={size} but r {format_shape(r.shape)} "
                                  f"holds {hidden} hidden units (r is [directions, {gates} * "
                                  "hidden_size, hidden_size])")
    if not isinstance(hidden, int):
        raise VkumdValueError(f"{op}: the hidden size must be a fixed number, got "
                              f"r {format_shape(r.shape)}")
    seq, batch, inputs = x.shape
    layout = f"{direction}: {dirs} direction(s), {gates} gates of hidden_size {hidden}"
    _expect(op, "w", w, (dirs, gates * hidden, inputs), f"[directions, {gates} * hidden, "
            f"input] for {layout}", dims)
    _expect(op, "r", r, (dirs, gates * hidden, hidden), f"[directions, {gates} * hidden, "
            f"hidden] for {layout}", dims)
    _expect(op, "b", ins[3], (dirs, 2 * gates * hidden), "[directions, 2 * "
            f"{gates} * hidden]: input biases then recurrent ones, for {layout}", dims)
    if lens is not None:
        if lens.dtype.name != "int32":
            raise VkumdTypeError(f"{op}: sequence_lens is {lens.dtype.name}; it takes int32")
        _expect(op, "sequence_lens", lens, (batch,), "[batch]: each batch row's length", dims)
    state = (dirs, batch, hidden)
    _expect(op, "initial_h", ins[5], state, "[directions, batch, hidden]", dims)
    if op == "lstm":
        _expect(op, "initial_c", ins[6], state, "[directions, batch, hidden]", dims)
        _expect(op, "p", ins[7], (dirs, 3 * hidden), "[directions, 3 * hidden]: the i, o "
                "and f peepholes", dims)
        flag(op, attrs["input_forget"], "input_forget")
    elif op == "gru":
        flag(op, attrs["linear_before_reset"], "linear_before_reset")
    else:
        rnn_activations(attrs["activations"], dirs)
    if attrs["clip"] is not None and real(op, attrs["clip"], "clip") <= 0:
        raise VkumdValueError(f"{op}: clip={attrs['clip']!r}; it must be > 0 (None: no clip)")
    outs = [TensorType((seq, dirs, batch, hidden), dt), TensorType(state, dt)]
    return outs + [TensorType(state, dt)] if op == "lstm" else outs


def rnn_activations(given: Any, dirs: int) -> tuple[str, ...]:
    """RNN's activation per direction from ``given`` (one name for every direction, or one
    per direction).

    Raises:
        VkumdValueError: not a sequence of 1 or ``dirs`` known names.
    """
    if isinstance(given, str):
        given = (given,)
    if not isinstance(given, (tuple, list)) or len(given) not in (1, dirs) or not all(
            a in RNN_ACTIVATIONS for a in given):
        raise VkumdValueError(f"rnn: activations={given!r}; give 1 or {dirs} (one per "
                              f"direction) of {', '.join(RNN_ACTIVATIONS)}")
    return tuple(given) * (dirs // len(given))


def _run(op: str, ins: list[Tensor | None], attrs: dict[str, Any],
         out: tuple[Tensor, ...] | None) -> tuple[Tensor, ...]:
    """Check a call with the op's rule and run its plan."""
    x = live_inputs(op, ins[0], [(t, name) for t, name in zip(
        ins[1:], (LSTM_INPUTS if op == "lstm" else GRU_INPUTS)[1:], strict=True)])
    key = (op, *((None if t is None else (t.shape, t.dtype.name)) for t in ins),
           *((k, v, type(v)) for k, v in sorted(attrs.items())))
    types = recall(_VERDICTS, key)
    if types is None:
        types = remember(_VERDICTS, key, concrete_rule(op, ins, attrs))
    context = x.context
    if x.dtype.itemsize < 4:
        check_storage(op, x.dtype, context)
    if not context.caps.buffer_device_address:
        raise CapabilityMissing(f"{op}: the GEMM kernel reads through buffer device "
                                f"addresses, which {context.caps.name} lacks")
    if out is not None and (not isinstance(out, (tuple, list)) or len(out) != len(types)):
        raise VkumdValueError(f"{op}: out= must be a tuple of {len(types)} tensors "
                              f"({'Y, Y_h, Y_c' if op == 'lstm' else 'Y, Y_h'})")
    results = tuple(output(op, context, None if out is None else out[i],
                           tuple(int(d) for d in t.shape), t.dtype, ins)
                    for i, t in enumerate(types))
    seq, batch, inputs = x.shape
    hidden = results[1].shape[2]
    if batch == 0 or hidden == 0:
        return results
    padded = list(ins) + [None] * (8 - len(ins))
    w, r, b, lens, h0, c0, p = padded[1:]
    assert w is not None and r is not None
    direction = attrs["direction"]
    reverse = {"forward": 0, "reverse": 1, "bidirectional": 2}[direction]
    clip = attrs.get("clip")
    problem = RecurrentProblem(
        op, x.dtype.name, seq, batch, inputs, hidden, DIRECTIONS[direction], reverse,
        b is not None, lens is not None, p is not None, h0 is not None, c0 is not None,
        bool(attrs.get("input_forget", False)), None if clip is None else float(clip),
        bool(attrs.get("linear_before_reset", False)),
        (x.address % 16, w.address % 16, r.address % 16,
         0 if h0 is None else h0.address % 16, results[1].address % 16),
        rnn_activations(attrs["activations"], DIRECTIONS[direction]) if op == "rnn" else ())
    plan = recurrent_plan(context.caps, problem)
    y_c = results[2] if op == "lstm" else None
    context.run(plan, (x, w, r, b, lens, h0, c0, p, results[0], results[1], y_c))
    return results


def lstm(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, *,
         sequence_lens: Tensor | None = None, initial_h: Tensor | None = None,
         initial_c: Tensor | None = None,
         p: Tensor | None = None, hidden_size: int | None = None, direction: str = "forward",
         clip: float | None = None, input_forget: bool = False,
         out: tuple[Tensor, Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """An ONNX LSTM layer (layout 0): ``Y, Y_h, Y_c``.

    Per step and direction: ``i = σ(x W_i^T + h R_i^T + b_i + p_i * c)``, ``f`` likewise
    (``1 - i`` with ``input_forget``), ``c = f * c + i * tanh(x W_c^T + h R_c^T + b_c)``,
    ``o = σ(... + p_o * c)``, ``h = o * tanh(c)``; GEMMs accumulate in float32.

    Args:
        x: ``[seq, batch, input]``, float32 or float16.
        w: ``[dirs, 4 * hidden, input]`` (gates i, o, f, c); r: ``[dirs, 4 * hidden, hidden]``.
        b: optional ``[dirs, 8 * hidden]``: the input biases, then the recurrent ones.
        sequence_lens: optional int32 ``[batch]``: row ``i`` runs its first
            ``sequence_lens[i]`` steps (clamped to [0, seq]); Y is zero past them and
            Y_h / Y_c hold the state after the last of them.
        initial_h, initial_c: optional ``[dirs, batch, hidden]`` states (zeros when absent).
        p: optional ``[dirs, 3 * hidden]`` peepholes (i, o, f).
        hidden_size: checked against r's shape when given.
        direction: ``"forward"``, ``"reverse"`` or ``"bidirectional"`` (dirs 1, 1, 2).
        clip: bound of every activation's input (None: none); > 0.
        input_forget: couple the forget gate to the input gate.
        out: optional ``(Y, Y_h, Y_c)`` to write.

    Returns:
        ``Y [seq, dirs, batch, hidden]`` (every step's h), ``Y_h`` and ``Y_c``
        ``[dirs, batch, hidden]`` (the last step's, per direction).

    Raises:
        VkumdTypeError: non-tensors, mixed or unsupported dtypes, non-bool flags.
        VkumdValueError: shapes that do not match the layout, an unknown direction, a
            hidden_size that r contradicts, clip <= 0, no time step, out= of the wrong
            shapes, tensors of other contexts.
        CapabilityMissing: float16 without 16-bit storage; no buffer device addresses.
    """
    attrs = {"hidden_size": hidden_size, "direction": direction, "clip": clip,
             "input_forget": input_forget}
    y, y_h, y_c = _run("lstm", [x, w, r, b, sequence_lens, initial_h, initial_c, p], attrs,
                       out)
    return y, y_h, y_c


def gru(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, *,
        sequence_lens: Tensor | None = None, initial_h: Tensor | None = None,
        hidden_size: int | None = None,
        direction: str = "forward", clip: float | None = None,
        linear_before_reset: bool = False,
        out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """An ONNX GRU layer (layout 0): ``Y, Y_h``.

    Per step and direction: ``z = σ(x W_z^T + h R_z^T + b_z)``, ``r`` likewise,
    ``n = tanh(x W_h^T + (r * h) R_h^T + Rb_h + Wb_h)`` (with ``linear_before_reset``:
    ``r * (h R_h^T + Rb_h)``), ``h = (1 - z) * n + z * h``.

    Args:
        x: ``[seq, batch, input]``, float32 or float16.
        w: ``[dirs, 3 * hidden, input]`` (gates z, r, h); r: ``[dirs, 3 * hidden, hidden]``.
        b: optional ``[dirs, 6 * hidden]``: the input biases, then the recurrent ones.
        sequence_lens: optional int32 ``[batch]``, as :func:`lstm`'s.
        initial_h: optional ``[dirs, batch, hidden]`` (zeros when absent).
        hidden_size: checked against r's shape when given.
        direction: ``"forward"``, ``"reverse"`` or ``"bidirectional"``.
        clip: bound of every activation's input (None: none); > 0.
        linear_before_reset: apply the reset gate after the recurrent GEMM (torch's GRU).
        out: optional ``(Y, Y_h)`` to write.

    Returns:
        ``Y [seq, dirs, batch, hidden]`` and ``Y_h [dirs, batch, hidden]``.

    Raises:
        VkumdTypeError, VkumdValueError, CapabilityMissing: as :func:`lstm`.
    """
    attrs = {"hidden_size": hidden_size, "direction": direction, "clip": clip,
             "linear_before_reset": linear_before_reset}
    y, y_h = _run("gru", [x, w, r, b, sequence_lens, initial_h], attrs, out)
    return y, y_h


def rnn(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, *,
        sequence_lens: Tensor | None = None, initial_h: Tensor | None = None,
        hidden_size: int | None = None, direction: str = "forward", clip: float | None = None,
        activations: tuple[str, ...] = ("tanh",),
        out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """An ONNX RNN layer (layout 0): ``Y, Y_h``.

    Per step and direction: ``h = f(x W_i^T + h R_i^T + Wb_i + Rb_i)``; GEMMs accumulate in
    float32.

    Args:
        x: ``[seq, batch, input]``, float32 or float16.
        w: ``[dirs, hidden, input]``; r: ``[dirs, hidden, hidden]``.
        b: optional ``[dirs, 2 * hidden]``: the input bias, then the recurrent one.
        sequence_lens: optional int32 ``[batch]``, as :func:`lstm`'s.
        initial_h: optional ``[dirs, batch, hidden]`` (zeros when absent).
        hidden_size: checked against r's shape when given.
        direction: ``"forward"``, ``"reverse"`` or ``"bidirectional"``.
        clip: bound of the activation's input (None: none); > 0.
        activations: ``f``: ``"tanh"``, ``"relu"`` or ``"sigmoid"``, one for every
            direction or one per direction.
        out: optional ``(Y, Y_h)`` to write.

    Returns:
        ``Y [seq, dirs, batch, hidden]`` and ``Y_h [dirs, batch, hidden]``.

    Raises:
        VkumdTypeError, VkumdValueError, CapabilityMissing: as :func:`lstm`; unknown
            activations or a count other than 1 or the directions' (VkumdValueError).
    """
    attrs = {"hidden_size": hidden_size, "direction": direction, "clip": clip,
             "activations": tuple(activations) if isinstance(activations, list)
             else activations}
    y, y_h = _run("rnn", [x, w, r, b, sequence_lens, initial_h], attrs, out)
    return y, y_h


def _lstm_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    _run("lstm", ins, attrs_of(node), tuple(outs))


def _gru_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    _run("gru", ins, attrs_of(node), tuple(outs))


def _rnn_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    _run("rnn", ins, attrs_of(node), tuple(outs))


_COMMON = {"hidden_size": None, "direction": "forward", "clip": None}
define("lstm", LSTM_INPUTS, {**_COMMON, "input_forget": False},
       rule=lambda ins, at, dims: _rule("lstm", ins, at, dims),
       reference=lambda a, at, s: lstm_reference(*a, at), lower=_lstm_lower, eager=lstm)
define("gru", GRU_INPUTS, {**_COMMON, "linear_before_reset": False},
       rule=lambda ins, at, dims: _rule("gru", ins, at, dims),
       reference=lambda a, at, s: gru_reference(*a, at), lower=_gru_lower, eager=gru)
define("rnn", GRU_INPUTS, {**_COMMON, "activations": ("tanh",)},
       rule=lambda ins, at, dims: _rule("rnn", ins, at, dims),
       reference=lambda a, at, s: rnn_reference(*a, at), lower=_rnn_lower, eager=rnn)

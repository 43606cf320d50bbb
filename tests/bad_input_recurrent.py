"""Bad calls of the recurrent layers (``ops.lstm``, ``ops.gru``, ``ops.rnn``), in
:mod:`bad_input_ops`'s ``Case(id, call, error, message fragment)`` form. The ONNX-only
refusals (activations, layout) are tests/frontends/test_onnx_recurrent.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bad_input_env import Case, Env

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError

C = Case
TE, VE = VkumdTypeError, VkumdValueError


def _x(e: Env, dtype: str = "float32") -> Any:
    return e.t((3, 2, 5), dtype)


def _lstm(e: Env, **kw: Any) -> Any:
    """An LSTM of hidden size 7 over x [3, 2, 5], with ``kw`` replacing its arguments."""
    args = {"x": _x(e), "w": e.t((1, 28, 5)), "r": e.t((1, 28, 7))}
    args.update({k: v for k, v in kw.items() if k in args})
    rest = {k: v for k, v in kw.items() if k not in args}
    return ops.lstm(args["x"], args["w"], args["r"], **rest)


# The one-tensor call every op's first argument is checked with.
RECURRENT_UNARY: dict[str, Callable[[Env, Any], Any]] = {
    "lstm": lambda e, x: ops.lstm(x, e.t((1, 8, 3)), e.t((1, 8, 2))),
    "gru": lambda e, x: ops.gru(x, e.t((1, 6, 3)), e.t((1, 6, 2))),
    "rnn": lambda e, x: ops.rnn(x, e.t((1, 2, 3)), e.t((1, 2, 2))),
}

RECURRENT = [
    C("rnn_activation_unknown",
      lambda e: ops.rnn(_x(e), e.t((1, 7, 5)), e.t((1, 7, 7)), activations=("gelu",)), VE,
      "activations=('gelu',)"),
    C("rnn_activations_per_direction_count",
      lambda e: ops.rnn(_x(e), e.t((1, 7, 5)), e.t((1, 7, 7)), activations=("tanh", "relu")),
      VE, "give 1 or 1"),
    C("lstm_w_wrong_shape", lambda e: _lstm(e, w=e.t((1, 28, 4))), VE, "w has shape"),
    C("lstm_hidden_size_mismatch", lambda e: _lstm(e, hidden_size=8), VE, "hidden_size=8"),
    C("lstm_hidden_size_zero", lambda e: _lstm(e, hidden_size=0), VE, "hidden_size=0"),
    C("lstm_direction_unknown", lambda e: _lstm(e, direction="both"), VE, "direction='both'"),
    C("lstm_bidirectional_one_direction_of_weights",
      lambda e: _lstm(e, direction="bidirectional"), VE, "w has shape"),
    C("lstm_clip_zero", lambda e: _lstm(e, clip=0.0), VE, "clip=0.0"),
    C("lstm_clip_nan", lambda e: _lstm(e, clip=float("nan")), VE, "clip"),
    C("lstm_input_forget_int", lambda e: _lstm(e, input_forget=1), TE, "input_forget"),
    C("lstm_bias_wrong_shape", lambda e: ops.lstm(_x(e), e.t((1, 28, 5)), e.t((1, 28, 7)),
                                                  e.t((1, 28))), VE, "b has shape"),
    C("lstm_peepholes_wrong_shape", lambda e: _lstm(e, p=e.t((1, 20))), VE, "p has shape"),
    C("lstm_initial_h_wrong_batch", lambda e: _lstm(e, initial_h=e.t((1, 3, 7))), VE,
      "initial_h has shape"),
    C("lstm_sequence_lens_float", lambda e: _lstm(e, sequence_lens=e.t((2,))), TE,
      "sequence_lens is float32"),
    C("lstm_sequence_lens_wrong_batch", lambda e: _lstm(e, sequence_lens=e.ints([3, 3, 3])),
      VE, "sequence_lens has shape"),
    C("lstm_x_2d", lambda e: _lstm(e, x=e.t((3, 5))), VE, "must be 3-D"),
    C("lstm_no_time_step", lambda e: _lstm(e, x=e.t((0, 2, 5))), VE, "no time step"),
    C("lstm_int32", lambda e: ops.lstm(_x(e, "int32"), e.t((1, 28, 5), "int32"),
                                       e.t((1, 28, 7), "int32")), TE, "int32"),
    C("lstm_mixed_dtypes", lambda e: _lstm(e, x=_x(e, "float16")), TE, "share a dtype"),
    C("lstm_out_one_tensor", lambda e: _lstm(e, out=(e.t((3, 1, 2, 7)),)), VE,
      "tuple of 3 tensors"),
    C("lstm_out_wrong_shape",
      lambda e: _lstm(e, out=(e.t((3, 1, 2, 6)), e.t((1, 2, 7)), e.t((1, 2, 7)))), VE,
      "out= has shape"),
    C("lstm_r_other_context", lambda e: _lstm(e, r=e.t((1, 28, 7), ctx=e.other)), VE,
      "different context"),
    C("gru_lstm_weights", lambda e: ops.gru(_x(e), e.t((1, 28, 5)), e.t((1, 28, 7))), VE,
      "3 * hidden"),
    C("gru_linear_before_reset_str",
      lambda e: ops.gru(_x(e), e.t((1, 21, 5)), e.t((1, 21, 7)), linear_before_reset="yes"),
      TE, "linear_before_reset"),
    C("gru_clip_1e300", lambda e: ops.gru(_x(e), e.t((1, 21, 5)), e.t((1, 21, 7)), clip=1e300),
      VE, "outside float32's range"),
]

"""Bad calls of every op in ``vkumd.ops``: non-tensors, released and closed tensors, mixed
contexts, dtypes, shapes, scalars, keywords and ``out=``. Each is
``Case(id, call, error, message fragment)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from bad_input_env import Case, Env
from bad_input_recurrent import RECURRENT, RECURRENT_UNARY

from vkumd import ops
from vkumd.errors import ContextClosed, VkumdTypeError, VkumdValueError
from vkumd.framework.graph import OPS
from vkumd.framework.opset.common import one_step

C = Case
TE, VE = VkumdTypeError, VkumdValueError
NAN, INF = float("nan"), float("inf")


def _q(env: Env, shape: tuple[int, ...] = (1, 2, 4, 8), dtype: str = "float32") -> Any:
    return env.t(shape, dtype)


RELU_OF_SUM = (("add", 0, 1), ("relu", 2))  # a fused_elementwise program of two inputs

# One call per op with its first tensor argument replaced: every op must refuse a numpy
# array, a released tensor and a tensor of a closed context the same way.
UNARY: dict[str, Callable[[Env, Any], Any]] = {
    "add": lambda e, x: ops.add(x, e.t()),
    "sub": lambda e, x: ops.sub(e.t(), x),
    "mul": lambda e, x: ops.mul(x, e.t()),
    "div": lambda e, x: ops.div(e.t(), x),
    "cast": lambda e, x: ops.cast(x, "float16"),
    "copy": lambda e, x: ops.copy(x),
    "fill": lambda e, x: ops.fill(x, 1.0),
    "scale": lambda e, x: ops.scale(x, 2.0),
    "embedding": lambda e, x: ops.embedding(e.ints([0, 1]), x),
    "qembedding": lambda e, x: ops.qembedding(e.ints([0, 1]), x, qtype="Q8_0", dim=32),
    "qmatmul": lambda e, x: ops.qmatmul(e.t((2, 32)), x, qtype="Q8_0", in_features=32),
    "permute": lambda e, x: ops.permute(x, (1, 0)),
    "transpose": lambda e, x: ops.transpose(x, 0, 1),
    "matmul": lambda e, x: ops.matmul(e.t((3, 2)), x),
    "layer_norm": lambda e, x: ops.layer_norm(x),
    "rms_norm": lambda e, x: ops.rms_norm(x),
    "sum": lambda e, x: ops.sum(x),
    "mean": lambda e, x: ops.mean(x),
    "max": lambda e, x: ops.max(x),
    "softmax": lambda e, x: ops.softmax(x),
    "relu": lambda e, x: ops.relu(x),
    "gelu": lambda e, x: ops.gelu(x),
    "gelu_tanh": lambda e, x: ops.gelu_tanh(x),
    "silu": lambda e, x: ops.silu(x),
    "attention": lambda e, x: ops.attention(x, _q(e), _q(e)),
    "eq": lambda e, x: ops.eq(x, e.t()),
    "ne": lambda e, x: ops.ne(e.t(), x),
    "lt": lambda e, x: ops.lt(x, 1.0),
    "le": lambda e, x: ops.le(2.0, x),
    "gt": lambda e, x: ops.gt(x, e.t()),
    "ge": lambda e, x: ops.ge(x, e.t()),
    "reshape": lambda e, x: ops.reshape(x, (6,)),
    "flatten": lambda e, x: ops.flatten(x),
    "squeeze": lambda e, x: ops.squeeze(x),
    "unsqueeze": lambda e, x: ops.unsqueeze(x, 0),
    "slice": lambda e, x: ops.slice(x, 0, 1),
    "concat": lambda e, x: ops.concat([x, e.t()]),
    "split": lambda e, x: ops.split(x, 1),
    "add_layer_norm": lambda e, x: ops.add_layer_norm(e.t(), x),
    "fused_elementwise": lambda e, x: ops.fused_elementwise([e.t(), x], RELU_OF_SUM),
    "swiglu": lambda e, x: ops.swiglu(e.t(), x),
    "argmax": lambda e, x: ops.argmax(x),
    "rope": lambda e, x: ops.rope(x, e.ints([0, 1]), theta=10000.0),
    "kv_write": lambda e, x: ops.kv_write(x, e.t((2, 1, 1, 4)), e.ints([0, 1])),
    "conv2d": lambda e, x: ops.conv2d(x, e.t((2, 3, 3, 3))),
    "max_pool2d": lambda e, x: ops.max_pool2d(x, (2, 2)),
    "avg_pool2d": lambda e, x: ops.avg_pool2d(x, (2, 2)),
    "global_avg_pool": lambda e, x: ops.global_avg_pool(x),
    "batch_norm": lambda e, x: ops.batch_norm(x, e.t((3,)), e.t((3,)), e.t((3,)), e.t((3,))),
}
UNARY.update(RECURRENT_UNARY)
# Every op whose public function the registry generates (a one-input float op running as a
# generated kernel: exp, hardswish, ...) takes the same one-tensor call.
UNARY.update({name: (lambda n: lambda e, x: getattr(ops, n)(x))(name)
              for name, op in OPS.items()
              if op.lower is one_step and op.eager is not None and name not in UNARY})


def _each_op() -> list[Case]:
    cases = []
    for name, call in UNARY.items():
        cases += [
            C(f"{name}_numpy_array", lambda e, c=call: c(e, np.ones((2, 3), np.float32)), TE,
              "must be a vkumd Tensor"),
            C(f"{name}_released", lambda e, c=call: c(e, e.released()), VE, "was released"),
            C(f"{name}_closed_context", lambda e, c=call: c(e, e.closed()), ContextClosed,
              "was closed"),
        ]
    return cases


MIXED = [
    C("add_mixed_contexts", lambda e: ops.add(e.t(), e.t(ctx=e.other)), VE,
      "different context"),
    C("matmul_mixed_contexts", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2), ctx=e.other)),
      VE, "different context"),
    C("matmul_bias_other_context",
      lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)), bias=e.t((2,), ctx=e.other)), VE,
      "different context"),
    C("layer_norm_weight_other_context",
      lambda e: ops.layer_norm(e.t(), e.t((3,), ctx=e.other)), VE, "different context"),
    C("softmax_mask_other_context", lambda e: ops.softmax(e.t(), mask=e.t(ctx=e.other)), VE,
      "different context"),
    C("embedding_table_other_context",
      lambda e: ops.embedding(e.ints([0]), e.t((2, 3), ctx=e.other)), VE, "different context"),
    C("attention_k_other_context",
      lambda e: ops.attention(_q(e), e.other.tensor(np.ones((1, 2, 4, 8), np.float32)),
                              _q(e)), VE, "different contexts"),
    C("relu_out_other_context", lambda e: ops.relu(e.t(), out=e.t(ctx=e.other)), VE,
      "different context"),
]

DTYPES = [
    C("add_dtype_mismatch", lambda e: ops.add(e.t(), e.t(dtype="float16")), TE,
      "dtypes differ"),
    C("add_int8", lambda e: ops.add(e.t(dtype="int8"), e.t(dtype="int8")), TE,
      "not supported"),
    C("mul_uint8", lambda e: ops.mul(e.t(dtype="uint8"), e.t(dtype="uint8")), TE,
      "not supported"),
    C("div_int32_true_division", lambda e: ops.div(e.t(dtype="int32"), e.t(dtype="int32")),
      TE, "true division"),
    C("cast_to_float64", lambda e: ops.cast(e.t(), "float64"), TE, "not supported"),
    C("cast_to_int8", lambda e: ops.cast(e.t(), "int8"), TE, "cast takes"),
    C("cast_from_uint8", lambda e: ops.cast(e.t(dtype="uint8"), "float32"), TE,
      "not supported"),
    C("copy_out_other_dtype", lambda e: ops.copy(e.t(), out=e.t(dtype="int32")), TE,
      "use cast()"),
    C("relu_int32", lambda e: ops.relu(e.t(dtype="int32")), TE, "not supported"),
    C("gelu_uint8", lambda e: ops.gelu(e.t(dtype="uint8")), TE, "not supported"),
    C("sum_int32", lambda e: ops.sum(e.t(dtype="int32")), TE, "not supported"),
    C("softmax_mask_dtype", lambda e: ops.softmax(e.t(), mask=e.t(dtype="float16")), TE,
      "cast it"),
    C("layer_norm_int32", lambda e: ops.layer_norm(e.t(dtype="int32")), TE, "not supported"),
    C("rms_norm_weight_dtype", lambda e: ops.rms_norm(e.t(), e.t((3,), "float16")), TE,
      "cast it"),
    C("matmul_int32", lambda e: ops.matmul(e.t((2, 2), "int32"), e.t((2, 2), "int32")), TE,
      "not supported"),
    C("matmul_dtype_mismatch", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2), "float16")), TE,
      "same dtype"),
    C("matmul_bias_dtype", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)),
                                                bias=e.t((2,), "float16")), TE, "bias is"),
    C("matmul_out_dtype", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)),
                                               out=e.t((2, 2), "float16")), TE, "out= is"),
    C("matmul_int8_epilogue", lambda e: ops.matmul(e.t((2, 2), "int8"), e.t((2, 2), "int8"),
                                                   alpha=2.0), VE, "int32 product only"),
    C("embedding_float_ids", lambda e: ops.embedding(e.t((2,)), e.t((3, 4))), TE,
      "must be int32"),
    C("embedding_uint8_table", lambda e: ops.embedding(e.ints([0]), e.t((3, 4), "uint8")),
      TE, "not supported"),
    C("attention_int32", lambda e: ops.attention(*(_q(e, dtype="int32"),) * 3), TE,
      "float32 or float16"),
    C("attention_bfloat16", lambda e: ops.attention(*(_q(e, dtype="bfloat16"),) * 3), TE,
      "float32 or float16"),
    C("attention_mixed_dtypes", lambda e: ops.attention(_q(e), _q(e, dtype="float16"),
                                                        _q(e, dtype="float16")), TE,
      "share a dtype"),
    C("attention_mask_int32", lambda e: ops.attention(_q(e), _q(e), _q(e),
                                                      attn_mask=e.t((4, 4), "int32")), TE,
      "additive"),
    C("attention_key_lengths_float_tensor",
      lambda e: ops.attention(_q(e), _q(e), _q(e), key_lengths=e.t((1,))), TE,
      "must be int32"),
]

SHAPES = [
    C("add_no_broadcast", lambda e: ops.add(e.t((2, 3)), e.t((4,))), VE, "do not broadcast"),
    C("add_seven_dims", lambda e: ops.add(e.t((1,) * 7), e.t((1,) * 7)), VE, "at most 6"),
    C("copy_does_not_broadcast_into_out", lambda e: ops.copy(e.t((2, 3)), out=e.t((1, 3))), VE,
      "does not broadcast into out="),
    C("matmul_1d", lambda e: ops.matmul(e.t((3,)), e.t((3, 2))), VE, "at least 2 dimensions"),
    C("matmul_inner_mismatch", lambda e: ops.matmul(e.t((2, 3)), e.t((4, 2))), VE,
      "inner dimensions differ"),
    C("matmul_batch_mismatch", lambda e: ops.matmul(e.t((2, 2, 3)), e.t((3, 3, 2))), VE,
      "batch dimensions"),
    C("matmul_bias_shape", lambda e: ops.matmul(e.t((2, 3)), e.t((3, 4)), bias=e.t((3,))), VE,
      "bias has shape"),
    C("matmul_residual_shape", lambda e: ops.matmul(e.t((2, 3)), e.t((3, 4)),
                                                    residual=e.t((4, 2))), VE,
      "residual has shape"),
    C("layer_norm_0d", lambda e: ops.layer_norm(e.ctx.zeros(())), VE, "0-d"),
    C("layer_norm_weight_shape", lambda e: ops.layer_norm(e.t(), e.t((2,))), VE,
      "weight has shape"),
    C("mean_empty_last_dim", lambda e: ops.mean(e.ctx.zeros((2, 0))), VE, "undefined"),
    C("max_0d", lambda e: ops.max(e.ctx.zeros(())), VE, "0-d"),
    C("softmax_mask_grows_x", lambda e: ops.softmax(e.t((2, 3)), mask=e.t((4, 2, 3))), VE,
      "does not broadcast"),
    C("embedding_table_3d", lambda e: ops.embedding(e.ints([0]), e.t((2, 3, 4))), VE, "2-D"),
    C("transpose_0d", lambda e: ops.transpose(e.ctx.zeros(()), 0, 0), VE, "0-d"),
    C("transpose_dim_out_of_range", lambda e: ops.transpose(e.t(), 0, 2), VE, "out of range"),
    C("permute_not_a_permutation", lambda e: ops.permute(e.t(), (0, 0)), VE,
      "not a permutation"),
    C("permute_dim_out_of_range", lambda e: ops.permute(e.t(), (0, 5)), VE, "out of range"),
    C("attention_3d", lambda e: ops.attention(*(e.t((2, 4, 8)),) * 3), VE, "must be 4-D"),
    C("attention_head_dim", lambda e: ops.attention(*(_q(e, (1, 1, 4, 6)),) * 3), VE,
      "head_dim 6"),
    C("attention_heads_not_divisible", lambda e: ops.attention(_q(e, (1, 3, 4, 8)), _q(e),
                                                               _q(e)), VE, "not a multiple"),
    C("attention_k_v_shapes", lambda e: ops.attention(_q(e), _q(e), _q(e, (1, 2, 5, 8))), VE,
      "same shape"),
    C("attention_mask_shape", lambda e: ops.attention(_q(e), _q(e), _q(e),
                                                      attn_mask=e.t((3, 4))), VE,
      "does not broadcast"),
    C("attention_key_lengths_count", lambda e: ops.attention(_q(e), _q(e), _q(e),
                                                             key_lengths=[1, 2]), VE,
      "expected 1"),
    C("attention_key_lengths_past_k_len", lambda e: ops.attention(_q(e), _q(e), _q(e),
                                                                  key_lengths=[5]), VE,
      "outside [0, k_len=4]"),
]

SCALARS = [
    C("fill_int32_nan", lambda e: ops.fill(e.t(dtype="int32"), NAN), VE, "not an integer"),
    C("fill_int32_inf", lambda e: ops.fill(e.t(dtype="int32"), INF), VE, "not an integer"),
    C("fill_int32_past_range", lambda e: ops.fill(e.t(dtype="int32"), 2**31), VE,
      "does not fit in int32"),
    C("fill_bool", lambda e: ops.fill(e.t(), True), TE, "not bool"),
    C("fill_string", lambda e: ops.fill(e.t(), "1"), TE, "not str"),
    C("fill_complex", lambda e: ops.fill(e.t(), 1j), TE, "not complex"),
    C("scale_string", lambda e: ops.scale(e.t(), "2"), TE, "real number"),
    C("scale_int32_fraction", lambda e: ops.scale(e.t(dtype="int32"), 1.5), VE,
      "not an integer"),
    C("scale_bool", lambda e: ops.scale(e.t(), False), TE, "not bool"),
    C("matmul_alpha_nan", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)), alpha=NAN), VE,
      "not finite"),
    C("matmul_alpha_inf", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)), alpha=INF), VE,
      "not finite"),
    C("matmul_beta_bool", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)), beta=True), TE,
      "real number"),
    C("matmul_beta_without_out", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)), beta=0.5),
      VE, "needs out="),
    C("layer_norm_eps_nan", lambda e: ops.layer_norm(e.t(), eps=NAN), VE, ">= 0"),
    C("rms_norm_eps_negative", lambda e: ops.rms_norm(e.t(), eps=-1e-6), VE, ">= 0"),
    C("layer_norm_eps_string", lambda e: ops.layer_norm(e.t(), eps="1e-5"), TE,
      "real number"),
    C("softmax_scale_string", lambda e: ops.softmax(e.t(), scale="2"), TE, "real number"),
    C("attention_scale_inf", lambda e: ops.attention(_q(e), _q(e), _q(e), scale=INF), VE,
      "not finite"),
    C("attention_scale_bool", lambda e: ops.attention(_q(e), _q(e), _q(e), scale=True), TE,
      "real number"),
]

KEYWORDS = [
    C("matmul_trans_a_yes", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)), trans_a="yes"),
      TE, "trans_a must be a bool"),
    C("matmul_trans_b_int", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)), trans_b=1), TE,
      "trans_b must be a bool"),
    C("matmul_activation_tanh", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)),
                                                     activation="tanh"), VE,
      "activation='tanh'"),
    C("matmul_variant_unknown", lambda e: ops.matmul(e.t((2, 2)), e.t((2, 2)),
                                                     variant="fast"), VE, "variant='fast'"),
    C("div_rounding_round", lambda e: ops.div(e.t(), e.t(), rounding="round"), VE,
      "rounding='round'"),
    C("sum_keepdims_int", lambda e: ops.sum(e.t(), keepdims=1), TE, "keepdims must be"),
    C("attention_causal_string", lambda e: ops.attention(_q(e), _q(e), _q(e), causal="yes"),
      TE, "causal must be a bool"),
    C("attention_key_lengths_string", lambda e: ops.attention(_q(e), _q(e), _q(e),
                                                              key_lengths="4"), TE,
      "list of ints"),
    C("attention_key_lengths_float", lambda e: ops.attention(_q(e), _q(e), _q(e),
                                                             key_lengths=[1.5]), TE,
      "is not an int"),
    C("permute_dims_string", lambda e: ops.permute(e.t(), "10"), TE, "sequence of ints"),
    C("permute_dims_float", lambda e: ops.permute(e.t(), (1.0, 0)), TE, "must be ints"),
    C("transpose_dim_float", lambda e: ops.transpose(e.t(), 0, 1.0), TE, "must be ints"),
]


def _alias(env: Env, op: Callable[..., Any], shapes: list[tuple[int, ...]], *args: Any,
           first: int = 0) -> Any:
    """Call ``op(*tensors of shapes, *args)`` with ``out=`` the tensor ``first``."""
    tensors = [env.t(shape) for shape in shapes]
    return op(*tensors, *args, out=tensors[first])


OUT = [
    C("add_out_wrong_shape", lambda e: ops.add(e.t(), e.t(), out=e.t((2, 1))), VE,
      "expected (2, 3)"),
    C("relu_out_wrong_dtype", lambda e: ops.relu(e.t(), out=e.t(dtype="float16")), TE,
      "out= is float16; the result is float32"),
    C("layer_norm_out_wrong_dtype",
      lambda e: ops.layer_norm(e.t(), out=e.t(dtype="bfloat16")), TE,
      "out= is bfloat16; the result is float32"),
    C("softmax_out_wrong_shape", lambda e: ops.softmax(e.t(), out=e.t((3, 2))), VE,
      "out= has shape"),
    C("layer_norm_out_released", lambda e: ops.layer_norm(e.t(), out=e.released()), VE,
      "out= was released"),
    C("sum_out_numpy", lambda e: ops.sum(e.t(), out=np.zeros(2, np.float32)), TE,
      "out= must be a vkumd Tensor"),
    C("sum_out_keepdims_shape", lambda e: ops.sum(e.t(), keepdims=True, out=e.t((2,))), VE,
      "expected (2, 1)"),
    C("matmul_out_wrong_shape", lambda e: ops.matmul(e.t((2, 3)), e.t((3, 4)),
                                                     out=e.t((4, 2))), VE, "out= has shape"),
    C("attention_out_wrong_shape", lambda e: ops.attention(_q(e), _q(e), _q(e),
                                                           out=_q(e, (1, 2, 4, 4))), VE,
      "out= has shape"),
    C("transpose_out_aliases_x", lambda e: _alias(e, ops.transpose, [(3, 3)], 0, 1), VE,
      "same tensor as an input"),
    C("permute_out_aliases_x", lambda e: _alias(e, ops.permute, [(3, 3)], (1, 0)), VE,
      "same tensor as an input"),
    C("embedding_out_aliases_table",
      lambda e: (lambda tab: ops.embedding(e.ints([0, 1, 2]), tab, out=tab))(
          e.t((3, 3), "int32")), VE, "same tensor as an input"),
    C("matmul_out_aliases_a", lambda e: _alias(e, ops.matmul, [(3, 3), (3, 3)]), VE,
      "same tensor as an input"),
    C("matmul_out_aliases_b", lambda e: _alias(e, ops.matmul, [(3, 3), (3, 3)], first=1), VE,
      "same tensor as an input"),
    C("attention_out_aliases_q",
      lambda e: (lambda q: ops.attention(q, _q(e), _q(e), out=q))(_q(e)), VE,
      "same tensor as an input"),
]

# Numbers as operands, comparisons, views, slicing, concat and split.
VIEWS = [
    C("lt_two_numbers", lambda e: ops.lt(1.0, 2.0), TE, "both operands are numbers"),
    C("add_string_operand", lambda e: ops.add(e.t(), "1"), TE, "must be a vkumd Tensor"),
    C("mul_bool_operand", lambda e: ops.mul(e.t(), True), TE, "must be a vkumd Tensor"),
    C("add_nan_to_int32", lambda e: ops.add(e.t(dtype="int32"), NAN), VE, "not an integer"),
    C("sub_int32_past_range", lambda e: ops.sub(e.t(dtype="int32"), 2**40), VE,
      "does not fit in int32"),
    C("eq_dtype_mismatch", lambda e: ops.eq(e.t(), e.t(dtype="float16")), TE, "dtypes differ"),
    C("ge_mixed_contexts", lambda e: ops.ge(e.t(), e.t(ctx=e.other)), VE, "different context"),
    C("reshape_wrong_count", lambda e: ops.reshape(e.t(), (4,)), VE, "has 6 elements"),
    C("reshape_two_inferred", lambda e: ops.reshape(e.t(), (-1, -1)), VE, "one -1"),
    C("reshape_float_dim", lambda e: ops.reshape(e.t(), (2.0, 3)), TE, "must hold ints"),
    C("reshape_string", lambda e: ops.reshape(e.t(), "6"), TE, "sequence of ints"),
    C("flatten_start_after_end", lambda e: ops.flatten(e.t((2, 3, 4)), 2, 0), VE,
      "comes after"),
    C("flatten_dim_float", lambda e: ops.flatten(e.t(), 0.5), TE, "must be an int"),
    C("squeeze_dim_out_of_range", lambda e: ops.squeeze(e.t(), 5), VE, "out of range"),
    C("unsqueeze_dim_out_of_range", lambda e: ops.unsqueeze(e.t(), 4), VE, "out of range"),
    C("slice_lengths_differ", lambda e: ops.slice(e.t(), [0, 0], [1]), VE, "one of each"),
    C("slice_axis_repeated", lambda e: ops.slice(e.t(), [0, 0], [1, 1], axes=[1, 1]), VE,
      "repeat a dimension"),
    C("slice_float_start", lambda e: ops.slice(e.t(), 0.5, 1), TE, "sequence of ints"),
    C("slice_int8", lambda e: ops.slice(e.t(dtype="int8"), 0, 1), TE, "not supported"),
    C("slice_out_aliases_x", lambda e: (lambda x: ops.slice(x, 0, 2, out=x))(e.t()), VE,
      "same tensor as an input"),
    C("concat_empty", lambda e: ops.concat([]), TE, "non-empty list"),
    C("concat_one_tensor", lambda e: ops.concat(e.t()), TE, "non-empty list"),
    C("concat_dtype_mismatch", lambda e: ops.concat([e.t(), e.t(dtype="int32")]), TE,
      "one dtype"),
    C("concat_shapes_disagree", lambda e: ops.concat([e.t((2, 3)), e.t((2, 4))]), VE,
      "agree except along axis"),
    C("concat_0d", lambda e: ops.concat([e.ctx.zeros(()), e.ctx.zeros(())]), VE, "0-d"),
    C("concat_mixed_contexts", lambda e: ops.concat([e.t(), e.t(ctx=e.other)]), VE,
      "different context"),
    C("concat_out_aliases_input",
      lambda e: (lambda a: ops.concat([a, e.ctx.zeros((0, 3))], out=a))(e.t()), VE,
      "same tensor as an input"),
    C("transpose_out_view_of_x",
      lambda e: (lambda x: ops.transpose(x, 0, 1, out=ops.reshape(x, (3, 2))))(e.t()), VE,
      "same tensor as an input"),
    C("matmul_out_view_of_b",
      lambda e: (lambda b: ops.matmul(e.t((3, 3)), b, out=ops.flatten(b).reshape(3, 3)))(
          e.t((3, 3))), VE, "same tensor as an input"),
    C("add_layer_norm_residual_shape", lambda e: ops.add_layer_norm(e.t(), e.t((3,))), VE,
      "residual has shape"),
    C("add_layer_norm_residual_dtype",
      lambda e: ops.add_layer_norm(e.t(), e.t(dtype="float16")), TE, "cast it"),
    C("add_layer_norm_out_aliases_residual",
      lambda e: (lambda r: ops.add_layer_norm(e.t(), r, out=r))(e.t()), VE,
      "same tensor as an input"),
    C("add_layer_norm_eps_negative", lambda e: ops.add_layer_norm(e.t(), e.t(), eps=-1), VE,
      ">= 0"),
    C("fused_program_string", lambda e: ops.fused_elementwise([e.t()], "relu"), TE,
      "tuple of step tuples"),
    C("fused_program_unknown_step", lambda e: ops.fused_elementwise([e.t()], (("cosh", 0),)),
      TE, "no known op"),
    C("fused_program_reads_undefined",
      lambda e: ops.fused_elementwise([e.t()], (("add", 0, 5),)), VE, "reads value 5"),
    C("fused_program_empty", lambda e: ops.fused_elementwise([e.t()], ()), VE, "no steps"),
    C("fused_const_string",
      lambda e: ops.fused_elementwise([e.t()], (("add", 0, ("const", "x")),)), TE,
      "('const', number)"),
    C("fused_inputs_not_a_list", lambda e: ops.fused_elementwise(e.t(), RELU_OF_SUM), TE,
      "non-empty list"),
    C("fused_too_many_inputs", lambda e: ops.fused_elementwise([e.t()] * 9, (("relu", 0),)),
      VE, "at most 8"),
    C("fused_result_int32", lambda e: ops.fused_elementwise([e.t()], (("relu", 0),),
                                                            dtype="int32"), TE, "result is int32"),
    C("fused_out_shape_string", lambda e: ops.fused_elementwise([e.t()], (("relu", 0),),
                                                                out_shape="ab"), TE,
      "not a sequence of ints"),
    C("fused_out_shape_float", lambda e: ops.fused_elementwise([e.t()], (("relu", 0),),
                                                               out_shape=(2.5, 3)), TE,
      "must hold ints"),
    C("fused_out_shape_negative", lambda e: ops.fused_elementwise([e.t()], (("relu", 0),),
                                                                  out_shape=(-2, 3)), VE,
      "negative dimension"),
    C("fused_out_aliases_input",
      lambda e: (lambda x: ops.fused_elementwise([x], (("relu", 0),), out=x))(e.t()), VE,
      "same tensor as an input"),
    C("fused_mixed_contexts",
      lambda e: ops.fused_elementwise([e.t(), e.t(ctx=e.other)], RELU_OF_SUM), VE,
      "different context"),
    C("split_size_zero", lambda e: ops.split(e.t(), 0), VE, "at least 1"),
    C("split_sizes_do_not_add_up", lambda e: ops.split(e.t(), [1, 2]), VE, "add up to"),
    C("split_0d", lambda e: ops.split(e.ctx.zeros(()), 1), VE, "0-d"),
    C("split_float_size", lambda e: ops.split(e.t(), 1.5), TE, "sequence of ints"),
]

# Float attributes past float32's range: kernels take them as float32 push constants, and
# struct raised a bare OverflowError for eps, scale or alpha of 1e300 (and an int past float64
# failed in float()). Every op's attributes are checked where its record fills them in.
OUT_OF_RANGE = "outside float32's range"
FLOAT_ATTRS = [
    C("layer_norm_eps_1e300", lambda e: ops.layer_norm(e.t(), eps=1e300), VE, OUT_OF_RANGE),
    C("layer_norm_eps_int_past_float64", lambda e: ops.layer_norm(e.t(), eps=10**400), VE,
      OUT_OF_RANGE),
    C("rms_norm_eps_1e300", lambda e: ops.rms_norm(e.t(), eps=1e300), VE, OUT_OF_RANGE),
    C("add_layer_norm_eps_1e300", lambda e: ops.add_layer_norm(e.t(), e.t(), eps=1e300), VE,
      OUT_OF_RANGE),
    C("attention_scale_1e300", lambda e: ops.attention(_q(e), _q(e), _q(e), scale=1e300), VE,
      OUT_OF_RANGE),
    C("attention_scale_minus_1e300",
      lambda e: ops.attention(_q(e), _q(e), _q(e), scale=-1e300), VE, OUT_OF_RANGE),
    C("attention_scale_int_past_float64",
      lambda e: ops.attention(_q(e), _q(e), _q(e), scale=10**400), VE, "outside"),
    C("softmax_scale_1e300", lambda e: ops.softmax(e.t(), scale=1e300), VE, OUT_OF_RANGE),
    C("softmax_scale_int_1e40", lambda e: ops.softmax(e.t(), scale=10**40), VE, OUT_OF_RANGE),
    C("matmul_alpha_1e300", lambda e: ops.matmul(e.t((2, 3)), e.t((3, 2)), alpha=1e300), VE,
      OUT_OF_RANGE),
    C("matmul_alpha_minus_1e300",
      lambda e: ops.matmul(e.t((2, 3)), e.t((3, 2)), alpha=-1e300), VE, OUT_OF_RANGE),
    C("fused_const_1e300",
      lambda e: ops.fused_elementwise([e.t()], (("add", 0, ("const", 1e300)),)), VE,
      OUT_OF_RANGE),
    C("fused_const_int_past_float64",
      lambda e: ops.fused_elementwise([e.t()], (("mul", 0, ("const", -10**400)),)), VE,
      OUT_OF_RANGE),
]

CASES = (_each_op() + MIXED + DTYPES + SHAPES + SCALARS + KEYWORDS + OUT + VIEWS
         + FLOAT_ATTRS + RECURRENT)

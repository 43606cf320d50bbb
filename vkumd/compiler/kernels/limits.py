"""What each kernel family takes: its dtypes and size limits, declared once.

Plain declarations, standard library only, so the device-free graph layer may read them
(``tests/framework/graph/test_graph_layering.py`` allows this module alone of the compiler).
The kernel modules import their limits from here. Dtypes are vkumd dtype names; a family
turns them into type codes with :func:`~vkumd.compiler.kernels.type_codes.type_codes`.
"""

from __future__ import annotations

FLOAT_DTYPES = ("float32", "float16", "bfloat16")

# The activations kernels apply (the GEMM epilogue, the activation kernel, the generated
# elementwise kernels) and their codes: shaders/include/activation.glsl's VKUMD_ACT_* values
# (tests/compiler/test_activation_codes.py compares the two). None is the identity.
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}

# The convolution epilogue's activations (the GEMM's and the direct and depthwise convolution
# kernels' store, ``vkumd_activate_params``): ACTIVATIONS and more, each op name with its code
# and the names of the op's attributes that are its float parameters, in order.
EPILOGUE_ACTIVATIONS: dict[str | None, tuple[int, tuple[str, ...]]] = {
    **{name: (code, ()) for name, code in ACTIVATIONS.items()},
    "sigmoid": (5, ()), "hardswish": (6, ()), "clip": (7, ("min", "max")),
    "leaky_relu": (8, ("alpha",)), "hard_sigmoid": (9, ("alpha", "beta")),
}
# How a convolution's residual joins: none, added after the activation (``act(conv + bias) +
# residual``: MobileNet's inverted residuals) or before it (``act(conv + bias + residual)``:
# ResNet's blocks).
RESIDUAL_NONE, RESIDUAL_AFTER, RESIDUAL_BEFORE = 0, 1, 2

# elementwise_binary, elementwise_unary and elementwise_fill (elementwise.py): operand
# types, and dimensions after merging contiguous ones.
ELEMENTWISE_DTYPES = (*FLOAT_DTYPES, "int32")
# elementwise_binary alone also takes 8-bit integers (with 8-bit storage), wrapping as numpy.
BINARY_DTYPES = (*ELEMENTWISE_DTYPES, "int8", "uint8")
# ... and the wider and unsigned integers and float64 (computed in double), as their
# storage and arithmetic features allow (elementwise.wide_types).
WIDE_DTYPES = ("int16", "uint16", "uint32", "uint64", "float64")
BINARY_DTYPES = (*BINARY_DTYPES, *WIDE_DTYPES)
# The integer types the binary kernel computes exactly (wrapping; bitwise ops, max, min).
# The conversion kernel (elementwise_unary's convert) also takes the 8-bit integers (with
# 8-bit storage), converting them as the wider types, through their own values.
CAST_BYTE_DTYPES = ("int8", "uint8")
INTEGER_DTYPES = ("int32", "int8", "uint8", "int16", "uint16", "uint32", "uint64")
# int64: natively with shaderInt64, else emulated in two 32-bit words (fewer ops:
# INT64_EMULATED_OPS in elementwise.py). Taken by the binary kernel and cast.
INT64_DTYPES = ("int64",)
BINARY_DTYPES = (*BINARY_DTYPES, *INT64_DTYPES)
INTEGER_DTYPES = (*INTEGER_DTYPES, *INT64_DTYPES)
ELEMENTWISE_MAX_DIMS = 6
# The float8 formats (vkumd/framework/float8.py): elementwise_unary converts them to and from
# the float types (and each other) when the device has 8-bit storage; no other kernel reads
# them.
FLOAT8_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
# The linear quantization kernel (qlinear.py): its quantized and float types (scales are
# float32).
QLINEAR_QUANT_DTYPES = ("uint8", "int8", *FLOAT8_DTYPES)
# The packed types (vkumd/framework/packed.py): packed_cast converts the integer ones to and
# from PACKED_INT_PARTNERS and the float ones to and from the float types (8-bit storage);
# qlinear quantizes to all but float8_e8m0 (a scale type).
PACKED_INT_DTYPES = ("int4", "uint4", "int2", "uint2")
PACKED_FLOAT_DTYPES = ("float4_e2m1", "float8_e8m0")
PACKED_DTYPES = (*PACKED_INT_DTYPES, *PACKED_FLOAT_DTYPES)
PACKED_INT_PARTNERS = (*FLOAT_DTYPES, "int32", "int8", "uint8")
QLINEAR_QUANT_DTYPES = (*QLINEAR_QUANT_DTYPES, *PACKED_INT_DTYPES, "float4_e2m1")
QLINEAR_FLOAT_DTYPES = ("float32", "float16")

# The generated fused elementwise kernels (fused_elementwise.py). Inputs a kernel takes: its
# push block is 8 + 6 * k words, 224 bytes at 8, within the 256 bytes lavapipe, NVIDIA, AMD
# and Intel drivers offer (the spec's minimum is 128; the planner checks the device's limit).
# Every input is loaded as float32; the result is stored as one of the float types.
FUSED_MAX_INPUTS = 8
FUSED_INPUT_DTYPES = (*FLOAT_DTYPES, "int32", "int8", "uint8", "bool")
FUSED_OUTPUT_DTYPES = FLOAT_DTYPES

# The row kernels (softmax, norm, reduce_rows, add_layer_norm) and the activation kernel.
ROW_DTYPES = FLOAT_DTYPES
# Leading dimensions softmax's mask indexing takes.
SOFTMAX_MAX_LEAD = 5
# Outer dimensions permute indexes (the innermost is the row it walks).
PERMUTE_MAX_OUTER = 5
# Dimensions the strided copy indexes after merging the ones both sides keep adjacent.
STRIDED_MAX_DIMS = 6

# The fused attention kernels (attention.py): head_dim is a specialization constant, any
# multiple of ATTENTION_HEAD_DIM_MULTIPLE from that multiple up to ATTENTION_MAX_HEAD_DIM.
ATTENTION_DTYPES = ("float32", "float16")
# Operand layouts: "bhsd" is [batch, heads, seq, head_dim] (PyTorch's SDPA), "bshd" is
# [batch, seq, heads, head_dim] (flash-attn's). The kernels take any (batch, head, seq)
# element strides with head_dim contiguous; these are the two the op offers.
ATTENTION_LAYOUTS = ("bhsd", "bshd")
ATTENTION_MAX_HEAD_DIM = 256
ATTENTION_HEAD_DIM_MULTIPLE = 4

# GEMM (gemm.py): the storage types of A and B.
GEMM_DTYPES = ("float32", "float16", "bfloat16", "int8")

# Rotary embedding (rope.py) over x[batch, seq, heads, head_dim]: its types, and its pair
# conventions in the order of the kernel's flag: (2i, 2i+1) as GGUF, (i, i + d/2) as
# Hugging Face.
ROPE_DTYPES = FLOAT_DTYPES
ROPE_PAIRS = ("adjacent", "halves")

# The cache update (kv_cache.py): cache types (new is converted to the cache's).
KV_CACHE_DTYPES = ("float32", "float16")

# The scan kernel (scan.py: cumsum, cumprod): its types, its operations as the shader's OP
# codes, and the elements a tensor may hold (row offsets are 32-bit).
SCAN_DTYPES = (*FLOAT_DTYPES, "int32")
SCAN_OPS = {"sum": 0, "prod": 1}
SCAN_MAX_ELEMENTS = (1 << 32) - 1

# The top-k kernel (topk.py: topk, hardmax): its types, and the largest k (each of the k
# picks is one pass over the row).
TOPK_DTYPES = SCAN_DTYPES
TOPK_MAX_K = 1024

# The negative log-likelihood kernel (nll.py): the types of x and the weights.
NLL_DTYPES = FLOAT_DTYPES

# argmax (reduce.py): row lengths it takes (indices pass through float32 reductions).
ARGMAX_MAX_COLS = 1 << 24
# Quantized weights (qmatmul.py): GGUF block formats as (values per block, bytes per block),
# kept as their raw bytes on the device; the activations' dtypes the kernels take.
QTYPES = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20)}
QMATMUL_DTYPES = ("float32", "float16")

# Convolution and pooling (conv.py, pool.py) over NCHW tensors.
CONV_DTYPES = ("float32", "float16")
POOL_DTYPES = CONV_DTYPES
# Resize, pad and transposed convolution (resample.py, resample_plan.py).
RESAMPLE_DTYPES = CONV_DTYPES
# Resize's coordinate transformations and nearest roundings (ONNX's names).
RESIZE_COORDINATES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                      "tf_half_pixel_for_nn", "half_pixel_symmetric", "tf_crop_and_resize")
RESIZE_MODES = ("nearest", "linear", "cubic")
RESIZE_ROUNDINGS = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")
# Pad's modes and the most dimensions it takes once neighbouring unpadded ones are merged.
PAD_MODES = ("constant", "reflect", "edge")
PAD_MAX_RANK = 5
# The pad kernel moves elements (and writes the constant): the resampling types and bfloat16.
PAD_DTYPES = (*RESAMPLE_DTYPES, "bfloat16")
# Grid sampling (grid_sample.py): ONNX's modes and padding modes; 2 or 3 spatial axes.
GRID_SAMPLE_MODES = ("nearest", "linear", "cubic")
GRID_SAMPLE_PADDINGS = ("zeros", "border", "reflection")
GRID_SAMPLE_RANKS = (2, 3)

# The recurrent layers (recurrent.py: LSTM, GRU): the storage types of every operand.
RECURRENT_DTYPES = ("float32", "float16")

# The index kernels (index.py): the element types they move (the gathers and trilu copy 32-
# and 16-bit bits; the scatter computes in these types), the dimensions GatherElements and
# ScatterElements index after merging (and the most entries of a GatherND/ScatterND index
# tuple), and the scatter's reductions, in the order of its REDUCE constant.
INDEX_DTYPES = (*FLOAT_DTYPES, "int32")
INDEX_MAX_DIMS = 6
SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")

# The float64 kernels (double.py), built only where the device has shaderFloat64, each
# computing in double: the unary math set as unary_double.comp's OP codes (the functions
# GLSL lacks in double are shaders/include/double_math.glsl's).
DOUBLE_UNARY_OPS = {"abs": 0, "neg": 1, "ceil": 2, "floor": 3, "round": 4, "sign": 5,
                    "reciprocal": 6, "sqrt": 7, "exp": 8, "log": 9, "tanh": 10, "sigmoid": 11,
                    "sin": 12, "cos": 13, "tan": 14, "asin": 15, "acos": 16, "atan": 17,
                    "sinh": 18, "cosh": 19, "asinh": 20, "acosh": 21, "atanh": 22}

"""The kernels vkumd ships: importing this package registers every family in the registry.

One module per kernel family; each registers its :class:`~vkumd.compiler.registry.Kernel`
objects with their defines, specialization constants and variants.
"""

from vkumd.compiler.kernels import (  # noqa: F401  (importing registers their kernels)
    activation,
    add_norm,
    attention,
    conv,
    conv_gemm,
    double,
    fused_elementwise,
    gather,
    grid_sample,
    index,
    kv_cache,
    nll,
    norm,
    packed_cast,
    permute,
    pool,
    qlinear,
    qmatmul,
    recurrent,
    reduce,
    resample,
    rope,
    scan,
    softmax,
    strided,
    topk,
)
from vkumd.compiler.kernels.elementwise import (
    ELEMENTWISE_BINARY,
    ELEMENTWISE_FILL,
    ELEMENTWISE_OPS,
    ELEMENTWISE_TYPES,
    ELEMENTWISE_UNARY,
    ELEMENTWISE_UNARY_OPS,
)
from vkumd.compiler.kernels.gemm import GEMM  # noqa: F401  (registers the GEMM family)
from vkumd.compiler.kernels.limits import ACTIVATIONS
from vkumd.compiler.registry import WORKGROUP

__all__ = [
    "ACTIVATIONS",
    "ELEMENTWISE_BINARY", "ELEMENTWISE_FILL", "ELEMENTWISE_OPS", "ELEMENTWISE_TYPES",
    "ELEMENTWISE_UNARY", "ELEMENTWISE_UNARY_OPS", "WORKGROUP",
]

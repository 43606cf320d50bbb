"""Operations on tensors."""

from vkumd.framework.ops.activation import gelu, gelu_tanh, relu, silu
from vkumd.framework.ops.add_norm import add_layer_norm
from vkumd.framework.ops.attention import attention
from vkumd.framework.ops.elementwise import (
    add,
    cast,
    copy,
    div,
    eq,
    fill,
    ge,
    gt,
    le,
    lt,
    mul,
    ne,
    scale,
    sub,
)
from vkumd.framework.ops.fused import fused_elementwise
from vkumd.framework.ops.layout import embedding, permute, transpose
from vkumd.framework.ops.matmul import matmul
from vkumd.framework.ops.norm import layer_norm, rms_norm
from vkumd.framework.ops.reduce import max, mean, sum  # noqa: A004
from vkumd.framework.ops.shape import flatten, reshape, squeeze, unsqueeze
from vkumd.framework.ops.slicing import concat, slice, split  # noqa: A004
from vkumd.framework.ops.softmax import softmax

__all__ = ["add", "cast", "copy", "div", "fill", "mul", "scale", "sub"]
__all__ += ["eq", "ge", "gt", "le", "lt", "ne"]
__all__ += ["embedding", "gelu", "gelu_tanh", "layer_norm", "max", "mean", "permute", "relu",
            "rms_norm", "silu", "softmax", "sum", "transpose"]
__all__ += ["concat", "flatten", "reshape", "slice", "split", "squeeze", "unsqueeze"]
__all__ += ["attention"]
__all__ += ["matmul"]
__all__ += ["add_layer_norm", "fused_elementwise"]

# Last: every public op records a graph node when called on a TracedTensor (vkumd.compile).
from vkumd.framework.ops.tracing_dispatch import install as _install_tracing  # noqa: E402

_install_tracing(globals(), __all__)

# The op registry: importing the families declares every op; an op whose public function
# its family derives (a generated-kernel op such as exp) joins this namespace from there.
from vkumd.framework import opset as _opset  # noqa: E402, F401
from vkumd.framework.graph.registry import OPS as _OPS  # noqa: E402

_derived = [name for name, op in _OPS.items() if op.eager is not None and name not in globals()]
globals().update({name: _OPS[name].eager for name in _derived})
__all__ += _derived
_install_tracing(globals(), _derived)

# Every tensor, eager or traced, has a method per one-input op of the registry.
from vkumd.framework.graph.methods import install_op_methods as _install_methods  # noqa: E402

_install_methods()

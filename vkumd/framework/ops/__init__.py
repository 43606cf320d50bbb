"""Operations on tensors: every op's public function, from its record in the op registry
(:mod:`vkumd.framework.opset`, one module per op family), and the functions no record carries
(``fill``, ``copy``, ``split``, ``einsum`` and the views ``flatten``, ``squeeze``,
``unsqueeze``)."""

# Importing the families declares every op (and imports this package's checks on the way).
from vkumd.framework import opset as _opset  # noqa: F401
from vkumd.framework.graph.methods import install_op_methods as _install_methods
from vkumd.framework.graph.registry import OPS as _OPS
from vkumd.framework.ops.einsum import einsum
from vkumd.framework.ops.shape import flatten, squeeze, unsqueeze
from vkumd.framework.ops.tracing_dispatch import install as _install_tracing
from vkumd.framework.opset.unary import copy, fill
from vkumd.framework.opset.windows import split

# split's record takes the sizes as an attribute and has no eager function: ops.split also
# takes a piece length (torch.split), so it is listed here; einsum is the ops it lowers to.
__all__ = ["copy", "einsum", "fill", "flatten", "split", "squeeze", "unsqueeze"]
_registered = [name for name, op in _OPS.items() if op.eager is not None]
globals().update({name: _OPS[name].eager for name in _registered})
__all__ += _registered

# Every public op records a graph node when called on a TracedTensor (vkumd.compile).
_install_tracing(globals(), __all__)

# Every tensor, eager or traced, has a method per one-input op of the registry.
_install_methods()

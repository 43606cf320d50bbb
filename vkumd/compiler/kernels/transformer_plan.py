"""Planners ``vkumd.framework.ops`` imports from this module path, re-exported from the
family modules that define them."""

from vkumd.compiler.kernels.activation import activation_plan
from vkumd.compiler.kernels.gather import gather_plan
from vkumd.compiler.kernels.norm import norm_plan
from vkumd.compiler.kernels.permute import permute_plan
from vkumd.compiler.kernels.reduce import reduce_plan
from vkumd.compiler.kernels.softmax import softmax_plan

__all__ = ["activation_plan", "gather_plan", "norm_plan", "permute_plan", "reduce_plan",
           "softmax_plan"]

"""Operations on tensors."""

from vkumd.framework.ops.elementwise import add, div, mul, sub

__all__ = ["add", "div", "mul", "sub"]

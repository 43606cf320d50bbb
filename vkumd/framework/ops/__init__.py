"""Operations on tensors."""

from vkumd.framework.ops.elementwise import add, cast, copy, div, fill, mul, scale, sub

__all__ = ["add", "cast", "copy", "div", "fill", "mul", "scale", "sub"]

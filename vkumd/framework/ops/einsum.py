"""``vkumd.ops.einsum``: Einstein summation on eager tensors, through the same lowering the
graph uses (:mod:`vkumd.framework.graph.einsum`): sums, permutes, reshapes and one matmul
per pair of operands. No record carries it: in a graph it is those ops."""

from __future__ import annotations

from typing import Any

from vkumd.errors import VkumdTypeError
from vkumd.framework.graph.einsum import einsum_with
from vkumd.framework.ops.checks import check_context, check_tensor
from vkumd.framework.opset.layout import permute, reshape
from vkumd.framework.opset.matmul import matmul
from vkumd.framework.opset.reductions import sum as reduce_sum
from vkumd.framework.tensor import Tensor


class _EagerKit:
    """The four ops of :class:`~vkumd.framework.graph.einsum.Kit` on eager tensors."""

    def sum(self, x: Tensor, dims: tuple[int, ...]) -> Tensor:
        return reduce_sum(x, dim=dims)

    def permute(self, x: Tensor, dims: tuple[int, ...]) -> Tensor:
        return permute(x, dims)

    def reshape(self, x: Tensor, shape: tuple[Any, ...]) -> Tensor:
        return x if tuple(x.shape) == tuple(shape) else reshape(x, shape)

    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        return matmul(a, b)


def einsum(equation: str, *operands: Tensor) -> Tensor:
    """Einstein summation, as ``numpy.einsum`` and ``torch.einsum``.

    ``"bij,bjk->bik"`` is a batched matmul, ``"ij->ji"`` a transpose, ``"ij->i"`` a sum,
    ``"i,i"`` an inner product. Indices one operand alone carries are summed first; each
    further operand is contracted with the result so far by one matmul (float32
    accumulation), so the operands' dtype is that of matmul and sum (float32, float16,
    bfloat16).

    Args:
        equation: the subscripts, with an explicit output (``->``) or without (the indices
            seen once, alphabetically); ``...`` stands for leading dimensions.
        operands: one or more tensors of one dtype and context.

    Returns:
        A new tensor.

    Raises:
        VkumdTypeError: equation not a string; an operand not a tensor, or operands of
            different dtypes.
        VkumdValueError: a malformed equation, a term whose rank is not the operand's, an
            index repeated within one operand (a diagonal: not supported), sizes that
            disagree (size-1 broadcasting is not supported), operands of different contexts.
    """
    op = "einsum"
    if not isinstance(equation, str):
        raise VkumdTypeError(f"{op}: equation must be a string such as 'ij,jk->ik', not "
                             f"{type(equation).__name__}")
    checked = [check_tensor(op, t, f"operands[{i}]") for i, t in enumerate(operands)]
    for i, t in enumerate(checked[1:], 1):
        check_context(op, checked[0], t, f"operands[{i}]")
        if t.dtype is not checked[0].dtype:
            raise VkumdTypeError(f"{op}: operands[{i}] is {t.dtype.name} and operands[0] "
                                 f"{checked[0].dtype.name}; cast them to one dtype")
    return einsum_with(_EagerKit(), equation, checked, [t.shape for t in checked])

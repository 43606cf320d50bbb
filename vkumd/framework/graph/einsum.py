"""Einstein summation lowered to the ops that exist: ``sum`` over indices one operand alone
carries, ``permute`` and ``reshape`` into ``[batch, rows, k] @ [batch, k, cols]``, one
``matmul`` per pair of operands (left to right), and a last ``sum``/``permute`` into the
output's order. Written once over a small :class:`Kit` of those four ops, so the eager
``vkumd.ops.einsum``, the graph builder (ONNX's Einsum, ``aten.einsum``) and tracing share it.

Supported: explicit (``"bij,bjk->bik"``) and implicit (``"ij,jk"``: the indices seen once,
in alphabetical order) outputs, ``...`` (aligned from the right, equal sizes), any number of
operands. Refused with the reason: an index repeated within one operand (a diagonal), a
size-1 dimension broadcast against a larger one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from vkumd.errors import VkumdValueError


class Kit(Protocol):
    """The four ops einsum is made of, over eager tensors or graph values."""

    def sum(self, x: Any, dims: tuple[int, ...]) -> Any: ...
    def permute(self, x: Any, dims: tuple[int, ...]) -> Any: ...
    def reshape(self, x: Any, shape: tuple[Any, ...]) -> Any: ...
    def matmul(self, a: Any, b: Any) -> Any: ...


def _fail(equation: str, why: str) -> VkumdValueError:
    return VkumdValueError(f"einsum {equation!r}: {why}")


def parse(equation: str, shapes: Sequence[tuple[Any, ...]]
          ) -> tuple[list[list[str]], list[str], dict[str, Any]]:
    """The equation's index lists per operand, the output's, and each index's size.

    Ellipsis dimensions get the names ``"...0"``, ``"...1"``, … counted from the left of the
    widest ellipsis, so operands with fewer of them align on the right.

    Raises:
        VkumdValueError: a malformed equation, an operand count or rank that does not match,
            a repeated index within an operand, sizes that disagree.
    """
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _fail(equation, f"{len(terms)} operand terms for {len(shapes)} operands")
    widest = 0
    for term, shape in zip(terms, shapes, strict=True):
        letters = term.replace("...", "")
        if not letters.isalpha() and letters or term.count("...") > 1:
            raise _fail(equation, f"term {term!r} must be letters with at most one '...'")
        if "..." in term:
            widest = max(widest, len(shape) - len(letters))
    ellipsis = [f"...{i}" for i in range(widest)]
    labels: list[list[str]] = []
    sizes: dict[str, Any] = {}
    for term, shape in zip(terms, shapes, strict=True):
        head, dots, tail = term.partition("...")
        extra = len(shape) - len(head) - len(tail)
        if (extra != 0 and not dots) or extra < 0:
            raise _fail(equation, f"term {term!r} for an operand of rank {len(shape)}")
        names = [*head, *(ellipsis[widest - extra:] if dots else []), *tail]
        if len(set(names)) != len(names):
            raise _fail(equation, f"term {term!r} repeats an index (a diagonal), which is not "
                        "supported; take the diagonal first")
        for name, size in zip(names, shape, strict=True):
            if name in sizes and sizes[name] != size:
                raise _fail(equation, f"index {name!r} has sizes {sizes[name]} and {size} "
                            "(broadcasting a size-1 dimension is not supported)")
            sizes[name] = size
        labels.append(names)
    if arrow:
        head, dots, tail = rhs.partition("...")
        if (head + tail) and not (head + tail).isalpha() or rhs.count("...") > 1:
            raise _fail(equation, f"output {rhs!r} must be letters with at most one '...'")
        out = [*head, *(ellipsis if dots else []), *tail]
        unknown = [n for n in out if n not in sizes]
        if unknown or len(set(out)) != len(out):
            raise _fail(equation, f"output {rhs!r} names an index no operand has, or one twice")
    else:
        counts = [n for names in labels for n in names if not n.startswith("...")]
        out = ellipsis + sorted(n for n in set(counts) if counts.count(n) == 1)
    return labels, out, sizes


def _reduce(kit: Kit, x: Any, names: list[str], keep: set[str]) -> tuple[Any, list[str]]:
    """``x`` summed over its indices outside ``keep``."""
    drop = tuple(i for i, n in enumerate(names) if n not in keep)
    if not drop:
        return x, names
    return kit.sum(x, drop), [n for n in names if n in keep]


def _arrange(kit: Kit, x: Any, names: list[str], order: list[str]) -> Any:
    dims = tuple(names.index(n) for n in order)
    return x if dims == tuple(range(len(names))) else kit.permute(x, dims)


def _pair(kit: Kit, a: Any, la: list[str], b: Any, lb: list[str], keep: set[str],
          sizes: dict[str, Any]) -> tuple[Any, list[str]]:
    """``a`` and ``b`` contracted over their shared indices outside ``keep``."""
    batch = [n for n in la if n in lb and n in keep]
    inner = [n for n in la if n in lb and n not in keep]
    rows = [n for n in la if n not in lb]
    cols = [n for n in lb if n not in la]

    def size(names: list[str]) -> Any:
        return math.prod(sizes[n] for n in names)

    a = kit.reshape(_arrange(kit, a, la, batch + rows + inner),
                    (size(batch), size(rows), size(inner)) if batch else
                    (size(rows), size(inner)))
    b = kit.reshape(_arrange(kit, b, lb, batch + inner + cols),
                    (size(batch), size(inner), size(cols)) if batch else
                    (size(inner), size(cols)))
    names = batch + rows + cols
    return kit.reshape(kit.matmul(a, b), tuple(sizes[n] for n in names)), names


def einsum_with(kit: Kit, equation: str, operands: Sequence[Any],
                shapes: Sequence[tuple[Any, ...]]) -> Any:
    """``equation`` over ``operands`` (of ``shapes``) through ``kit``'s ops.

    Raises:
        VkumdValueError: as :func:`parse`; no operands.
    """
    if not operands:
        raise _fail(equation, "no operands")
    labels, out, sizes = parse(equation, shapes)
    wanted = set(out)
    ops = list(operands)
    for i, names in enumerate(labels):
        elsewhere = {n for j, other in enumerate(labels) if j != i for n in other}
        ops[i], labels[i] = _reduce(kit, ops[i], names, wanted | elsewhere)
    acc, names = ops[0], labels[0]
    for i in range(1, len(ops)):
        keep = wanted | {n for later in labels[i + 1:] for n in later}
        acc, names = _pair(kit, acc, names, ops[i], labels[i], keep, sizes)
    acc, names = _reduce(kit, acc, names, wanted)
    return _arrange(kit, acc, names, out)


class BuilderKit:
    """:class:`Kit` over a :class:`~vkumd.framework.graph.GraphBuilder`'s values."""

    def __init__(self, builder: Any) -> None:
        self.b = builder

    def sum(self, x: Any, dims: tuple[int, ...]) -> Any:
        return self.b.sum(x, dim=dims)

    def permute(self, x: Any, dims: tuple[int, ...]) -> Any:
        return self.b.permute(x, dims)

    def reshape(self, x: Any, shape: tuple[Any, ...]) -> Any:
        return x if tuple(x.shape) == tuple(shape) else self.b.reshape(x, shape)

    def matmul(self, a: Any, b: Any) -> Any:
        return self.b.matmul(a, b)


def einsum_graph(builder: Any, equation: str, operands: Sequence[Any]) -> Any:
    """``equation`` over graph values, as nodes appended to ``builder``."""
    return einsum_with(BuilderKit(builder), equation, operands,
                       [tuple(v.shape) for v in operands])

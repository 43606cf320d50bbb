"""Eager ops check their arguments with their op record's shape and dtype rule.

An op's contract -- which shapes and dtypes it takes, what it makes of them and the message
that refuses the rest -- is the rule its record declares
(:attr:`~vkumd.framework.graph.registry.OpDef.rule`). The graph runs that rule over symbolic
shapes; an eager function runs the same rule over its tensors' concrete shapes with
:func:`concrete_rule`, and keeps checks of its own only for what the graph op has no word
for (``out=``, contexts, the device's capabilities and kernel limits).

A rule run builds :class:`~vkumd.framework.graph.registry.TensorType` values and a
:class:`~vkumd.framework.graph.symbols.DimTable` (tens of microseconds), so each eager op
keeps a :data:`Verdicts` memo keyed by the call's concrete signature (shapes, dtype names,
attribute values and types, which optional inputs are present): a repeated call costs one
dict lookup. Only verdicts are stored; a call the rule refuses raises every time.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from vkumd.framework.graph.registry import OPS, TensorType
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_tensor
from vkumd.framework.tensor import Tensor

Verdicts = dict[Hashable, Any]
"""What an eager op made of a call signature its rule accepted, by that signature."""

_KNOWN_VERDICTS = 4096  # signatures kept per op before the memo starts over


def concrete_rule(op: str, inputs: Sequence[Tensor | None], attrs: dict[str, Any]
                  ) -> list[TensorType]:
    """The output types op ``op``'s rule gives for these tensors and attributes.

    Args:
        op: the op's name in the registry.
        inputs: one entry per declared input, None for an absent optional one; checked
            tensors (the rule reads only their shapes and dtypes).
        attrs: attribute values (defaults may be left out).

    Returns:
        One type per output, with concrete shapes.

    Raises:
        VkumdTypeError, VkumdValueError: the rule's refusal, worded ``"op: ..."``.
    """
    info = OPS[op]
    types = [None if t is None else TensorType(t.shape, t.dtype) for t in inputs]
    return info.rule(types, info.full_attrs(attrs), DimTable())


def recall(memo: Verdicts, key: Hashable) -> Any:
    """The verdict stored under ``key``, or None (also for a key that does not hash, such as
    an attribute passed as a list: such a call is checked every time)."""
    try:
        return memo.get(key)
    except TypeError:
        return None


def remember(memo: Verdicts, key: Hashable, verdict: Any) -> Any:
    """Store ``verdict`` under ``key`` (when the key hashes) and return it; a full memo
    starts over, so a program cycling through many shapes keeps a bounded one."""
    try:
        hash(key)
    except TypeError:
        return verdict
    if len(memo) >= _KNOWN_VERDICTS:
        memo.clear()
    memo[key] = verdict
    return verdict


def signature(t: Tensor | None) -> tuple[tuple[int, ...], str] | None:
    """An optional input's part of a memo key: its shape and dtype name, or None."""
    return None if t is None else (t.shape, t.dtype.name)


def live_inputs(op: str, x: Any, others: Iterable[tuple[Any, str]]) -> Tensor:
    """``x`` and ``others`` as live tensors of one open context, before a rule reads their
    shapes (see :func:`live_with`); returns ``x``.

    Raises:
        VkumdTypeError: one is not a vkumd Tensor.
        ContextClosed: the context was closed.
        VkumdValueError: one was released, or belongs to another context than ``x``.
    """
    x = check_tensor(op, x, "x")
    live_with(op, x, others)
    return x


def live_with(op: str, x: Tensor, others: Iterable[tuple[Any, str]]) -> None:
    """Check ``others`` (``(tensor, name)``; an optional one named ``"bias?"`` as in its op's
    record, checked when present) as live tensors of checked ``x``'s context.

    Raises:
        VkumdTypeError: one is not a vkumd Tensor.
        ContextClosed: the context was closed.
        VkumdValueError: one was released, or belongs to another context than ``x``.
    """
    context = x.context
    for t, what in others:
        # A tensor with a binding is live and non-empty: with x's (open) context, it passes
        # the checks below, which cost about 0.3 us a tensor.
        if isinstance(t, Tensor) and t.context is context and t.binding is not None:
            continue
        if t is not None or not what.endswith("?"):
            what = what.rstrip("?")
            check_tensor(op, t, what)
            check_context(op, x, t, what)

"""The seam between eager ops and tracing: ``vkumd.ops.<op>`` records a graph node when
called on a :class:`~vkumd.framework.graph.proxy.TracedTensor`.

Each public op is wrapped once, at import, by :func:`traceable`. The wrapper has the op's
exact signature (its source is written from ``inspect.signature``, as :mod:`dataclasses`
writes ``__init__``), because a generic ``*args, **kwargs`` wrapper costs about 0.3 us a call
in argument packing alone; this one adds one Python frame, one ``isinstance`` on the first
argument and a ``try`` (free until it raises): about 0.1 us (the frame and the call are counted in
``tests/framework/graph/test_trace_dispatch.py``). A traced tensor in a later position
(``ops.matmul(W, x)`` with ``W`` an eager weight, ``ops.add(1.0, x)``) makes the eager op
refuse its argument; only then are the arguments searched and the call recorded. The op
modules themselves know nothing of tracing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from vkumd.framework.graph.proxy import TracedTensor, find_traced
from vkumd.framework.graph.trace import record_op

_TEMPLATE = """\
def {name}({params}):
    if isinstance({first}, _Traced):
        return _record({name!r}, ({args}), {{{kwargs}}})
    try:
        return _eager({call})
    except Exception:
        # An eager op refuses a TracedTensor it finds past its first argument.
        if _find(({args}), {{{kwargs}}}) is None:
            raise
    return _record({name!r}, ({args}), {{{kwargs}}})
"""


def _source(name: str, sig: inspect.Signature) -> tuple[str, dict[str, Any]]:
    """The wrapper's source for an op of signature ``sig``, and the defaults it refers to."""
    params, call, args, kwargs = [], [], [], []
    defaults: dict[str, Any] = {}
    star = False
    for p in sig.parameters.values():
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text, star = f"*{p.name}", True
            call.append(text)
            args.append(text)
        elif p.kind is p.VAR_KEYWORD:
            text = f"**{p.name}"
            call.append(text)
            kwargs.append(text)
        else:
            if p.kind is p.KEYWORD_ONLY and not star:
                params.append("*")
                star = True
            if p.default is not p.empty:
                defaults[f"_default_{p.name}"] = p.default
                text = f"{p.name}=_default_{p.name}"
            # out= is passed by keyword (record_op refuses it), other positionals by position.
            keyword = p.kind is p.KEYWORD_ONLY or p.name == "out"
            call.append(f"{p.name}={p.name}" if keyword else p.name)
            (kwargs if keyword else args).append(f"{p.name!r}: {p.name}" if keyword
                                                 else p.name)
        params.append(text)
    first = next(iter(sig.parameters))
    source = _TEMPLATE.format(name=name, params=", ".join(params), first=first.lstrip("*"),
                              args=", ".join(args) + ("," if len(args) == 1 else ""),
                              kwargs=", ".join(kwargs), call=", ".join(call))
    return source, defaults


def traceable(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (the eager op ``vkumd.ops.<name>``), recording a node when traced.

    Args:
        name: the op's public name (the builder method of the same name records it).
        fn: the eager implementation; kept as the wrapper's ``eager`` attribute.

    Returns:
        The wrapper, with ``fn``'s name, docstring and signature.
    """
    source, namespace = _source(name, inspect.signature(fn))
    namespace.update(_Traced=TracedTensor, _record=record_op, _find=find_traced, _eager=fn)
    exec(compile(source, f"<vkumd.ops.{name} tracing wrapper>", "exec"), namespace)  # noqa: S102
    op = functools.update_wrapper(namespace[name], fn)
    op.eager = fn  # type: ignore[attr-defined]
    op.wrapper_source = source  # type: ignore[attr-defined]
    return op


def install(namespace: MutableMapping[str, Any], names: Iterable[str]) -> None:
    """Replace each op ``names`` in ``namespace`` by its :func:`traceable` wrapper (once)."""
    for name in names:
        fn = namespace[name]
        if not hasattr(fn, "eager"):
            namespace[name] = traceable(name, fn)

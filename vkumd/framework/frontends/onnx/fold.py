"""How big a node's result would be, found before the importer computes it on the host.

A node whose inputs are all known is folded at import time (computed once, on the host). Its
result can be far bigger than the file (``ConstantOfShape`` of ``[16000, 16000]`` is 1 GiB
from a 152-byte model), so its size is inferred first by ONNX's own shape inference, run on
the one node with the known inputs' values, and folding stops at
:func:`~vkumd.settings.fold_limit` bytes (``VKUMD_FOLD_LIMIT``). :func:`on_host` computes
a node with ONNX's reference implementation (now, or per call when it reads the symbolic
sizes), and :func:`shape_like` says which nodes are folded so before their converter runs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from vkumd.framework.frontends.onnx import derived as derived_mod
from vkumd.framework.frontends.onnx.derived import Derived
from vkumd.framework.frontends.onnx.errors import TooBig, Unsupported
from vkumd.framework.frontends.onnx.sizes import over_limit, result_bytes
from vkumd.framework.frontends.onnx.state import SHAPE_LIKE, State, tidy
from vkumd.settings import fold_limit


def too_big(st: State, node: onnx.NodeProto) -> str | None:
    """Why the node must not be folded (its size and the limit), or None when it may be."""
    if not all(isinstance(st.env[n], (np.ndarray, Derived)) for n in node.input if n):
        return None
    bound = {n: tidy(st.env[n]) if isinstance(st.env[n], np.ndarray) else st.env[n]
             for n in node.input if n}
    size = result_bytes(node, bound, st.opset)
    limit = fold_limit()
    if size is None or size <= limit:
        return None
    return over_limit(size, limit)


def check_fold(shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse, before allocating it, a known array of ``shape`` past the fold limit.

    Raises:
        TooBig: it is past the limit.
    """
    size = math.prod(shape) * np.dtype(dtype).itemsize
    limit = fold_limit()
    if size > limit:
        raise TooBig(f"a constant of shape {list(shape)}: {over_limit(size, limit)} "
                     "(vkumd has no device op that creates it)")


def shape_like(bounds: list[Any]) -> bool:
    """Whether every input is a small known array of plain numbers (shape-like)."""
    return bool(bounds) and all(isinstance(b, np.ndarray) and b.dtype != object
                                and b.size <= SHAPE_LIKE for b in bounds)


def on_host(st: State, node: onnx.NodeProto) -> np.ndarray | Derived:
    """``node`` computed by ONNX's reference implementation: folded now when its inputs hold
    no symbol, else a :class:`Derived` of probed shape.

    Raises:
        Unsupported: several outputs, or the computation fails.
    """
    if len([n for n in node.output if n]) != 1:
        raise Unsupported("a node of several outputs cannot be computed from the sizes")
    what = f"{node.op_type} node {node.name or '(unnamed)'!r}"
    try:
        fn = derived_mod.node_fn(node)
    except Exception as exc:  # noqa: BLE001 -- onnx.reference refuses a node as it likes
        raise Unsupported(f"ONNX's reference implementation cannot run it "
                          f"({type(exc).__name__}: {str(exc)[:200]})") from exc
    derived = Derived(fn, list(node.input), what, size_of=derived_mod.node_size(node))
    st.bind(node.output[0], derived)
    try:
        if not derived_mod.symbols_of(node.output[0], st.env):
            return derived_mod.evaluate(node.output[0], st.env, {}, {})
        derived_mod.probe_shape(node.output[0], st.env)
    finally:
        del st.env[node.output[0]]
    return derived

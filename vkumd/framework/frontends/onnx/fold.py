"""How big a node's result would be, found before the importer computes it on the host.

A node whose inputs are all known is folded at import time (computed once, on the host). Its
result can be far bigger than the file (``ConstantOfShape`` of ``[16000, 16000]`` is 1 GiB
from a 152-byte model), so its size is inferred first by ONNX's own shape inference, run on
the one node with the known inputs' values, and folding stops at
:func:`~vkumd.settings.fold_limit` bytes (``VKUMD_FOLD_LIMIT``).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from vkumd.framework.frontends.onnx.derived import Derived
from vkumd.framework.frontends.onnx.errors import TooBig
from vkumd.framework.frontends.onnx.sizes import over_limit, result_bytes
from vkumd.framework.frontends.onnx.state import State, tidy
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

"""Torch's types as the IR's: symbolic sizes (``SymInt`` over sympy) as Dims, dtypes.

Torch names its symbols ``s0``, ``s27``...; they keep those names in the IR, so one torch
symbol is one IR dimension across every input that carries it.
"""

from __future__ import annotations

from typing import Any

import torch

from vkumd.framework.graph.dims import Dim, sym
from vkumd.framework.graph.errors import UnsupportedOpError

# Torch dtype -> the IR dtype it is computed in. int64 has no kernels: indices and masks run
# as int32 (values past 2**31 would wrap; ids and masks never get there); bool is bool, the
# comparisons' result type.
IR_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.int32: "int32", torch.int64: "int32", torch.int8: "int8", torch.uint8: "uint8",
    torch.bool: "bool",
}


def ir_dtype(dtype: torch.dtype) -> str:
    """The IR dtype a torch dtype runs as.

    Raises:
        UnsupportedOpError: a dtype vkumd has no counterpart for (float64, complex, ...).
    """
    found = IR_DTYPES.get(dtype)
    if found is None:
        raise UnsupportedOpError(f"torch dtype {dtype} has no vkumd counterpart; vkumd runs "
                                 f"{', '.join(sorted({str(d) for d in IR_DTYPES}))}")
    return found


def _from_sympy(expr: Any) -> int | Dim:
    # Torch's shape expressions are sums and products of symbols and integers, and floor
    # divisions (a reshape of s0*8 into 8 columns); Dim arithmetic has each of these.
    from torch.utils._sympy.functions import FloorDiv

    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return sym(str(expr))
    if expr.is_Add or expr.is_Mul:
        parts = [_from_sympy(a) for a in expr.args]
        out = parts[0]
        for p in parts[1:]:
            out = out + p if expr.is_Add else out * p
        return out
    if isinstance(expr, FloorDiv):
        return _from_sympy(expr.args[0]) // _from_sympy(expr.args[1])
    raise UnsupportedOpError(f"symbolic size {expr} is not a sum, product or floor division "
                             "of symbols, which is all vkumd's dims express")


def dim_of(size: Any) -> int | Dim:
    """One size (an int or a ``torch.SymInt``) as an IR dimension."""
    if isinstance(size, torch.SymInt):
        value = size.node.maybe_as_int()
        return int(value) if value is not None else _from_sympy(size.node.expr)
    return int(size)


def shape_of(sizes: Any) -> tuple[int | Dim, ...]:
    """A torch shape (ints and SymInts) as an IR shape."""
    return tuple(dim_of(s) for s in sizes)


def is_static(sizes: Any) -> bool:
    """Whether every size is a plain int (no symbol)."""
    return all(isinstance(dim_of(s), int) for s in sizes)

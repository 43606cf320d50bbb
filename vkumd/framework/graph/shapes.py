"""Shape inference: the op registry with every op's rule loaded.

Import from here rather than from :mod:`~vkumd.framework.graph.registry`, which is empty
until the rule modules have registered themselves.
"""

from __future__ import annotations

from vkumd.framework.graph import rules_elementwise, rules_tensor  # noqa: F401  (registers)
from vkumd.framework.graph.registry import (
    OPS,
    REQUIRED,
    OpInfo,
    TensorType,
    infer,
    normalize_attrs,
    op_info,
    supported_ops,
)

__all__ = ["OPS", "REQUIRED", "OpInfo", "TensorType", "infer", "normalize_attrs", "op_info",
           "supported_ops"]

"""Shape inference: the op registry with every op's rule loaded.

Import from here rather than from :mod:`~vkumd.framework.graph.registry`, which is empty
until the rule modules have registered themselves.
"""

from __future__ import annotations

from vkumd.framework.graph import (  # noqa: F401  (importing registers the rules)
    rules_elementwise,
    rules_fused,
    rules_tensor,
)
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

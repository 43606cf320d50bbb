"""Names ``vkumd.framework.ops`` imports from this module path, re-exported.

The kernels live in :mod:`.rows`, :mod:`.softmax`, :mod:`.norm`, :mod:`.reduce`,
:mod:`.activation`, :mod:`.gather` and :mod:`.permute`.
"""

from vkumd.compiler.kernels.rows import ROW_CODES, ROW_TYPES, row_layout
from vkumd.compiler.kernels.softmax import SOFTMAX_MAX_LEAD

__all__ = ["ROW_CODES", "ROW_TYPES", "SOFTMAX_MAX_LEAD", "row_layout"]

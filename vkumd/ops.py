"""``vkumd.ops``: every operation on tensors, in one public namespace.

The implementations live in :mod:`vkumd.framework.opset`, one module per op family (record and
eager function together); :mod:`vkumd.framework.ops` builds this namespace from them.
"""

from vkumd.framework.ops import *  # noqa: F403
from vkumd.framework.ops import __all__  # noqa: F401

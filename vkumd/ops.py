"""``vkumd.ops``: every operation on tensors, in one public namespace.

The implementations live in :mod:`vkumd.framework.ops`, one module per family.
"""

from vkumd.framework.ops import *  # noqa: F403
from vkumd.framework.ops import __all__  # noqa: F401

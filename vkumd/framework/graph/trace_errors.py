"""The errors of tracing, and where the user's call is (``file.py:LINE``) for their messages.

Every error of :func:`vkumd.compile`'s tracing names the user's line: the first frame
outside the vkumd package (and outside the generated ``vkumd.ops`` wrappers).
"""

from __future__ import annotations

import os
import sys

from vkumd.errors import VkumdTypeError
from vkumd.framework.graph.errors import GraphError

# Frames in these files are vkumd's own; the first frame outside them is the user's call.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


class TraceError(GraphError):
    """A traced function did something a graph cannot record (the message names the line)."""


class DataDependentError(TraceError):
    """A traced function read a tensor's values on the host (control flow on data)."""


class SymbolicDimError(TraceError, VkumdTypeError):
    """A symbolic dimension was used where a Python int is needed."""


def user_site() -> str | None:
    """``file.py:LINE`` of the innermost caller outside the vkumd package, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        # "<vkumd.ops.add tracing wrapper>" is the generated seam in vkumd.ops.
        if not path.startswith((_PACKAGE_DIR, "<frozen", "<vkumd.")):
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def at_site() -> str:
    """`` at file.py:LINE`` of the user's call, or an empty string."""
    site = user_site()
    return f" at {site}" if site else ""

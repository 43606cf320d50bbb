"""The graph compiler's errors: refusals that name the node (or value) they concern.

They subclass the package's own errors, so ``except VkumdValueError`` still catches them.
"""

from __future__ import annotations

from vkumd.errors import VkumdTypeError, VkumdValueError


class GraphError(VkumdValueError):
    """A graph is malformed, or a node's shapes, attributes or inputs are wrong.

    Attributes:
        node: how the node is written in the text form (``%5 = matmul``), or None when the
            error concerns the graph as a whole.
    """

    def __init__(self, message: str, node: str | None = None) -> None:
        super().__init__(f"{node}: {message}" if node else message)
        self.node = node


class GraphTypeError(GraphError, VkumdTypeError):
    """A node's inputs have dtypes its op does not take, or that disagree."""


class UnsupportedOpError(GraphError):
    """A node names an op the graph compiler has no shape rule for."""

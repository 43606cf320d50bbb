"""The ONNX frontend's errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vkumd.errors import VkumdValueError
from vkumd.framework.models.errors import ModelFileError


@dataclass(frozen=True)
class HostStepCall:
    """A node whose output size depends on its input values, to run on the host.

    Attributes:
        op: the registry op that computes it (its record has a ``host_step``).
        inputs: the node's ONNX input names ("" for an absent optional one).
        outputs: its ONNX output names.
        run: its outputs from its inputs' arrays (ONNX types in, ONNX types out).
    """

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    run: Callable[[list[Any]], list[Any]]


@dataclass(frozen=True)
class Refusal:
    """One node the importer cannot translate.

    Attributes:
        name: the node's name in the model (may be empty).
        op_type: its ONNX operator.
        reason: why (an unknown operator, an attribute value, a dtype).
        needs: the tensor whose value the node needs at import time (a shape, axes), or a
            tuple of such tensors, when that is the only reason; None otherwise.
        host_step: the node's output size depends on its input values: how to run it on
            the host (the model then runs in segments around it); None otherwise.
    """

    name: str
    op_type: str
    reason: str
    needs: str | tuple[str, ...] | None = None
    host_step: HostStepCall | None = None

    def __str__(self) -> str:
        return f"{self.op_type} node {self.name or '(unnamed)'!r}: {self.reason}"


class UnsupportedModelError(VkumdValueError):
    """A model has nodes, attributes or types vkumd cannot import; every one is listed.

    Attributes:
        refusals: one :class:`Refusal` per node that was refused, in model order.
    """

    def __init__(self, refusals: list[Refusal], model: str = "model") -> None:
        self.refusals = list(refusals)
        ops = sorted({r.op_type for r in refusals})
        lines = "\n".join(f"  - {r}" for r in refusals)
        super().__init__(f"{model}: {len(refusals)} node(s) cannot be imported (operators "
                         f"{', '.join(ops)}):\n{lines}")


class OnnxFileError(ModelFileError):
    """An ONNX model cannot be read: not a regular file, not a model protobuf, a tensor whose
    declared size disagrees with its data, external data outside the model's directory. The
    message names the file (or the graph) and the tensor or field."""


class MalformedGraphError(OnnxFileError):
    """An ONNX graph is not well formed: two nodes write one name, a node writes a graph input
    or initializer, a declared output has no producer, a node reads a name nothing defines,
    or the nodes form a cycle. The message names the node and the name."""


class Unsupported(Exception):
    """Raised inside a converter; the importer turns it into a :class:`Refusal`."""


class NeedsConstant(Unsupported):
    """A converter needs the value of ``name`` (shape, axes, starts) at import time.

    Args:
        message: the refusal's text.
        name: the ONNX tensor whose value is needed, or a tuple of them.
    """

    def __init__(self, message: str, name: str | tuple[str, ...]) -> None:
        super().__init__(message)
        self.name = name


class HostStep(Unsupported):
    """Raised by the converter of a node whose output size depends on its input values
    (NonZero, Unique, Compress, NonMaxSuppression): the model runs in segments around it.

    Args:
        message: the refusal's text (what a caller that cannot segment sees).
        call: how to run the node on the host.
    """

    def __init__(self, message: str, call: HostStepCall) -> None:
        super().__init__(message)
        self.call = call


class TooBig(Unsupported):
    """A result would pass the fold limit (``VKUMD_FOLD_LIMIT``) if computed on the host."""


class OnHost(Unsupported):
    """Raised by a converter that takes Derived inputs: compute this node on the host."""

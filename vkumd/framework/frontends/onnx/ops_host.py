"""Converters of the operators whose output size depends on the input's values: NonZero,
Unique, Compress, NonMaxSuppression.

None becomes device work: each raises :class:`~.errors.HostStep` naming the registry op
that computes it on the host (``nonzero``, ``unique``, ``compress``,
``non_max_suppression``: records with a
``host_step``), and :class:`~.model.OnnxModel` runs the model in segments around the node
(:mod:`.segments`). A node whose inputs are all known at import is folded on the host by the
importer instead, like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from vkumd.framework.frontends.onnx.errors import HostStep, HostStepCall, Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph.registry import OPS

Adapt = Callable[[list[np.ndarray]], list[np.ndarray]]


def host_step(node: onnx.NodeProto, op: str, attrs: dict[str, Any],
              adapt: Adapt = lambda outs: outs, scalars: tuple[str, ...] = ()) -> HostStep:
    """The :class:`HostStep` of ``node``: registry op ``op`` (it must be a host step) with
    ``attrs`` (the record's defaults filled in), its results passed through ``adapt``
    (ONNX's layout) and cut to the node's outputs.

    Args:
        scalars: attributes the node's inputs past the op's own give at run time, in order
            (NonMaxSuppression's limit and thresholds); an absent or empty one keeps the
            default.
    """
    record = OPS[op]
    compute = record.host_step
    assert compute is not None, f"{op} is not a host step"
    count, own = len(node.output), len(record.inputs)

    def run(arrays: list[Any]) -> list[Any]:
        given = dict(record.attrs, **attrs)
        for name, value in zip(scalars, arrays[own:], strict=False):
            if value is not None and np.size(value):
                given[name] = np.asarray(value).reshape(-1)[0].item()
        return adapt(compute([np.asarray(a) for a in arrays[:own]], given))[:count]

    call = HostStepCall(op, tuple(node.input), tuple(node.output), run)
    return HostStep(f"the size of its output depends on the input's values: a host step "
                    f"(vkumd.ops.{op}) between device segments", call)


def _axis(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> int | None:
    """The node's ``axis`` attribute (None when absent), checked against its input's rank."""
    axis = attrs.get("axis")
    if axis is None:
        return None
    rank = len(st.shape(node.input[0]))
    if not -rank <= axis < rank:
        raise Unsupported(f"axis {axis} is out of range for a {rank}-D input")
    return int(axis) % rank


@converter("NonZero")
def nonzero(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``vkumd.ops.nonzero``, transposed to ONNX's ``[rank, count]`` int64."""
    raise host_step(node, "nonzero", {}, lambda outs: [outs[0].T.copy()])


@converter("Unique", attrs=("axis", "sorted"))
def unique(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``vkumd.ops.unique``: Y, indices of first occurrences, inverse indices, counts (int64);
    ``sorted=0`` keeps the order of first occurrence."""
    raise host_step(node, "unique", {"dim": _axis(st, node, attrs),
                                     "sorted": bool(attrs.get("sorted", 1))})


@converter("Compress", attrs=("axis",))
def compress(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``vkumd.ops.compress`` (``numpy.compress``: a shorter condition leaves the rest out)."""
    axis = _axis(st, node, attrs)
    cond = st.shape(node.input[1])
    if len(cond) != 1:
        raise Unsupported(f"condition has {len(cond)} dimensions; it must be 1-D")
    raise host_step(node, "compress", {"axis": axis})


@converter("NonMaxSuppression", attrs=("center_point_box",))
def non_max_suppression(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                        ) -> list[Bound | None]:
    """``vkumd.ops.non_max_suppression``: ``[n, 3]`` int64 (batch, class, box) indices."""
    center = attrs.get("center_point_box", 0)
    if center not in (0, 1):
        raise Unsupported(f"center_point_box={center}; ONNX defines 0 and 1")
    raise host_step(node, "non_max_suppression", {"center_point_box": center,
                                                  "max_output_boxes_per_class": 0},
                    scalars=("max_output_boxes_per_class", "iou_threshold", "score_threshold"))

"""Pad folding: an explicit ``pad`` before a convolution or a pooling becomes the window
op's own padding, so the padded copy of the feature map (a launch and a pass over it) goes.

A ``pad`` of a 4-D input in constant mode, padding only height and width and by at least
zero on every side, folds into each reader that pads with the same value:

* ``conv2d`` (its padding reads zeros): value 0;
* ``avg_pool2d`` with ``count_include_pad`` (its padding counts as zeros): value 0;
* ``max_pool2d`` (its padding never wins): value -inf;

each without ``ceil_mode`` (an explicit pad's cells are input, which a ceil-mode window
may start in, where a padded one may not), and a pooling only while its pads stay shorter
than its window (the pooling ops' own limit). The ``pad`` stays while others read it; the
last ``dce`` drops it otherwise (ONNX exporters write ``Pad`` + ``Conv`` for asymmetric or
"SAME" padding, as TensorFlow's converters do).
"""

from __future__ import annotations

import math
from typing import Any

from vkumd.framework.graph.fusion_rewrite import replace_group
from vkumd.framework.graph.ir import Graph, Node
from vkumd.framework.graph.registry import OPS


def _spatial_pads(pad: Node) -> tuple[tuple[int, int, int, int], float] | None:
    """(top, left, bottom, right) and the value of a foldable ``pad``, else None."""
    x = pad.inputs[0]
    attrs = OPS["pad"].full_attrs(pad.attrs)
    pads = attrs["pads"]
    if x is None or x.type.ndim != 4 or attrs["mode"] != "constant" or len(pads) != 8:
        return None
    if not all(isinstance(p, int) and p >= 0 for p in pads):
        return None
    n0, c0, top, left, n1, c1, bottom, right = pads
    if n0 or c0 or n1 or c1:
        return None
    return (top, left, bottom, right), float(attrs["value"])


def _folded(reader: Node, pads: tuple[int, int, int, int], value: float
            ) -> dict[str, Any] | None:
    """``reader``'s attributes with ``pads`` added to its own, or None when it cannot fold."""
    if reader.op not in ("conv2d", "avg_pool2d", "max_pool2d"):
        return None
    attrs = OPS[reader.op].full_attrs(reader.attrs)
    if reader.op == "conv2d" and value != 0.0:
        return None
    if reader.op == "avg_pool2d" and (value != 0.0 or not attrs["count_include_pad"]):
        return None
    if reader.op == "max_pool2d" and value != -math.inf:
        return None
    total = tuple(int(a) + b for a, b in zip(attrs["pads"], pads, strict=True))
    if reader.op != "conv2d":
        if attrs["ceil_mode"]:
            return None
        spans = [d * (k - 1) + 1 for k, d in zip(attrs["kernel"], attrs["dilation"],
                                                 strict=True)]
        if max(total[0], total[2]) >= spans[0] or max(total[1], total[3]) >= spans[1]:
            return None
    new = dict(reader.attrs)
    new["pads"] = total
    return new


def fold_pads(graph: Graph) -> Graph:
    """A copy of ``graph`` where each convolution or pooling reading a foldable ``pad``
    reads the pad's input and pads by the sum (see the module docstring).

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for pad in list(g.nodes):
        if pad.op != "pad":
            continue
        found = _spatial_pads(pad)
        if found is None:
            continue
        pads, value = found
        padded = pad.outputs[0]
        for reader in list(padded.users):
            if reader.inputs[0] is not padded or any(v is padded for v in reader.inputs[1:]):
                continue
            attrs = _folded(reader, pads, value)
            if attrs is None:
                continue
            replace_group(g, reader, [reader], reader.op, [pad.inputs[0], *reader.inputs[1:]],
                          attrs)
    return g

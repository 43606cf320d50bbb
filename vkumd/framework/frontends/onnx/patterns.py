"""Rewrites of ONNX node patterns before conversion.

Exporters write the exact GELU out as ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (five nodes);
vkumd has one ``gelu`` op (and the matmul epilogue fuses it), so the chain becomes one
``Gelu`` node when every intermediate result is read only inside the chain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

_ROOT2 = math.sqrt(2.0)


def _constants(nodes: list[onnx.NodeProto], env: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in env.items():
        if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind == "f":
            out[name] = float(value.reshape(-1)[0])
    for n in nodes:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            array = numpy_helper.to_array(n.attribute[0].t)
            if array.size == 1 and array.dtype.kind == "f":
                out[n.output[0]] = float(array.reshape(-1)[0])
    return out


def _close(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-4 * abs(want)


def _other(node: onnx.NodeProto, name: str) -> str:
    return node.input[1] if node.input[0] == name else node.input[0]


def fuse_erf_gelu(nodes: list[onnx.NodeProto], env: Mapping[str, Any]
                  ) -> list[onnx.NodeProto]:
    """``nodes`` with each erf-GELU chain replaced by one ``Gelu`` node.

    Matches ``Div(x, sqrt2)`` or ``Mul(x, 1/sqrt2)`` -> ``Erf`` -> ``Add(1)`` ->
    ``Mul(x)`` -> ``Mul(0.5)`` (the two Muls in either order, operands either way round).

    Args:
        nodes: the graph's nodes, in order.
        env: the names known so far (initializers), for the constants.

    Returns:
        The rewritten node list (the input list is not modified).
    """
    consts = _constants(nodes, env)
    users: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for name in n.input:
            users.setdefault(name, []).append(n)

    def only_user(name: str) -> onnx.NodeProto | None:
        found = users.get(name, [])
        return found[0] if len(found) == 1 else None

    replaced: dict[int, onnx.NodeProto | None] = {}
    for erf in nodes:
        if erf.op_type != "Erf":
            continue
        scaled = next((n for n in nodes if erf.input[0] in n.output), None)
        if scaled is None or scaled.op_type not in ("Div", "Mul"):
            continue
        x = scaled.input[0]
        c = consts.get(scaled.input[1])
        if not (_close(c, _ROOT2) if scaled.op_type == "Div" else _close(c, 1 / _ROOT2)):
            continue
        add = only_user(erf.output[0])
        if add is None or add.op_type != "Add" or not _close(
                consts.get(_other(add, erf.output[0])), 1.0):
            continue
        first = only_user(add.output[0])
        if first is None or first.op_type != "Mul":
            continue
        partner = _other(first, add.output[0])
        if partner == x:  # (x * (1 + erf)) * 0.5
            last = only_user(first.output[0])
            if last is None or last.op_type != "Mul" or not _close(
                    consts.get(_other(last, first.output[0])), 0.5):
                continue
            chain = [scaled, erf, add, first, last]
        else:  # (x * 0.5) * (1 + erf)
            half = next((n for n in nodes if partner in n.output), None)
            if (half is None or half.op_type != "Mul" or x not in half.input
                    or not _close(consts.get(_other(half, x)), 0.5)
                    or only_user(partner) is not first):
                continue
            chain, last = [half, scaled, erf, add, first], first
        if only_user(scaled.output[0]) is not erf:
            continue
        gelu = helper.make_node("Gelu", [x], [last.output[0]], name=f"{erf.name}_gelu")
        for n in chain:
            replaced[id(n)] = None
        replaced[id(last)] = gelu
    return [replaced.get(id(n), n) for n in nodes if replaced.get(id(n), n) is not None]

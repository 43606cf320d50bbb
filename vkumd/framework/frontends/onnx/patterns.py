"""Rewrites of ONNX node patterns before conversion.

Exporters write the exact GELU out as ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (five nodes);
vkumd has one ``gelu`` op (and the matmul epilogue fuses it), so the chain becomes one
``Gelu`` node when every intermediate result is read only inside the chain.

torch's exporter writes attention (``scaled_dot_product_attention``) as
``(q * s) @ (k^T * s)`` with ``s = head_dim ** -0.25``, and guards the softmax with
``Where(IsNaN(p), 0, p)``; :func:`attention_idioms` rewrites both to the form the attention
fusion reads (``(q @ k^T) * s*s``, no guard) where that cannot change a result.
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
    users = _users(nodes)

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
        if _close(consts.get(partner), 0.5):  # x * (0.5 * (1 + erf)), torch's export
            last = only_user(first.output[0])
            if last is None or last.op_type != "Mul" or _other(last, first.output[0]) != x:
                continue
            chain = [scaled, erf, add, first, last]
        elif partner == x:  # (x * (1 + erf)) * 0.5
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


def _users(nodes: list[onnx.NodeProto]) -> dict[str, list[onnx.NodeProto]]:
    users: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        for name in n.input:
            users.setdefault(name, []).append(n)
    return users


def _finite_mask_add(producer: dict[str, onnx.NodeProto], consts: dict[str, float],
                     name: str) -> bool:
    """Whether ``name`` is ``Add(scores, Where(c, a, b))`` with finite constants a and b."""
    add = producer.get(name)
    if add is None or add.op_type != "Add":
        return False
    for side in add.input:
        mask = producer.get(side)
        if mask is not None and mask.op_type == "Where":
            values = [consts.get(mask.input[1]), consts.get(mask.input[2])]
            return all(v is not None and math.isfinite(v) for v in values)
    return False


def attention_idioms(nodes: list[onnx.NodeProto], env: Mapping[str, Any]
                     ) -> list[onnx.NodeProto]:
    """``nodes`` with torch's attention idioms in the fusion's form.

    * ``MatMul(Mul(a, s), Mul(b, t))`` with one-element constants s, t, each Mul read only
      there, becomes ``Mul(MatMul(a, b), s*t)`` (rounded once instead of twice).
    * ``Where(IsNaN(p), 0, p)`` of ``p = Softmax(scores + Where(c, x, y))``, with x and y
      finite and p read only by the guard, becomes ``p``: a finite mask cannot make a row of
      ``-inf``, the one way softmax makes NaN from numbers (NaN or inf scores still give NaN
      in the attention kernel, where the guard would give 0).

    Args:
        nodes: the graph's nodes, in order.
        env: the names known so far (initializers), for the constants.

    Returns:
        The rewritten node list (the input list is not modified).
    """
    consts = _constants(nodes, env)
    users = _users(nodes)
    producer = {o: n for n in nodes for o in n.output}
    out: list[onnx.NodeProto] = []
    dropped: set[int] = set()
    renamed: dict[str, str] = {}
    for n in nodes:
        if n.op_type == "MatMul":
            scaled = [producer.get(i) for i in n.input]
            factors = [consts.get(p.input[1]) if p is not None and p.op_type == "Mul"
                       else None for p in scaled]
            if all(f is not None for f in factors) and all(
                    len(users.get(p.output[0], [])) == 1 for p in scaled if p is not None):
                assert scaled[0] is not None and scaled[1] is not None
                for p in scaled:
                    dropped.add(id(p))
                product = f"{n.output[0]}_unscaled"
                out.append(helper.make_node("MatMul", [scaled[0].input[0], scaled[1].input[0]],
                                            [product], name=f"{n.name}_unscaled"))
                factor = f"{n.output[0]}_scale"
                out.append(helper.make_node(
                    "Constant", [], [factor], value=numpy_helper.from_array(
                        np.asarray(factors[0] * factors[1], np.float32))))
                out.append(helper.make_node("Mul", [product, factor], list(n.output),
                                            name=n.name))
                continue
        if n.op_type == "Where" and n.input[0] in producer:
            guard = producer[n.input[0]]
            p = n.input[2]
            if (guard.op_type == "IsNaN" and guard.input[0] == p and consts.get(n.input[1]) == 0.0
                    and p in producer and producer[p].op_type == "Softmax"
                    and {id(u) for u in users.get(p, [])} == {id(guard), id(n)}
                    and len(users.get(guard.output[0], [])) == 1
                    and _finite_mask_add(producer, consts, producer[p].input[0])):
                dropped.add(id(guard))
                renamed[n.output[0]] = p
                continue
        out.append(n)
    rewritten = []
    for n in out:
        if id(n) in dropped:
            continue
        if any(i in renamed for i in n.input):
            n = _with_inputs(n, [renamed.get(i, i) for i in n.input])
        rewritten.append(n)
    return rewritten


def _with_inputs(node: onnx.NodeProto, inputs: list[str]) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    del copy.input[:]
    copy.input.extend(inputs)
    return copy

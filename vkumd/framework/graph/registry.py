"""The op registry: one record per op, with every fact the graph, the executors and the
frontends need about it.

Each op is declared once, by a :func:`define` call in its family's module under
:mod:`vkumd.framework.opset`: its inputs and attributes, one shape and dtype rule, its float64
reference, its traits (how it joins a generated elementwise kernel, whether it can be a GEMM
epilogue, which inputs its output may overwrite) and how it runs (its lowering to launches, a
host fallback, the nodes its kernels refuse, its public eager function). Everything else --
shape inference, the reference evaluator, the fusion passes, the memory planner, the
executors, the builder methods and the tests' op lists -- reads these records.

This module is device-free (the graph package's rule); the device facts are callables the
family modules hand in, which the graph never calls.

A shape rule is a function ``(inputs, attrs, dims) -> outputs`` over :class:`TensorType`
values: ``inputs`` has one entry per declared input (None for an absent optional one),
``attrs`` has every declared attribute (defaults filled in) and ``dims`` is the graph's
:class:`~vkumd.framework.graph.dims.DimTable`. A rule raises ``VkumdValueError`` or
``VkumdTypeError`` with a message about the op; :func:`infer` adds the node's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import Shape, format_shape
from vkumd.framework.graph.errors import GraphError, GraphTypeError, UnsupportedOpError
from vkumd.framework.graph.symbols import DimTable


@dataclass(frozen=True)
class TensorType:
    """The static type of a value: a shape (ints and symbolic dims) and a dtype."""

    shape: Shape
    dtype: dtypes.DType

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.name}{format_shape(self.shape)}"


class _Required:
    """The default of an attribute a node must give."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

Rule = Callable[[list[TensorType | None], dict[str, Any], DimTable], list[TensorType]]
Arrays = list[np.ndarray | None]
Reference = Callable[[Arrays, dict[str, Any], list[tuple[int, ...]]], list[np.ndarray]]
"""``(float64 arrays, attrs, output shapes) -> float64 outputs``."""


@dataclass(frozen=True)
class Elementwise:
    """How an elementwise op becomes one step of a ``fused_elementwise`` program.

    Attributes:
        arity: operands the step reads.
        params: attributes written after the operands (``div``'s rounding, ``cast``'s dtype);
            a param equal to the attribute's default is left out of the step.
        glsl: the float32 GLSL expression of the step, over ``{a}``, ``{b}``, ``{c}`` (the
            operands) and one ``{p}`` key per param value (``"floor"``: the expression of
            ``div`` with that rounding is ``glsl_params["floor"]``).
        glsl_params: expressions for param values that change the code.
        any_type: operand positions that may be of any stored type (``where``'s condition);
            the others must be floats for the step to join a group.
        rewrite: ``(operands, attrs) -> step``: the op joins a program as another op's step
            (``scale`` as ``mul`` by a constant); such an op is no step op of its own.
        numeric: the params are real numbers (``leaky_relu``'s alpha, ``clip``'s bounds):
            every step writes all of them, defaults included, and the expression reads them
            after the operands as float32 constants (``{b}`` and ``{c}`` of a one-operand op),
            so each value compiles its own kernel, as a program's constants do.
    """

    arity: int
    glsl: str = ""
    params: tuple[str, ...] = ()
    glsl_params: Mapping[str, str] = field(default_factory=dict)
    any_type: tuple[int, ...] = ()
    rewrite: Callable[[list[Any], Mapping[str, Any]], tuple[Any, ...]] | None = None
    numeric: bool = False

    def expression(self, params: Sequence[Any]) -> str:
        """The GLSL template of a step whose params are ``params``."""
        for p in params:
            if isinstance(p, str) and p in self.glsl_params:
                return self.glsl_params[p]
        return self.glsl


@dataclass(frozen=True)
class OpDef:
    """Everything vkumd knows about one op.

    Attributes:
        name: the op's name, as in ``vkumd.ops`` where it has an eager function.
        inputs: input names; ``"bias?"`` is optional, ``"xs*"`` takes one or more.
        attrs: attribute names and their defaults (:data:`REQUIRED`: no default).
        rule: the shape and dtype rule.
        reference: the float64 implementation (see :data:`Reference`).
        inplace: the output may be written over an input of the same byte size that dies at
            this node: ``True`` for any input (elementwise ops, whose every output element
            depends only on the input elements at the same index, and reshape, which moves
            no bytes), or the names of the inputs that may be (matmul's ``residual``: the
            epilogue reads each residual element once, for the output element at its index,
            which only that invocation writes; ``a`` and ``b`` are read by many).
        updates: the name of the input the op updates in place and returns (``kv_write``'s
            ``cache``): the output IS that input's memory, not a copy. Executors hand the
            input's tensor to the lowering as the output, the memory planner gives the output
            no memory of its own, a compiled graph reads a caller's tensor for that input
            where it is (so the caller's tensor holds the update), and dead-code elimination
            keeps the node (its effect is the caller's). The graph stays a function only if
            no node reads the input after this one: :func:`~vkumd.framework.graph.check.
            check_graph` refuses a graph that does, or that updates a weight.
        elementwise: how the op joins a generated elementwise kernel (None: it does not).
        epilogue: the op is an activation a GEMM epilogue applies (``matmul``'s
            ``activation`` attribute takes its name).
        view: the output is the input's bytes under another shape: no launch.
        lower: records a node's launches into given output tensors,
            ``(node, inputs, outputs) -> None`` (None: no device kernel).
        refuse: ``node -> reason or None``: why the device kernels cannot run this node
            although the op has a lowering (a dtype or attribute they do not take).
        host: runs a node on the host in numpy, ``(ctx, inputs, attrs, shapes) -> outputs``,
            where ``lower`` cannot (exact moves and comparisons only).
        eager: the public ``vkumd.ops`` function, if the op has one.
        host_step: the op's output size depends on its input values (``nonzero``,
            ``unique``): it always runs on the host, ``(arrays, attrs) -> arrays`` in numpy
            keeping the inputs' dtypes (indices int64). Its eager function reads the inputs
            back (a synchronisation and a transfer), calls this and uploads the result; a
            graph cannot hold it (its rule refuses), the ONNX runner runs a model in segments
            around it (:mod:`vkumd.framework.frontends.onnx.segments`).
        saturating: float attributes rounded to the tensor's type as a number operand is
            (past its range: infinity), where every other attribute past float32's range is
            refused (:func:`check_floats`).
    """

    name: str
    inputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    rule: Rule
    reference: Reference
    inplace: bool | tuple[str, ...] = False
    updates: str | None = None
    elementwise: Elementwise | None = None
    epilogue: bool = False
    view: bool = False
    lower: Callable[..., None] | None = None
    refuse: Callable[[Any], str | None] | None = None
    host: Callable[..., Any] | None = None
    eager: Callable[..., Any] | None = None
    host_step: Callable[[list[np.ndarray], dict[str, Any]], list[np.ndarray]] | None = None
    saturating: tuple[str, ...] = ()

    def overwritable(self, index: int) -> bool:
        """Whether the output may be written over input ``index`` (see :attr:`inplace`)."""
        if self.inplace is True or self.inplace is False:
            return self.inplace
        if index >= len(self.inputs):
            return False
        return self.inputs[index].rstrip("?*") in self.inplace

    def updated_input(self) -> int | None:
        """The index of the input the op updates in place (see :attr:`updates`), or None."""
        if self.updates is None:
            return None
        return [n.rstrip("?*") for n in self.inputs].index(self.updates)

    def full_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """``attrs`` with every default filled in (what rules, references and lowering read).

        Raises:
            VkumdValueError: a float attribute float32 cannot hold (:func:`check_floats`).
        """
        check_floats(self, attrs)
        full = dict(self.attrs)
        full.update(attrs)
        return full

    def padded(self, inputs: Sequence[Any]) -> list[Any]:
        """``inputs`` with absent trailing optional ones as None (variadic ops: unchanged)."""
        if any(n.endswith("*") for n in self.inputs):
            return list(inputs)
        return list(inputs) + [None] * (len(self.inputs) - len(inputs))

    def arity(self) -> tuple[int, int | None]:
        """``(least, most)`` inputs the op takes (``most`` None: unbounded)."""
        least = sum(1 for n in self.inputs if not n.endswith(("?", "*")))
        variadic = any(n.endswith("*") for n in self.inputs)
        return least + (1 if variadic else 0), None if variadic else len(self.inputs)


OPS: dict[str, OpDef] = {}


def define(name: str, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None, *,
           rule: Rule, reference: Reference, **facts: Any) -> OpDef:
    """Declare op ``name`` (once; a second declaration of a name is refused).

    Args:
        name: the op's name.
        inputs: input names (``"x?"`` optional, ``"xs*"`` one or more).
        attrs: attribute names and defaults.
        rule: the shape and dtype rule.
        reference: the float64 implementation.
        **facts: the other :class:`OpDef` fields.

    Returns:
        The record, also in :data:`OPS`.

    Raises:
        VkumdValueError: ``name`` is declared already.
    """
    if name in OPS:
        raise VkumdValueError(f"op {name!r} is declared twice; an op has one definition")
    op = OpDef(name, tuple(inputs), dict(attrs or {}), rule, reference, **facts)
    OPS[name] = op
    return op


def op_info(op: str, where: str | None = None) -> OpDef:
    """The registry entry of ``op``.

    Raises:
        UnsupportedOpError: no op of that name; the message lists the supported ones.
    """
    info = OPS.get(op)
    if info is None:
        raise UnsupportedOpError(f"op {op!r} is not supported; supported ops: "
                                 f"{', '.join(sorted(OPS))}", where)
    return info


# The largest finite float32: kernels take float attributes as float32 push constants, and
# packing a larger finite value raised a bare OverflowError from struct.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def outside_float32(value: Any) -> bool:
    """Whether ``value`` (a real number) is finite and past float32's range, or an int past
    float64's; inf and NaN are not (each op says whether it takes them)."""
    try:
        number = float(value)
    except OverflowError:
        return True
    return FLOAT32_MAX < abs(number) < math.inf


def float32_refusal(op: str, what: str, value: Any) -> str:
    """The message refusing ``value`` for ``what`` of ``op`` (see :func:`outside_float32`)."""
    shown = repr(value)
    if len(shown) > 24:  # an int of hundreds of digits
        shown = f"{shown[:8]}... ({len(shown)} characters)"
    return (f"{op}: {what}={shown} is outside float32's range (finite values from "
            f"-{FLOAT32_MAX:g} to {FLOAT32_MAX:g}, or inf where the op takes it); pass a value "
            "float32 holds")


def check_floats(info: OpDef, attrs: Mapping[str, Any], where: str | None = None) -> None:
    """Refuse numeric attributes float32 cannot hold, every op alike (at any depth, as a
    fused program's constants), except those :attr:`OpDef.saturating` rounds to infinity.

    Raises:
        GraphError: naming the op, the attribute and float32's range (with ``where``; a
            :class:`VkumdValueError` either way).
    """
    for key, value in attrs.items():
        if key in info.saturating:
            continue
        for number in _numbers(value):
            if outside_float32(number):
                raise GraphError(float32_refusal(info.name, f"attribute {key}", value), where)


def _numbers(value: Any) -> list[Any]:
    """The real numbers in ``value`` (nested in tuples and lists), bools aside."""
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _numbers(v)]
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
            value, (bool, np.bool_)):
        return [value]
    return []


def normalize_attrs(info: OpDef, attrs: Mapping[str, Any], where: str | None) -> dict[str, Any]:
    """``attrs`` without the entries equal to their defaults (so equal nodes compare equal).

    Raises:
        GraphError: an attribute the op does not declare; a float attribute float32 cannot
            hold (:func:`check_floats`).
    """
    unknown = sorted(set(attrs) - set(info.attrs))
    if unknown:
        known = ", ".join(info.attrs) or "none"
        raise GraphError(f"{info.name} has no attribute {', '.join(unknown)}; its attributes: "
                         f"{known}", where)
    check_floats(info, attrs, where)
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        default = info.attrs[key]
        value = _frozen(value)
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # alpha=1 and alpha=1.0 are one attribute to CSE
        if type(value) is type(default) and value == default:
            continue
        out[key] = value
    return out


def _frozen(value: Any) -> Any:
    """Lists as tuples, so attributes hash (CSE keys nodes by them)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def infer(op: str, inputs: Sequence[TensorType | None], attrs: Mapping[str, Any],
          dims: DimTable, where: str | None = None) -> list[TensorType]:
    """The output types of an ``op`` node with these input types and attributes.

    Args:
        op: the op's name.
        inputs: the input types, None where an optional input is absent.
        attrs: the node's attributes (defaults may be left out).
        dims: the graph's symbol equalities.
        where: how to name the node in errors (``%5 = matmul``).

    Returns:
        One type per output.

    Raises:
        UnsupportedOpError: an unknown op.
        GraphError: the wrong number of inputs, an unknown attribute, shapes that do not fit.
        GraphTypeError: dtypes the op does not take.
    """
    info = op_info(op, where)
    least, most = info.arity()
    count = len(inputs)
    if count < least or (most is not None and count > most):
        raise GraphError(f"{op} takes inputs ({', '.join(info.inputs)}), got {count}", where)
    fixed = [n for n in info.inputs if not n.endswith("*")]
    for i, name in enumerate(fixed[:count]):
        if inputs[i] is None and not name.endswith("?"):
            raise GraphError(f"{op}'s input {name} is required", where)
    if len(fixed) < len(info.inputs) and any(v is None for v in inputs[len(fixed):]):
        raise GraphError(f"{op}'s inputs {info.inputs[-1][:-1]} may not be absent", where)
    full = info.full_attrs(attrs)
    missing = [k for k, v in full.items() if v is REQUIRED]
    if missing:
        raise GraphError(f"{op} needs the attribute {', '.join(missing)}", where)
    padded = info.padded(inputs)
    try:
        return info.rule(padded, full, dims)
    except GraphError:
        raise
    except VkumdTypeError as exc:
        raise GraphTypeError(_unprefixed(op, exc), where) from None
    except VkumdValueError as exc:
        raise GraphError(_unprefixed(op, exc), where) from None


def _unprefixed(op: str, exc: Exception) -> str:
    # Rules word their messages as the ops do ("matmul: ..."); the node's name replaces it.
    text = str(exc)
    return text[len(op) + 2:] if text.startswith(f"{op}: ") else text


def supported_ops() -> list[str]:
    """The names of every op with a shape rule, sorted."""
    return sorted(OPS)

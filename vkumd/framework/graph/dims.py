"""Symbolic dimensions: ``batch``, ``seq``, their products and sums, mixed with ints.

A dimension is either a plain ``int`` or a :class:`Dim`, a polynomial with integer
coefficients over named symbols (``batch*seq``, ``seq + 1``, ``2*seq``). Polynomials are kept
in one canonical form, so two dimensions are equal exactly when their forms are: that is all
reshape (products, exact division), concat (sums) and slicing (differences) need. A
:class:`Dim` whose polynomial is a constant never exists; it collapses to an ``int``.

Different symbols are different sizes unless a
:class:`~vkumd.framework.graph.symbols.DimTable` is told otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Union

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError

# A monomial is the sorted tuple of its symbols, with repetition: ("batch", "seq", "seq").
_Monomial = tuple[str, ...]
_Terms = tuple[tuple[_Monomial, int], ...]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The string form of a multiple of a symbol: "32*h", "h*32", "32*h + 1".
_LINEAR = re.compile(r"^\s*(?:(\d+)\s*\*\s*)?([A-Za-z_][A-Za-z0-9_]*)(?:\s*\*\s*(\d+))?"
                     r"\s*(?:([+-])\s*(\d+))?\s*$")

DimLike = Union[int, str, "Dim"]
Shape = tuple[Union[int, "Dim"], ...]


class Dim:
    """A symbolic dimension: a canonical polynomial over named symbols.

    Build one with :func:`sym` and ordinary ``+``, ``-``, ``*`` and exact ``//``.
    """

    __slots__ = ("_terms",)

    def __init__(self, terms: _Terms) -> None:
        self._terms = terms

    @property
    def symbols(self) -> frozenset[str]:
        """The names of the symbols that occur in this dimension."""
        return frozenset(s for mono, _ in self._terms for s in mono)

    def bind(self, env: Mapping[str, int]) -> int:
        """The integer this dimension takes when each symbol has the size ``env`` gives.

        Raises:
            VkumdValueError: a symbol has no size in ``env``, or the result is negative.
        """
        missing = sorted(self.symbols - set(env))
        if missing:
            raise VkumdValueError(f"dimension {self} needs sizes for {', '.join(missing)}; "
                                  "bind every symbol to an int")
        total = 0
        for mono, coeff in self._terms:
            term = coeff
            for s in mono:
                term *= int(env[s])
            total += term
        if total < 0:
            raise VkumdValueError(f"dimension {self} is {total} with {dict(env)}; sizes must "
                                  "be >= 0")
        return total

    def subs(self, mapping: Mapping[str, int | Dim]) -> int | Dim:
        """This dimension with each symbol in ``mapping`` replaced by its value."""
        total: int | Dim = 0
        for mono, coeff in self._terms:
            term: int | Dim = coeff
            for s in mono:
                term = term * mapping.get(s, Dim((((s,), 1),)))
            total = total + term
        return total

    def _binary(self, other: object, combine: str) -> int | Dim:
        rhs = _as_terms(other)
        if rhs is None:
            return NotImplemented
        if combine == "add":
            return _make(_add(self._terms, rhs))
        if combine == "sub":
            return _make(_add(self._terms, tuple((m, -c) for m, c in rhs)))
        return _make(_mul(self._terms, rhs))

    def __add__(self, other: object) -> int | Dim:
        return self._binary(other, "add")

    def __radd__(self, other: object) -> int | Dim:
        return self._binary(other, "add")

    def __sub__(self, other: object) -> int | Dim:
        return self._binary(other, "sub")

    def __rsub__(self, other: object) -> int | Dim:
        rhs = _as_terms(other)
        if rhs is None:
            return NotImplemented
        return _make(_add(rhs, tuple((m, -c) for m, c in self._terms)))

    def __mul__(self, other: object) -> int | Dim:
        return self._binary(other, "mul")

    def __rmul__(self, other: object) -> int | Dim:
        return self._binary(other, "mul")

    def __floordiv__(self, other: object) -> int | Dim:
        quotient = divide_exact(self, other)  # type: ignore[arg-type]
        if quotient is None:
            raise VkumdValueError(f"{self} is not an exact multiple of {other}")
        return quotient

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dim) and self._terms == other._terms

    def __hash__(self) -> int:
        return hash(self._terms)

    def __str__(self) -> str:
        parts: list[str] = []
        for mono, coeff in sorted(self._terms, key=lambda t: (-len(t[0]), t[0])):
            body = "*".join(mono)
            magnitude = abs(coeff)
            text = body if magnitude == 1 and body else (
                f"{magnitude}*{body}" if body else str(magnitude))
            if not parts:
                parts.append(text if coeff > 0 else f"-{text}")
            else:
                parts.append(f"+ {text}" if coeff > 0 else f"- {text}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Dim({str(self)!r})"


def _as_terms(value: object) -> _Terms | None:
    if isinstance(value, Dim):
        return value._terms
    if isinstance(value, int) and not isinstance(value, bool):
        return (((), value),) if value else ()
    return None


def _add(a: _Terms, b: _Terms) -> _Terms:
    acc: dict[_Monomial, int] = {}
    for mono, coeff in a + b:
        acc[mono] = acc.get(mono, 0) + coeff
    return tuple(sorted((m, c) for m, c in acc.items() if c))


def _mul(a: _Terms, b: _Terms) -> _Terms:
    acc: dict[_Monomial, int] = {}
    for ma, ca in a:
        for mb, cb in b:
            mono = tuple(sorted(ma + mb))
            acc[mono] = acc.get(mono, 0) + ca * cb
    return tuple(sorted((m, c) for m, c in acc.items() if c))


def _make(terms: _Terms) -> int | Dim:
    if not terms:
        return 0
    if len(terms) == 1 and terms[0][0] == ():
        return terms[0][1]
    return Dim(terms)


def sym(name: str) -> Dim:
    """The symbolic dimension called ``name`` (an identifier such as ``"batch"``).

    Raises:
        VkumdValueError: ``name`` is not an identifier.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise VkumdValueError(f"symbolic dimension name {name!r} must be an identifier, such "
                              "as 'batch' or 'seq'")
    return Dim((((name,), 1),))


def parse_dim(text: str) -> int | Dim:
    """A symbol name (``"h"``) or a multiple of one, plus a constant (``"32*h"``,
    ``"h*32"``, ``"32*h + 1"``) as a dimension.

    Raises:
        VkumdValueError: ``text`` is neither form.
    """
    if _NAME.match(text):
        return sym(text)
    match = _LINEAR.match(text)
    if match is None or (match.group(1) and match.group(3)):
        raise VkumdValueError(f"symbolic dimension {text!r} must be an identifier such as "
                              "'h', or a multiple of one such as '32*h' (or '32*h + 1')")
    coeff = int(match.group(1) or match.group(3) or 1)
    if coeff < 1:
        raise VkumdValueError(f"symbolic dimension {text!r}: the multiple must be >= 1")
    shift = int(match.group(5) or 0) * (-1 if match.group(4) == "-" else 1)
    return coeff * sym(match.group(2)) + shift


def as_dim(value: object) -> int | Dim:
    """``value`` as a dimension: an int >= 0, a symbol name or multiple (:func:`parse_dim`),
    or a :class:`Dim`.

    Raises:
        VkumdTypeError: ``value`` is none of those.
        VkumdValueError: a negative int or a string of neither form.
    """
    if isinstance(value, Dim):
        return value
    if isinstance(value, str):
        return parse_dim(value)
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise VkumdTypeError(f"a dimension must be an int, a symbol name or a Dim, not "
                             f"{type(value).__name__} {value!r}")
    if value < 0:
        raise VkumdValueError(f"a dimension must be >= 0, got {value}")
    return value


def as_shape(values: Iterable[object]) -> Shape:
    """A tuple of dimensions from ints, symbol names and :class:`Dim` values."""
    if isinstance(values, (str, int)):
        raise VkumdTypeError(f"a shape must be a sequence of dimensions, not {values!r}")
    return tuple(as_dim(v) for v in values)


def product(dims: Iterable[int | Dim]) -> int | Dim:
    """The product of ``dims`` (1 for none)."""
    total: int | Dim = 1
    for d in dims:
        total = total * d
    return total


def divide_exact(a: int | Dim, b: int | Dim) -> int | Dim | None:
    """``a / b`` when ``b`` divides ``a`` exactly as polynomials, else None.

    Only a single-term divisor (``384``, ``heads*dim``, ``2*seq``) is tried: enough to solve a
    reshape's ``-1``.
    """
    ta, tb = _as_terms(a), _as_terms(b)
    if ta is None or tb is None or len(tb) != 1:
        return None
    (mono_b, coeff_b), = tb
    out: list[tuple[_Monomial, int]] = []
    for mono, coeff in ta:
        rest = list(mono)
        for s in mono_b:
            if s not in rest:
                return None
            rest.remove(s)
        if coeff % coeff_b:
            return None
        out.append((tuple(rest), coeff // coeff_b))
    return _make(_add(tuple(out), ()))


def constant_part(d: int | Dim) -> int:
    """The constant term of ``d`` (``1`` of ``32*h + 1``; ``d`` itself for an int)."""
    if isinstance(d, int):
        return d
    return sum(coeff for mono, coeff in d._terms if not mono)


def linear(d: int | Dim) -> tuple[str, int, int] | None:
    """``(name, a, b)`` when ``d`` is ``a*name + b`` with ``a >= 1`` (one symbol, to the first
    power), else None: the dimensions a concrete size solves for their symbol."""
    if not isinstance(d, Dim):
        return None
    variable = [(mono, coeff) for mono, coeff in d._terms if mono]
    if len(variable) != 1 or len(variable[0][0]) != 1 or variable[0][1] < 1:
        return None
    (name,), coeff = variable[0]
    return name, coeff, constant_part(d)


def solve(d: Dim, size: int, what: str) -> tuple[str, int]:
    """The symbol of the linear ``d`` (:func:`linear`) and the value that makes it ``size``.

    Raises:
        VkumdValueError: no whole value >= 0 gives ``size`` (the message says how to pad).
    """
    found = linear(d)
    assert found is not None, d  # callers ask linear() first
    name, coeff, shift = found
    value, rest = divmod(size - shift, coeff)
    if rest or value < 0:
        pad = (f"a multiple of {coeff}" if not shift else
               f"{coeff}*k {'+' if shift > 0 else '-'} {abs(shift)} for a whole k >= 0")
        raise VkumdValueError(f"{what} is {size}, which is not {d} for any whole {name}; pad "
                              f"it to {pad}")
    return name, value


def bind_shape(shape: Shape, env: Mapping[str, int]) -> tuple[int, ...]:
    """``shape`` with every symbol replaced by its size in ``env``."""
    return tuple(d if isinstance(d, int) else d.bind(env) for d in shape)


def format_shape(shape: Shape) -> str:
    """``[batch, seq, 384]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"

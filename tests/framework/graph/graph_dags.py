"""Random elementwise programs for the property tests: built as a graph and run in numpy.

A program has a few inputs (broadcast-compatible shapes, the leading axis sometimes the
symbol ``batch``), a few constants, and steps that each apply one op to earlier values.
Some steps repeat an earlier one exactly, so CSE has work; constant-only steps give
constant folding work; values no output reads give DCE work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from vkumd.framework.graph import Graph, GraphBuilder

BASE = (2, 3, 4)
BATCH = BASE[0]
UNARY = ("relu", "silu", "gelu_tanh", "scale", "sum_keep", "reshape_twice")
BINARY = ("add", "sub", "mul", "maximum", "safe_div")


@dataclass
class Program:
    """A random elementwise computation."""

    inputs: list[tuple[Any, ...]]  # declared shapes ("batch" or ints)
    feeds: list[np.ndarray]
    constants: list[np.ndarray]
    steps: list[tuple[str, tuple[int, ...], float]] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def build(self) -> Graph:
        """The program as a graph (pool indices: inputs, constants, then steps)."""
        b = GraphBuilder("random")
        pool = [b.input(f"x{i}", s) for i, s in enumerate(self.inputs)]
        pool += [b.weight(f"c{i}", c) for i, c in enumerate(self.constants)]
        for op, args, alpha in self.steps:
            vals = [pool[i] for i in args]
            if op == "scale":
                pool.append(b.scale(vals[0], alpha))
            elif op == "sum_keep" and vals[0].type.ndim:
                pool.append(b.sum(vals[0], keepdims=True))
            elif op == "reshape_twice":
                pool.append(b.reshape(b.reshape(vals[0], (-1,)), vals[0].shape))
            elif op in ("sum_keep", "relu"):
                pool.append(b.relu(vals[0]))
            elif op in ("silu", "gelu_tanh"):
                pool.append(getattr(b, op)(vals[0]))
            elif op == "maximum":
                pool.append(b.where(b.gt(vals[0], vals[1]), vals[0], vals[1]))
            elif op == "safe_div":
                pool.append(b.div(vals[0], b.add(b.mul(vals[1], vals[1]), 1.0)))
            else:
                pool.append(getattr(b, op)(vals[0], vals[1]))
        b.output(*(pool[i] for i in self.outputs))
        return b.build()

    def numpy(self) -> list[np.ndarray]:
        """The outputs computed directly with numpy in float64."""
        pool = [f.astype(np.float64) for f in self.feeds]
        pool += [c.astype(np.float64) for c in self.constants]
        for op, args, alpha in self.steps:
            a = pool[args[0]]
            c = pool[args[1]] if len(args) > 1 else None
            if op == "scale":
                pool.append(a * alpha)
            elif op == "sum_keep" and a.ndim:
                pool.append(a.sum(axis=-1, keepdims=True))
            elif op == "reshape_twice":
                pool.append(a)
            elif op in ("sum_keep", "relu"):
                pool.append(np.maximum(a, 0.0))
            elif op == "silu":
                pool.append(a / (1.0 + np.exp(-a)))
            elif op == "gelu_tanh":
                pool.append(0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3))))
            elif op == "maximum":
                pool.append(np.where(a > c, a, c))
            elif op == "safe_div":
                pool.append(a / (c * c + 1.0))
            else:
                pool.append({"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](a, c))
        return [np.broadcast_to(pool[i], pool[i].shape) for i in self.outputs]

    def feed_dict(self) -> dict[str, np.ndarray]:
        """The inputs by name."""
        return {f"x{i}": f for i, f in enumerate(self.feeds)}


@st.composite
def shapes(draw: st.DrawFn, symbolic: bool, constant: bool = False
           ) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """A declared shape broadcastable to BASE, and its concrete form.

    With ``symbolic``, a full leading axis is ``batch`` in inputs and 1 in constants (a
    symbol broadcasts only with 1 or itself).
    """
    rank = draw(st.integers(0, len(BASE)))
    concrete = tuple(draw(st.sampled_from((1, d))) for d in BASE[len(BASE) - rank:])
    if symbolic and rank == len(BASE) and concrete[0] == BATCH:
        if constant:
            return (1, *concrete[1:]), (1, *concrete[1:])
        return ("batch", *concrete[1:]), concrete
    return concrete, concrete


@st.composite
def programs(draw: st.DrawFn, max_steps: int = 10) -> Program:
    """A random program with 1-3 inputs, 0-2 constants and 1-``max_steps`` steps."""
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    inputs, feeds, constants = [], [], []
    symbolic = draw(st.booleans())
    for _ in range(draw(st.integers(1, 3))):
        declared, concrete = draw(shapes(symbolic))
        inputs.append(declared)
        feeds.append(rng.standard_normal(concrete).astype(np.float32))
    for _ in range(draw(st.integers(0, 2))):
        _, concrete = draw(shapes(symbolic, constant=True))
        constants.append(rng.standard_normal(concrete).astype(np.float32))
    program = Program(inputs, feeds, constants)
    pool = len(inputs) + len(constants)
    for _ in range(draw(st.integers(1, max_steps))):
        if program.steps and draw(st.integers(0, 4)) == 0:
            program.steps.append(program.steps[draw(st.integers(0, len(program.steps) - 1))])
        else:
            op = draw(st.sampled_from(UNARY + BINARY))
            arity = 1 if op in UNARY else 2
            args = tuple(draw(st.integers(0, pool - 1)) for _ in range(arity))
            alpha = draw(st.sampled_from((0.5, -2.0, 3.0)))
            program.steps.append((op, args, alpha))
        pool += 1
    last = pool - 1
    extra = draw(st.lists(st.integers(len(inputs) + len(constants), last), max_size=2))
    program.outputs = [last, *extra]
    return program


def bindings(program: Program) -> dict[str, int]:
    """Sizes for the program's symbols."""
    return {"batch": BATCH}

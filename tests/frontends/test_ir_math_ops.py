"""The IR's math ops added for importers (exp, sqrt, tanh, erf, sigmoid): shape rules,
float64 references and builder methods. No device kernel runs them yet."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vkumd.framework.graph import GraphBuilder, GraphTypeError, evaluate

CASES = {"exp": np.exp, "sqrt": np.sqrt, "tanh": np.tanh,
         "erf": np.vectorize(math.erf), "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}


@pytest.mark.parametrize("op", sorted(CASES))
def test_math_op_keeps_shape_and_matches_numpy(op: str) -> None:
    b = GraphBuilder()
    x = b.input("x", ("batch", 3), "float16")
    y = getattr(b, op)(x)
    assert y.shape == x.shape and y.dtype.name == "float16"
    b.output(y)
    data = np.linspace(0.1, 2.0, 6).reshape(2, 3)
    got = evaluate(b.build(), {"x": data})[0]
    rounded = data.astype(np.float16).astype(np.float64)  # inputs round to their dtype
    np.testing.assert_allclose(got, CASES[op](rounded), rtol=1e-12)


@pytest.mark.parametrize("op", sorted(CASES))
def test_math_op_refuses_integers(op: str) -> None:
    b = GraphBuilder()
    x = b.input("x", (4,), "int32")
    with pytest.raises(GraphTypeError, match=f"{op} takes float32"):
        getattr(b, op)(x)


def test_sqrt_of_a_negative_is_nan_without_a_warning() -> None:
    b = GraphBuilder()
    x = b.input("x", (2,))
    b.output(b.sqrt(x))
    with np.errstate(all="raise"):
        got = evaluate(b.build(), {"x": np.array([-1.0, 4.0], np.float32)})[0]
    assert math.isnan(got[0]) and got[1] == 2.0

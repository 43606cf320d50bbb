"""``ops.maximum`` and ``ops.minimum`` at the values the generated kernel must not get wrong:
NaN on either side (it propagates, as numpy's), infinities and signed zeros, in every float
dtype, poisoned outputs. (Random data, broadcasting and fusion are
tests/framework/test_generated_ops.py's, which iterates the registry.)"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import FLOATS, poisoned

from vkumd import ops

SPECIAL = np.array([np.nan, -np.inf, -1.5, -0.0, 0.0, 2.0, np.inf], np.float32)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_nan_infinities_and_zeros(ctx, op: str, dtype: str) -> None:
    a = np.repeat(SPECIAL, len(SPECIAL))  # every ordered pair of special values
    b = np.tile(SPECIAL, len(SPECIAL))
    out = poisoned(ctx, a.shape, dtype)
    got = getattr(ops, op)(ctx.tensor(a, dtype=dtype), ctx.tensor(b, dtype=dtype), out=out)
    want = getattr(np, op)(a, b)
    # Which zero is the larger of 0.0 and -0.0 numpy leaves open; both compare equal.
    np.testing.assert_array_equal(got.numpy().astype(np.float32), want)
    assert np.isnan(want).sum() == 2 * len(SPECIAL) - 1

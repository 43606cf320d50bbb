"""Helpers shared by the transformer-op tests (softmax, norms, activations, reductions, layout).

References are float64 numpy computed from the values the tensors actually store; results
are compared by relative Frobenius error, and NaN never passes.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import vkumd
from vkumd.compiler.kernels import WORKGROUP, rows
from vkumd.framework import ops
from vkumd.testing.numerics import poisoned, rel_error, stored  # noqa: F401 (shared here)

FLOATS = ["float32", "float16", "bfloat16"]
# Relative Frobenius error: float32 arithmetic, then one rounding to the stored type.
TOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
# Below these magnitudes a 16-bit result is subnormal or nearly so and its rounding alone
# exceeds TOL relative to the value: a tiny expected norm is judged against this instead.
SMALLEST_JUDGED = {"float32": 1e-30, "float16": 1e-2, "bfloat16": 1e-30}
# Row-kernel reduction paths every lane can run; "device" is what row_layout picks.
PATHS = {
    "device": None,
    "one-subgroup": lambda caps: {"SUBGROUP_REDUCE": 1, WORKGROUP: caps.subgroup_size},
    # At most 8 subgroups: lavapipe 25 at 16-wide subgroups miscomputes these kernels with 16
    # subgroups of 16 once a row has more than 64 units (not reproduced in a small shader;
    # docs/performance.md, "Sixteen-wide subgroups"). Planners give CPU devices one subgroup.
    "subgroups+shared": lambda caps: {"SUBGROUP_REDUCE": 1,
                                      WORKGROUP: min(256, 8 * caps.subgroup_size)},
    "shared-tree": lambda caps: {"SUBGROUP_REDUCE": 0, WORKGROUP: 64},
}


def sample(rng: np.random.Generator, dtype: str, shape: tuple[int, ...],
           scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """Normal values exactly representable in ``dtype`` (as float64)."""
    return stored(rng.standard_normal(shape) * scale + offset, dtype)


def tensor(ctx, values: np.ndarray, dtype: str) -> vkumd.Tensor:
    """A tensor of ``dtype`` holding ``values`` (already representable)."""
    return ctx.tensor(np.asarray(values, dtype=np.float32), dtype=dtype)


def assert_close(got: np.ndarray, expected: np.ndarray, dtype: str, what: str = "") -> None:
    """Same shape, no NaN, relative Frobenius error within ``TOL[dtype]``."""
    assert got.shape == expected.shape, what
    assert not np.isnan(got).any(), f"{what}: NaN in the output (an element was not written?)"
    err = rel_error(got, expected)
    scale = np.linalg.norm(expected)
    if 0 < scale < SMALLEST_JUDGED[dtype]:
        err = float(np.linalg.norm(np.asarray(got, np.float64) - expected)
                    / SMALLEST_JUDGED[dtype])
    assert err < TOL[dtype], f"{what}: relative error {err:.3g} >= {TOL[dtype]}"


def assert_each_raises(ctx, cases, names: str = "") -> None:
    """Each ``(error class, call)`` raises that vkumd error (whose text names ``names`` when
    given), and the context still runs work afterwards."""
    for error, call in cases:
        with pytest.raises(error) as info:
            call()
        assert isinstance(info.value, vkumd.VkumdError)
        assert names in str(info.value)
    assert_usable(ctx)


def assert_usable(ctx) -> None:
    """The context still runs work after an error."""
    t = ctx.tensor(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(ops.add(t, t).numpy(), [0, 2, 4, 6])


@pytest.fixture(params=list(PATHS))
def row_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test once per row-reduction path (subgroup, subgroups + shared, shared tree)."""
    layout = PATHS[request.param]
    if layout is not None:
        monkeypatch.setattr(rows, "row_layout", layout)
    yield request.param

"""``activation.glsl``'s one-division selects give the bits its two-division forms gave.

sigmoid, silu and gelu_tanh once chose between two quotients (``c ? 1 / d : e / d``), which
a SIMD driver evaluates both of; they now choose the numerator and divide once, and gelu
chooses the factor before one multiply. A test kernel computes the old forms (as they were,
kept in bench/fused_vec.py as ``TWO_DIVISION_FORMS``) beside the shipped functions over the
same values, on the device, and every result must match bit for bit (any NaN matches any
NaN).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel
from vkumd.testing.numerics import poisoned


def _two_division_forms() -> str:
    """The old forms' GLSL, from the benchmark that times them against the new ones (one
    text, so what is timed is what is proven equal)."""
    path = Path(__file__).resolve().parents[2] / "bench" / "fused_vec.py"
    spec = importlib.util.spec_from_file_location("bench_fused_vec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TWO_DIVISION_FORMS


OLD_FORMS = _two_division_forms()
PAIRS = ("sigmoid", "silu", "gelu_tanh", "gelu")
SOURCE = "\n".join([
    "#version 450",
    '#include "common.glsl"',
    '#include "activation.glsl"',
    "layout(local_size_x_id = 0) in;",
    "layout(std430, binding = 0) readonly buffer In { float x[]; };",
    "layout(std430, binding = 1) writeonly buffer Out { float r[]; };",
    "layout(push_constant) uniform P { uint n; } pc;",
    OLD_FORMS,
    "void main() {",
    "    for (uint i = VKUMD_FIRST_INDEX; i < pc.n; i += VKUMD_THREAD_COUNT) {",
    "        float v = x[i];",
    *[f"        r[{2 * len(PAIRS)}u * i + {2 * k}u] = old_{name}(v);\n"
      f"        r[{2 * len(PAIRS)}u * i + {2 * k + 1}u] = vkumd_{name}(v);"
      for k, name in enumerate(PAIRS)],
    "    }",
    "}",
    "",
])
PUSH = PushLayout("n:u32")
KERNEL = Kernel(name="test_activation_bits", source="test_activation_bits.comp", buffers=2,
                push=PUSH, spec_constants={WORKGROUP: 0}, source_code=SOURCE)


def values() -> np.ndarray:
    """Specials, the tails, the subnormals, the region near 0 and a broad random spread."""
    rng = np.random.default_rng()
    tiny = np.float32(np.finfo(np.float32).tiny)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, tiny, -tiny, tiny / 8, -tiny / 8,
               np.finfo(np.float32).max, -np.finfo(np.float32).max, 1e-30, -1e-30]
    steps = np.arange(-200, 201, dtype=np.float32) * np.float32(0.5)
    return np.concatenate([
        np.array(special, np.float32), steps,
        rng.standard_normal(20000) * 4, rng.uniform(-100, 100, 20000),
        rng.uniform(-1e-6, 1e-6, 2000), rng.uniform(-1e-40, 1e-40, 500),
        np.exp(rng.uniform(-80, 80, 4000)) * rng.choice([-1, 1], 4000),
    ]).astype(np.float32)


def test_one_division_forms_match_the_two_division_forms_bit_for_bit(ctx) -> None:
    x = values()
    result = poisoned(ctx, 2 * len(PAIRS) * x.size)
    plan = FixedLaunch(KERNEL.specialize({WORKGROUP: 64}), PUSH.pack(x.size), (16, 1, 1), (1,))
    ctx.run(plan, (ctx.tensor(x), result))
    got = result.numpy().reshape(x.size, len(PAIRS), 2)
    for k, name in enumerate(PAIRS):
        old, new = got[:, k, 0], got[:, k, 1]
        same = (old.view(np.uint32) == new.view(np.uint32)) | (np.isnan(old) & np.isnan(new))
        bad = np.flatnonzero(~same)
        assert bad.size == 0, (f"{name}({x[bad[0]]!r}): old form {old[bad[0]]!r}, new "
                               f"{new[bad[0]]!r} ({bad.size} of {x.size} differ)")
    # The comparison can fail: the values really went through both forms.
    assert np.isfinite(got[:, 0, 1]).sum() > x.size - 10
    assert got[np.flatnonzero(x == np.inf)[0], 0, 1] == 1.0

"""The quantized prefill path on the cooperative-matrix lane: its float16 GEMM takes the
coopmat variant where the device lists one, and the result still matches dequantise-then-
float64. Marked ``coopmat``: it runs on that lane (``make test-coopmat``) and skips elsewhere."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import require_coopmat
from test_qmatmul import poisoned, random_blocks, reference, stored_x
from transformer_checks import assert_close

from vkumd import ops
from vkumd.compiler.kernels.limits import QTYPES
from vkumd.compiler.kernels.qmatmul_plan import QMatmulProblem, qmatmul_plan


@pytest.mark.coopmat
@pytest.mark.parametrize("qtype", list(QTYPES))
def test_prefill_gemm_runs_on_cooperative_matrices(ctx, monkeypatch: pytest.MonkeyPatch,
                                                   qtype: str) -> None:
    require_coopmat(ctx)
    # lavapipe is a CPU driver, where the GEMM's default is its lanes path; the switch makes
    # this lane plan as a GPU listing the same shapes does.
    monkeypatch.setattr(sys.modules["vkumd.compiler.kernels.gemm_choice"], "COOPMAT_ON_CPU", True)
    rng = np.random.default_rng()
    m, n, k = 45, 37, 160 + 32 * QTYPES[qtype][1] % 3  # odd M and N; K a few blocks
    plan = qmatmul_plan(ctx.caps, QMatmulProblem(qtype, "float16", m, n, k), force="gemm")
    assert plan.gemm.choice.name == "coopmat", plan.gemm.choice.name
    w = random_blocks(rng, n, k, qtype)
    x = stored_x(rng, (m, k), "float16")
    out = poisoned(ctx, (m, n), "float16")
    got = ops.qmatmul(ctx.tensor(x), ctx.tensor(w), qtype=qtype, in_features=k, out=out,
                      path="gemm")
    assert_close(got.numpy().astype(np.float64), reference(x, w, qtype, k), "float16",
                 f"coopmat {qtype} {m}x{n}x{k}")

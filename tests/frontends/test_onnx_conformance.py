"""ONNX's own node test cases that vkumd imports (every operator of the case converted), run on
the device in one process.

Every such case passes or is skipped with a stated reason (an element type vkumd does not
store, an attribute or pattern it refuses, an op with no device kernel); none may fail but
the ones in :data:`KNOWN_FAILURES`, each with why (the report counts them failed). The
counts are printed (``pytest -s`` shows them); the all-cases report, onnxruntime beside it, is
``python -m vkumd.framework.frontends.onnx.conformance`` (docs/frameworks.md).
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx", reason="the ONNX conformance run needs the onnx package")

from vkumd.framework.frontends.onnx import conformance  # noqa: E402
from vkumd.framework.frontends.onnx.conformance_report import text  # noqa: E402

# Cases that fail, each with the reason; the conformance report counts them as failed.
KNOWN_FAILURES = {
    # ONNX Attention's function body run op by op in float16: the scores are stored in
    # float16 between nodes, so 2 of 192 outputs land 2 float16 ulps from the file's (itself
    # 2 ulps from the float64 result, on the other side), past rtol 1e-3. The fused
    # attention kernel, which keeps the scores in float32, passes the unexpanded case;
    # attention_fusion does not yet match this expanded form.
    "test_attention_4d_causal_fp16_expanded":
        "float16 scores stored between nodes: 2 of 192 outputs 2 ulps off",
}


def test_onnx_node_conformance(ctx: object, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [c for c in conformance.collect() if not conformance.missing_operators(c.model)]
    report = conformance.run(ctx, cases, ort=False)
    summary = report.summary()
    with capsys.disabled():
        print("\n" + text(summary))
    failed = {o.name for o in report.by_status("failed")}
    assert failed <= set(KNOWN_FAILURES), text(summary)
    assert summary["vkumd"]["passed"] >= 300  # a regression in the importer shows up here first
    assert summary["vkumd"]["not imported"] == 0
    covered = {o.operator for o in report.by_status("passed")}
    assert {"MatMul", "Gemm", "Add", "Softmax", "Reshape", "Gather"} <= covered

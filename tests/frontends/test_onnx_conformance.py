"""ONNX's own node test cases that vkumd imports (every operator of the case converted), run on
the device in one process.

Every such case passes or is skipped with a stated reason (an element type vkumd does not
store, an attribute or pattern it refuses, an op with no device kernel); none may fail. The
counts are printed (``pytest -s`` shows them); the all-cases report, onnxruntime beside it, is
``python -m vkumd.framework.frontends.onnx.conformance`` (docs/frameworks.md).
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx", reason="the ONNX conformance run needs the onnx package")

from vkumd.framework.frontends.onnx import conformance  # noqa: E402
from vkumd.framework.frontends.onnx.conformance_report import text  # noqa: E402


def test_onnx_node_conformance(ctx: object, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [c for c in conformance.collect() if not conformance.missing_operators(c.model)]
    report = conformance.run(ctx, cases, ort=False)
    summary = report.summary()
    with capsys.disabled():
        print("\n" + text(summary))
    assert not summary["failed"], text(summary)
    assert summary["vkumd"]["passed"] >= 300  # a regression in the importer shows up here first
    assert summary["vkumd"]["not imported"] == 0
    covered = {o.operator for o in report.by_status("passed")}
    assert {"MatMul", "Gemm", "Add", "Softmax", "Reshape", "Gather"} <= covered

"""ONNX's own node test cases of the frontend's operators, run on the device in one process.

Every included case passes or is skipped with a stated reason (an element type vkumd does not
store, an attribute or pattern it refuses, an op with no device kernel); none may fail. The
counts are printed (``pytest -s`` shows them) and recorded in docs/frameworks.md.
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx", reason="the ONNX conformance run needs the onnx package")

from vkumd.framework.frontends.onnx import conformance  # noqa: E402


def test_onnx_node_conformance(ctx: object, capsys: pytest.CaptureFixture[str]) -> None:
    report = conformance.run(ctx)
    with capsys.disabled():
        print("\n" + report.table())
    assert not report.failed, report.table()
    assert len(report.passed) >= 200  # a regression in the importer shows up here first
    # Every case skipped for want of a kernel still had its import checked in the IR.
    no_kernel = [n for n, why in report.skipped.items() if why.startswith("no device kernel")]
    assert sorted(no_kernel) == sorted(report.ir_checked)
    covered = {name.split("_")[1] for name in report.passed}
    assert {"matmul", "gemm", "add", "softmax", "reshape", "gather"} <= covered

"""The conformance harness's counting, on a small fixed set of cases built here (seconds), and
docs/frameworks.md's table checked to be the generator's output.

The full run (every ONNX node case, about a minute) is ``python -m
vkumd.framework.frontends.onnx.conformance``; tests/frontends/test_onnx_conformance.py runs
the cases vkumd imports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX conformance harness needs the onnx package")

from onnx import TensorProto, helper  # noqa: E402
from onnx.backend.test.case.test_case import TestCase  # noqa: E402

from vkumd.errors import CapabilityMissing, VkumdValueError  # noqa: E402
from vkumd.framework.execute.lower import NoDeviceKernel  # noqa: E402
from vkumd.framework.frontends.onnx import conformance, conformance_ort  # noqa: E402
from vkumd.framework.frontends.onnx import conformance_report as report_mod  # noqa: E402
from vkumd.framework.frontends.onnx.errors import Refusal, UnsupportedModelError  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs"
HAS_ORT = conformance_ort.version() is not None


def _case(name: str, op: str, inputs: list[np.ndarray], expected: list[np.ndarray],
          elem: int = TensorProto.FLOAT, domain: str = "", nodes: int = 1) -> TestCase:
    names = [f"x{i}" for i in range(len(inputs))]
    chain = [helper.make_node(op, names, ["y0"], domain=domain)]
    for i in range(1, nodes):  # a multi-node case: Identity after the operator
        chain.append(helper.make_node("Identity", [f"y{i - 1}"], [f"y{i}"]))
    graph = helper.make_graph(
        chain, name,
        [helper.make_tensor_value_info(n, elem, list(a.shape)) for n, a in zip(names, inputs,
                                                                               strict=True)],
        [helper.make_tensor_value_info(f"y{nodes - 1}", elem, list(expected[0].shape))])
    opsets = [helper.make_operatorsetid("", 17)]
    if domain:
        opsets.append(helper.make_operatorsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    return TestCase(name=name, model_name=name, url=None, model_dir=None, model=model,
                    data_sets=[(inputs, expected)], kind="node", rtol=1e-3, atol=1e-7)


def _cases() -> dict[str, TestCase]:
    rng = np.random.default_rng(29)
    a, b = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    words = np.array(["a", "bc"], dtype=object)
    cases = [
        _case("test_add_ok", "Add", [a, b], [a + b]),
        _case("test_add_ok_expanded", "Add", [a, b], [a + b], nodes=2),
        _case("test_add_wrong", "Add", [a, b], [a + b + np.float32(1e-2)]),
        _case("test_identity", "Identity", [a], [a]),
        _case("test_frobnicate", "Frobnicate", [a], [a], domain="com.example"),
        _case("test_identity_string", "Identity", [words], [words], elem=TensorProto.STRING),
    ]
    return {c.name: c for c in cases}


def test_each_outcome_is_counted_with_its_reason(ctx: Any, tmp_path: Path) -> None:
    cases = _cases()
    report = conformance.run(ctx, list(cases.values()), ort=True,
                             journal=tmp_path / "journal.jsonl")
    got = {o.name: o for o in report.outcomes}
    assert [o.name for o in report.outcomes] == list(cases)

    assert got["test_add_ok"].status == "passed", got["test_add_ok"]
    assert got["test_add_ok"].reason == ""  # ran a kernel
    assert (got["test_identity"].status, got["test_identity"].reason) == (
        "passed", report_mod.NO_KERNEL)
    assert got["test_add_ok_expanded"].status == "passed"
    assert got["test_add_ok_expanded"].operator == "Add"  # counted for its base case's op

    wrong = got["test_add_wrong"]
    assert wrong.status == "failed" and "tolerance" in wrong.reason, wrong

    frob = got["test_frobnicate"]
    assert (frob.status, frob.missing) == ("not imported", ["com.example:Frobnicate"])
    assert "com.example:Frobnicate" in frob.reason

    text = got["test_identity_string"]
    assert (text.status, text.reason) == ("skipped", "element type not stored by vkumd: STRING")

    summary = report.summary()
    assert summary["total"] == 6
    assert summary["vkumd"] == {"passed": 3, "failed": 1, "skipped": 1, "not imported": 1}
    assert summary["passed without a kernel"] == 1
    assert summary["skipped"] == [["element type not stored by vkumd", 1, [("STRING", 1)]]]
    assert summary["missing"] == [["com.example:Frobnicate", 1, 1, 0]]
    assert summary["failed"] == [["test_add_wrong", wrong.reason]]
    if HAS_ORT:
        assert (got["test_add_ok"].ort, got["test_add_wrong"].ort) == ("passed", "failed")
        assert got["test_frobnicate"].ort == "error"
        assert summary["onnxruntime"]["passed"] == 4  # the two Adds and the Identities
        # Add: 3 cases, vkumd passes 2, onnxruntime 2, none that only onnxruntime passes.
        assert ["Add", 3, 2, 2, 0] in summary["operators"]
        # Identity: 2 cases, vkumd passes the float one, onnxruntime both: the to-do list's top.
        assert summary["operators"][0] == ["Identity", 2, 1, 2, 1]
    else:
        assert summary["onnxruntime"] is None  # not installed: no column, not zeros
    # The markdown renders every count it was given.
    block = report_mod.markdown(summary)
    assert "| com.example:Frobnicate | 1 | 1 | 0 |" in block
    assert "`test_add_wrong`" in block


def test_a_journal_resumes_a_stopped_run(ctx: Any, tmp_path: Path) -> None:
    cases = _cases()
    journal = tmp_path / "journal.jsonl"
    done = report_mod.Outcome("test_add_ok", "Add", "passed", reason="recorded earlier")
    lines = [{"started": "test_add_ok", "runner": "vkumd"}, done.to_json(),
             {"started": "test_add_wrong", "runner": "vkumd"}]
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    picked = [cases["test_add_ok"], cases["test_add_wrong"], cases["test_frobnicate"]]
    report = conformance.run(ctx, picked, ort=False, journal=journal)
    got = {o.name: o for o in report.outcomes}
    assert got["test_add_ok"].reason == "recorded earlier"  # taken from the journal, not rerun
    assert got["test_add_wrong"].status == "failed"
    assert "stopped" in got["test_add_wrong"].reason  # the case the process died in
    assert got["test_frobnicate"].status == "not imported"
    # What this run finished was appended, so a second resume reruns nothing.
    again = conformance.Journal(journal)
    assert set(again.done) == {"test_add_ok", "test_add_wrong", "test_frobnicate"}
    assert not again.stopped


@pytest.mark.parametrize(("exc", "want"), [
    (UnsupportedModelError([Refusal("n", "Cast", "DOUBLE tensors are not supported")]),
     "element type not stored by vkumd: DOUBLE"),
    (UnsupportedModelError([Refusal("n", "ArgMax", "attribute select_last_index=1 is not "
                                    "supported (3 nodes)")]),
     "refused by the importer: ArgMax: attribute select_last_index=N is not supported"),
    (NoDeviceKernel("add has no device kernel for int8 (use float32)"),
     "no device kernel (import checked in the IR): elementwise ops on int8"),
    (CapabilityMissing("the device lacks shaderFloat64; use another device"),
     "device capability missing: the device lacks shaderFloat64"),
])
def test_skip_reasons_are_grouped(exc: Exception, want: str) -> None:
    assert conformance.skip_reason(exc) == want


def test_docs_table_is_the_generators_output(tmp_path: Path) -> None:
    summary = json.loads((DOCS / "conformance.json").read_text())
    block = report_mod.docs_block(DOCS / "frameworks.md")
    assert block, f"docs/frameworks.md lacks the markers {report_mod.BEGIN!r}"
    assert block == report_mod.markdown(summary), (
        "docs/frameworks.md's conformance table is not the generator's output from "
        "docs/conformance.json; regenerate both with `python -m "
        "vkumd.framework.frontends.onnx.conformance --write-docs`")
    # Writing replaces only what lies between the markers.
    doc = tmp_path / "page.md"
    doc.write_text(f"before\n{report_mod.BEGIN}\nold\n{report_mod.END}\nafter\n")
    report_mod.write_docs(summary, doc, tmp_path / "data.json")
    assert doc.read_text() == f"before\n{block}\nafter\n"
    assert json.loads((tmp_path / "data.json").read_text()) == summary
    doc.write_text("no markers here\n")
    with pytest.raises(VkumdValueError, match="markers"):
        report_mod.write_docs(summary, doc, tmp_path / "data.json")


def test_a_journal_of_another_kind_is_refused_clearly(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    journal.write_text('{"started": "test_add", "runner": "vkumd"}\n{"name": "test_a\n')
    with pytest.raises(VkumdValueError, match=r"line 2: not a conformance journal entry"):
        conformance.Journal(journal)
    journal.write_text("[1, 2]\n")
    with pytest.raises(VkumdValueError, match="delete the file"):
        conformance.Journal(journal)


def test_the_command_line_refuses_a_filter_matching_no_case(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conformance, "collect", lambda contains=None: [])
    with pytest.raises(SystemExit) as stop:
        conformance.main(["-k", "test_no_such_case"])
    assert stop.value.code == 2
    assert "no ONNX node case's name contains 'test_no_such_case'" in capsys.readouterr().err


def test_an_expected_output_off_its_own_tolerance_is_a_skip_not_a_pass(ctx: Any) -> None:
    # The exact sum has zeros; a file holding float32 noise there (5 atol: as ONNX's DFT
    # inverse cases do) misses the tolerance that vkumd's exact result meets. Noise of 100
    # atol is past the tenfold margin: a failure, since the import itself could be wrong.
    a = np.array([[1.0, -2.0, 3.0]], np.float32)
    b = np.array([[-1.0, 2.0, 0.5]], np.float32)
    noisy = a + b
    noisy[0, 0] = 5e-7
    far = a + b
    far[0, 1] = 1e-5
    cases = [_case("test_add_noisy_file", "Add", [a, b], [noisy]),
             _case("test_add_far_file", "Add", [a, b], [far])]
    got = {o.name: o for o in conformance.run(ctx, cases, ort=False).outcomes}
    noisy_case = got["test_add_noisy_file"]
    assert noisy_case.status == "skipped", noisy_case
    assert noisy_case.reason.startswith("expected output off its own tolerance: ")
    assert got["test_add_far_file"].status == "failed"

"""ONNX's node test cases run against vkumd, counted as pass, skip (with reason) or fail.

``python -m vkumd.framework.frontends.onnx.conformance`` prints the table that
``docs/frameworks.md`` records. A case is included when every operator of its model is one the
importer converts; a skip is a refusal with a stated reason (a dtype vkumd does not store, an
attribute or pattern it refuses, an op with no device kernel); anything else that goes wrong,
and every result outside the case's own tolerance, is a failure.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from vkumd.framework.execute.lower import NoDeviceKernel
from vkumd.framework.frontends.onnx.backend import VkumdBackend
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError
from vkumd.framework.frontends.onnx.state import CONVERTERS

# The operators the frontend is asked to cover (docs/frameworks.md's table).
OPERATORS = (
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Exp",
    "Erf", "Tanh", "Relu", "Sigmoid", "Gelu", "Softmax", "LayerNormalization", "ReduceMean",
    "ReduceSum", "ReduceMax", "Cast", "Gather", "Reshape", "Transpose", "Unsqueeze", "Squeeze",
    "Flatten", "Concat", "Split", "Slice", "Shape", "ConstantOfShape", "Expand", "Where",
    "Equal", "Constant", "Identity", "And", "Or", "Xor", "Not", "IsNaN", "Max", "Min",
    "GatherND", "LpNormalization", "HardSwish", "ArgMax", "Conv", "MaxPool",
    "AveragePool", "GlobalAveragePool", "BatchNormalization", "Clip", "HardSigmoid",
    "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish",
    "ThresholdedRelu", "Abs", "Ceil", "Floor", "Round", "Sign", "Log", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "IsInf")


@dataclass
class Report:
    """Counts of one conformance run.

    Attributes:
        passed: names of the cases that matched.
        skipped: case name -> reason.
        failed: case name -> what went wrong.
    """

    passed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    operator: dict[str, str] = field(default_factory=dict)
    ir_checked: list[str] = field(default_factory=list)

    def by_operator(self) -> dict[str, tuple[int, int, int]]:
        """``(passed, skipped, failed)`` per operator (a multi-node case counts as
        ``expanded``)."""
        counts: dict[str, list[int]] = {}
        for names, slot in ((self.passed, 0), (self.skipped, 1), (self.failed, 2)):
            for name in names:
                counts.setdefault(self.operator.get(name, "?"), [0, 0, 0])[slot] += 1
        return {op: (c[0], c[1], c[2]) for op, c in sorted(counts.items())}

    def reasons(self) -> Counter[str]:
        """How many cases were skipped for each reason."""
        return Counter(self.skipped.values())

    def table(self) -> str:
        """The counts and the skip reasons, as text."""
        lines = [f"ONNX node tests: {len(self.passed)} passed, {len(self.skipped)} skipped, "
                 f"{len(self.failed)} failed; of the skipped, {len(self.ir_checked)} without a "
                 "device kernel matched in the IR's float64 evaluator"]
        reasons = self.reasons()
        types = {w: n for w, n in reasons.items() if w.startswith("dtype ")}
        if types:
            listed = ", ".join(f"{w.split()[1]} {n}" for w, n in sorted(types.items()))
            lines.append(f"  skip x{sum(types.values())}: element type not stored by vkumd "
                         f"({listed})")
        lines += [f"  skip x{n}: {why}" for why, n in reasons.most_common() if why not in types]
        lines += [f"  FAIL {name}: {why}" for name, why in sorted(self.failed.items())]
        lines.append("per operator (passed/skipped/failed):")
        lines += [f"  {op}: {p}/{s}/{f}" for op, (p, s, f) in self.by_operator().items()]
        return "\n".join(lines)


def _category(exc: Exception) -> str:
    """A short, grouped reason for a skip (numbers and names stripped)."""
    if isinstance(exc, NoDeviceKernel):
        text = str(exc).split(" (")[0]
        typed = re.match(r"\w+ has no device kernel for (\w+)", text)
        if typed:
            return f"no device kernel: elementwise ops on {typed.group(1)}"
        return f"no device kernel: {text}"
    assert isinstance(exc, UnsupportedModelError)
    refusal = exc.refusals[0]
    reason = refusal.reason
    match = re.match(r"(\w+) tensors are not supported", reason)
    if match:
        return f"dtype {match.group(1)} not stored by vkumd"
    if reason.startswith("attribute"):
        return f"{refusal.op_type}: {reason}"
    reason = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", reason)
    reason = re.sub(r"\[[^\]]*\]|\([^)]*\)", "", reason)
    return f"{refusal.op_type}: {reason.strip()}"


def select(cases: Iterable[Any], operators: Iterable[str] = OPERATORS) -> list[Any]:
    """The cases whose every node is an operator in ``operators`` (and converted)."""
    allowed = set(operators) & set(CONVERTERS)
    chosen = []
    for case in cases:
        if case.model is None or not case.data_sets:
            continue
        ops = {n.op_type for n in case.model.graph.node}
        if ops and ops <= allowed and any(op in OPERATORS for op in ops):
            chosen.append(case)
    return chosen


def _compare(name: str, want: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> None:
    want = np.asarray(want)
    if got.dtype != want.dtype:
        raise AssertionError(f"dtype {got.dtype}, expected {want.dtype}")
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape}, expected {want.shape}")
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


def _array(x: Any) -> np.ndarray:
    # Cases of types numpy lacks (float16 bits, bfloat16) hold TensorProtos.
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


def run_case(case: Any, ctx: Any, report: Report) -> None:
    """Run one case (every data set) and record its outcome in ``report``.

    A case whose graph has an op without a device kernel is skipped, and its import is
    still checked through the IR's float64 evaluator (a mismatch there is a failure).
    """
    rep = None
    try:
        rep = VkumdBackend.prepare(case.model, ctx=ctx)
        for inputs, expected in case.data_sets:
            outputs = rep.run([_array(x) for x in inputs])
            for want, got in zip(expected, outputs, strict=True):
                _compare(case.name, _array(want), got, case.rtol, case.atol)
    except (UnsupportedModelError, NoDeviceKernel) as exc:
        report.skipped[case.name] = _category(exc)
        if isinstance(exc, NoDeviceKernel) and rep is not None:
            _check_in_ir(case, rep, report)
        return
    except Exception as exc:  # anything else is a failure, with its message
        report.failed[case.name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return
    report.passed.append(case.name)


def _check_in_ir(case: Any, rep: Any, report: Report) -> None:
    try:
        for inputs, expected in case.data_sets:
            feed = dict(zip(rep.model.input_names, [_array(x) for x in inputs], strict=False))
            got = rep.model.evaluate(**feed)
            for want, name in zip(expected, rep.model.output_names, strict=True):
                _compare(case.name, _array(want), got[name], case.rtol, case.atol)
    except Exception as exc:  # the import is wrong, though the device could not run it
        report.failed[case.name] = f"in the IR evaluator: {type(exc).__name__}: {exc}"[:300]
        return
    report.ir_checked.append(case.name)


def run(ctx: Any = None, operators: Iterable[str] = OPERATORS) -> Report:
    """Collect ONNX's node cases, select those of ``operators`` and run them on ``ctx``.

    Returns:
        The :class:`Report`.
    """
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = select(collect_testcases(None), operators)
    report = Report()
    for case in cases:
        nodes = case.model.graph.node
        report.operator[case.name] = nodes[0].op_type if len(nodes) == 1 else "expanded"
        run_case(case, ctx, report)
    return report


if __name__ == "__main__":
    result = run()
    print(result.table())
    sys.exit(1 if result.failed else 0)

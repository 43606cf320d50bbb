"""onnxruntime on ONNX's node test cases: the peer the conformance report counts beside vkumd.

A plain harness, as a user would write it: an ``InferenceSession`` on the CPU execution
provider, the case's inputs fed by the session's input names, the results compared by ONNX's
own runner check (:meth:`onnx.backend.test.runner.Runner.assert_similar_outputs`) at the
case's tolerance. No operator, case or tolerance is special-cased.
"""

from __future__ import annotations

from typing import Any

from onnx.backend.test.runner import Runner

from vkumd.framework.frontends.onnx.conformance_report import ORT_STATUSES


def version() -> str | None:
    """onnxruntime's version, or None when it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return str(onnxruntime.__version__)


def run_case(case: Any, normalize: Any) -> tuple[str, str]:
    """Run one case on onnxruntime.

    Args:
        case: an ONNX ``TestCase`` (``model``, ``data_sets``, ``rtol``, ``atol``).
        normalize: turns a case's stored value (a ``TensorProto``, an array, a list) into
            what a runtime is fed and compared with.

    Returns:
        ``(status, reason)``: status one of :data:`ORT_STATUSES` (``error`` when the session
        cannot be built or run: an operator or type onnxruntime does not implement).
    """
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # a refusal's log line would repeat its message
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4  # its refusals are counted here, not logged
        session = ort.InferenceSession(case.model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for inputs, expected in case.data_sets:
            feed = {n: normalize(x) for n, x in zip(names, inputs, strict=False)}
            got = session.run(None, feed)
            try:
                Runner.assert_similar_outputs([normalize(x) for x in expected], got,
                                              rtol=case.rtol, atol=case.atol)
            except AssertionError as exc:
                return ORT_STATUSES[1], _short(exc)
    except Exception as exc:  # noqa: BLE001 -- any refusal is one count, with its message
        return ORT_STATUSES[2], f"{type(exc).__name__}: {_short(exc)}"
    return ORT_STATUSES[0], ""


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:240]

"""One loaded ONNX model called from several threads at once: the graph is recorded once, and
every caller gets the result of its own inputs (the executor's thread model does the rest)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_models import device_model  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.frontends.onnx import run as onnx_run  # noqa: E402
from vkumd.testing.numerics import rel_error  # noqa: E402

THREADS = 6
CALLS = 4


def test_first_calls_from_many_threads_record_once_and_answer_each_caller(ctx, monkeypatch
                                                                          ) -> None:
    made = []
    real = onnx_run.CompiledGraph

    def counted(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnx_run, "CompiledGraph", counted)
    model = device_model()
    reference = ReferenceEvaluator(model)
    loaded = vkumd.onnx.load(model, ctx=ctx)
    start = threading.Barrier(THREADS)
    errors: list[str] = []

    def caller(seed: int) -> None:
        rng = np.random.default_rng(seed)
        start.wait()
        for _ in range(CALLS):
            feeds = {"x": rng.standard_normal((2, 3, 8)).astype(np.float32),
                     "ids": rng.integers(0, 16, (2, 3)).astype(np.int64)}
            got = loaded(**feeds)
            want = reference.run(None, feeds)
            for name, w in zip(loaded.output_names, want, strict=True):
                if w.dtype.kind == "f":
                    error = rel_error(got[name], w.astype(np.float64))
                    if not error < 1e-4:
                        errors.append(f"thread {seed}: {name} relative error {error:.3g}")
                elif not np.array_equal(got[name], w):
                    errors.append(f"thread {seed}: {name} differs")

    threads = [threading.Thread(target=caller, args=(seed,)) for seed in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a call did not return"
    assert not errors, errors[:5]
    assert len(made) == 1

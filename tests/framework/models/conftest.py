"""Fixtures for the model tests: the installed all-MiniLM-L6-v2 files, the float64 reference
and encoders on the suite's context. Tests that need the model package skip without it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .model_checks import MISSING, WEIGHTS, model_installed


@pytest.fixture(scope="session")
def model_dir() -> Path:
    if not model_installed():
        pytest.skip(MISSING)
    from vkumd.models import find_model

    return find_model("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def reference(model_dir: Path):
    from .reference import ReferenceEncoder

    return ReferenceEncoder(model_dir)


@pytest.fixture(scope="session")
def encoder(ctx, model_dir: Path) -> Iterator[object]:
    from vkumd.models import SentenceEncoder

    enc = SentenceEncoder.from_pretrained(model_dir, ctx=ctx)
    yield enc
    enc.close()


@pytest.fixture(scope="session")
def encoder16(ctx, model_dir: Path) -> Iterator[object]:
    from vkumd.models import SentenceEncoder

    enc = SentenceEncoder.from_pretrained(model_dir, ctx=ctx, dtype="float16")
    yield enc
    enc.close()


@pytest.fixture
def copy(model_dir: Path, tmp_path: Path) -> Path:
    """The model's small files copied to tmp_path; the weights linked (tests that break
    them replace the link with a patched copy)."""
    root = tmp_path / "model"
    shutil.copytree(model_dir, root, ignore=shutil.ignore_patterns(WEIGHTS, "*.md"))
    (root / WEIGHTS).symlink_to(model_dir / WEIGHTS)
    return root

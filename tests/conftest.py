"""Test-suite wiring: validation (with synchronization checks) on for every context, and any
validation error fails the test.

Lanes: the main lane runs everything on the system lavapipe; tests that need cooperative
matrices are marked ``coopmat`` and skip there with the reason. ``ci/coopmat-lane.sh`` runs
``-m coopmat`` with ``VKUMD_REQUIRE_COOPMAT=1``, where a missing capability is a failure.

Tiers: the markers ``fast``, ``smoke``, ``transfers`` and ``hardened`` come from the tables in
``tests/tiers.py`` (docs/lanes.md, "Tiers"); ``--fuzz-scale=N`` runs N times each
property-based test's examples.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("VKUMD_VALIDATION", "1")
# The layer's synchronization checks too: a barrier the recorder should have inserted and
# did not is an error, so every test also checks hazard tracking.
os.environ.setdefault("VKUMD_SYNC_VALIDATION", "1")

import tiers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

from vkumd import settings  # noqa: E402
from vkumd.vk.instance import (  # noqa: E402
    ValidationMessage,
    add_validation_listener,
    remove_validation_listener,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz-scale", type=int, default=1, metavar="N",
                     help="run N times each property-based (hypothesis) test's examples "
                          "(make test-hardened)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "expect_validation_error: the test provokes one on "
                            "purpose; the fixture checks that it arrived instead of failing")
    for name, meaning in tiers.MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave the torch lane's modules uncollected when ``-m`` excludes torch: collecting them
    imports torch, which then slows every gc.collect() of the run (tests/tiers.py, TORCH)."""
    if "not torch" not in (config.getoption("markexpr") or ""):
        return None
    try:
        relative = collection_path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return True if relative in tiers.TORCH else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tiers (tests/tiers.py) before ``-m`` selects, and scale the
    property-based tests' examples by ``--fuzz-scale``."""
    scale = config.getoption("--fuzz-scale")
    scaled: set[int] = set()
    for item in items:
        for name in tiers.markers_for(item.nodeid):
            item.add_marker(name)
        if scale > 1:
            _scale_examples(item, scale, scaled)


def _scale_examples(item: pytest.Item, scale: int, done: set[int]) -> None:
    # Hypothesis reads a test's settings from these attributes when the test runs; the
    # decorator's own max_examples would override a settings profile, so scale them here.
    from hypothesis import settings as hypothesis_settings

    holders = [getattr(item, "obj", None), getattr(item, "cls", None)]
    for holder in holders:
        for attribute in ("_hypothesis_internal_use_settings", "settings"):
            current = getattr(holder, attribute, None)
            if isinstance(current, hypothesis_settings) and id(holder) not in done:
                done.add(id(holder))
                setattr(holder, attribute, hypothesis_settings(
                    current, max_examples=current.max_examples * scale))


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the suite's SPIR-V and pipeline caches out of the user's home."""
    if "VKUMD_CACHE_DIR" not in os.environ:
        os.environ["VKUMD_CACHE_DIR"] = str(tmp_path_factory.mktemp("vkumd-cache"))
    yield


@pytest.fixture(autouse=True)
def validation_errors(request: pytest.FixtureRequest) -> Iterator[list[ValidationMessage]]:
    """Collect error-severity validation messages raised while the test runs; fail on any."""
    errors: list[ValidationMessage] = []

    def listen(message: ValidationMessage) -> None:
        if message.severity == "error":
            errors.append(message)

    add_validation_listener(listen)
    try:
        yield errors
    finally:
        remove_validation_listener(listen)
    if request.node.get_closest_marker("expect_validation_error"):
        assert errors, "the test expected a validation error, and none arrived"
    elif errors:
        text = "\n".join(f"[{m.message_id}] {m.text}" for m in errors)
        pytest.fail(f"validation layer reported {len(errors)} error(s):\n{text}")


@pytest.fixture(scope="session")
def ctx() -> Iterator[object]:
    """One context for the tests that only need a working device."""
    import vkumd

    context = vkumd.Context()
    yield context
    context.close()


def require_coopmat(context: object) -> None:
    """Skip (main lane) or fail (cooperative-matrix lane) when the device lacks coopmat."""
    caps = context.caps  # type: ignore[attr-defined]
    if caps.cooperative_matrix:
        return
    reason = f"{caps.name} ({caps.driver_info}) has no VK_KHR_cooperative_matrix"
    if settings.flag("VKUMD_REQUIRE_COOPMAT"):
        pytest.fail(f"the cooperative-matrix lane needs it: {reason}")
    pytest.skip(reason)

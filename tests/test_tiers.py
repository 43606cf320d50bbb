"""Every entry of the tier tables (tests/tiers.py) names a test that exists, so a renamed test
cannot silently leave its tier (and the device-only lane) without anyone noticing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tiers

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = sorted({entry for table in tiers.TIERS.values() for entry in table})


def _defined(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every function and class at the module's top level
    and in its classes."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return names


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_entry_names_a_test(entry: str) -> None:
    module, _, name = entry.partition("::")
    path = ROOT / module
    assert path.is_file(), f"{entry}: no such test module"
    assert not name or name in _defined(path), f"{entry}: no such test in {module}"


def test_markers_follow_module_class_and_function() -> None:
    assert tiers.markers_for("tests/test_soak_short.py::test_x[1]") == ["hardened"]
    assert "smoke" in tiers.markers_for(
        "tests/framework/test_matmul.py::test_matches_float64_reference[7x13x29]")
    assert tiers.markers_for("tests/framework/test_matmul.py::test_batched[1]") == []
    assert tiers.markers_for(
        "tests/runtime/test_suballoc.py::TestRangeAllocatorMachine::runTest") == ["hardened"]

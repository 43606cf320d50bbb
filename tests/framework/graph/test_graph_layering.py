"""The graph package stays device-free: it imports only the standard library, numpy,
vkumd.errors, vkumd.framework.dtypes and itself (the layering rule of its issue)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import vkumd.framework.graph as graph

ALLOWED = ("vkumd.errors", "vkumd.settings", "vkumd.framework.dtypes", "vkumd.framework.graph",
           "numpy")
PACKAGE = Path(graph.__file__).parent


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "vkumd.framework":
                names.update(f"vkumd.framework.{alias.name}" for alias in node.names)
            else:
                names.add(node.module)
    return names


def test_imports_point_only_down_to_allowed_modules() -> None:
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) > 10
    for path in files:
        for name in imported_modules(path):
            root = name.split(".")[0]
            if root in sys.stdlib_module_names or root == "__future__":
                continue
            assert name.startswith(ALLOWED), f"{path.name} imports {name}"


def test_every_module_is_small() -> None:
    for path in PACKAGE.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 450, path.name

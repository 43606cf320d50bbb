"""The graph package stays device-free: it imports only the standard library, numpy,
vkumd.errors, vkumd.settings, vkumd.framework.dtypes, the kernels' limits declaration
(vkumd.compiler.kernels.limits, itself standard library only) and itself (the layering rule
of its issue)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import vkumd.compiler.kernels.limits as limits
import vkumd.framework.graph as graph

# Modules (and packages, with every module under them) the graph may import.
ALLOWED = ("vkumd.errors", "vkumd.settings", "vkumd.framework.dtypes", "vkumd.framework.graph",
           "vkumd.compiler.kernels.limits", "numpy")
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


def allowed(name: str) -> bool:
    """Whether a graph module may import ``name``."""
    root = name.split(".")[0]
    if root in sys.stdlib_module_names or root == "__future__":
        return True
    return any(name == a or name.startswith(a + ".") for a in ALLOWED)


def test_imports_point_only_down_to_allowed_modules() -> None:
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) > 10
    for path in files:
        for name in imported_modules(path):
            assert allowed(name), f"{path.name} imports {name}"


def test_the_limits_declaration_imports_only_the_standard_library() -> None:
    """The one compiler module the graph reads stays plain declarations: were it to import
    vkumd (the kernels' registry, the device's capabilities), the graph would too."""
    names = imported_modules(Path(limits.__file__))
    assert names, "limits.py imports nothing? (from __future__ at least)"
    for name in names:
        root = name.split(".")[0]
        assert root in sys.stdlib_module_names or root == "__future__", name


def test_the_check_refuses_other_compiler_modules() -> None:
    """The allowance is that one module: its siblings, and names it prefixes, stay refused."""
    assert allowed("vkumd.compiler.kernels.limits")
    assert allowed("vkumd.framework.graph.ir")
    for name in ("vkumd.compiler.kernels.attention", "vkumd.compiler.kernels.limits_extra",
                 "vkumd.compiler.kernels", "vkumd.framework.graphics", "vkumd.runtime"):
        assert not allowed(name), name


def test_every_module_is_small() -> None:
    for path in PACKAGE.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 450, path.name

"""The package's floors stay in order: every import in ``vkumd/`` points down a layer.

Layers, lowest first (DESIGN.md, "Layers"):

- base: ``vkumd/errors.py``, ``vkumd/settings.py``, ``vkumd/timing.py`` -- no vkumd imports
  but each other;
- vk: ``vkumd/vk/`` -- the binding, capabilities, Vulkan errors;
- submission and compiler, side by side: ``vkumd/submission/`` (command buffers, hazards,
  timelines) and ``vkumd/compiler/`` (glslang, caches, registry, kernels and their planners);
  neither imports the other;
- runtime: ``vkumd/runtime/`` -- contexts, memory, streams, capture;
- framework: ``vkumd/framework/`` -- tensors, ops, graphs, models; it reaches the driver only
  through the runtime, so it imports neither ``vkumd.submission`` nor cffi (directly or through
  ``vkumd.vk.binding``);
- top: the package root, ``vkumd.ops``, the CLI, the demo, ``vkumd.testing``.

Every ``import`` counts, including those inside functions and under ``TYPE_CHECKING``: a name
a module cannot import at run time is still a dependency a reader has to follow upward.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vkumd"
RANKS = {"base": 0, "vk": 1, "submission": 2, "compiler": 2, "runtime": 3, "framework": 4,
         "top": 5}
BASE_MODULES = {"vkumd.errors", "vkumd.settings", "vkumd.timing"}
# Modules allowed past MAX_LINES, with the reason, and the most lines each may grow to.
LONG_MODULES: dict[str, tuple[int, str]] = {
    "vkumd.runtime.stream": (480, "recording, submission, waits and release all run under the "
                             "one stream lock; split across modules, what holds the lock "
                             "when would no longer be readable in one place"),
}
MAX_LINES = 450


def layer_of(module: str) -> str:
    """The layer a ``vkumd`` module name belongs to."""
    if module in BASE_MODULES:
        return "base"
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ("vk", "submission", "compiler", "runtime", "framework"):
        return parts[1]
    return "top"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module_name(path).split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                base = ".".join(package[:len(package) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module == "vkumd":
                # `from vkumd import settings` imports vkumd.settings (and the package root,
                # which the interpreter has loaded already by then).
                found += [(node.lineno, f"vkumd.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, module))
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_is_found() -> None:
    assert len(SOURCES) > 40, f"only {len(SOURCES)} modules under {PACKAGE}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    name = module_name(path)
    layer = layer_of(name)
    problems = []
    for line, module in imports_of(path):
        if module == "vkumd" and layer != "top":
            problems.append(f"line {line}: `import vkumd` pulls in the whole package (top)")
            continue
        if layer == "framework" and (module == "cffi" or module.startswith("cffi.")
                                     or module == "vkumd.vk.binding"):
            problems.append(f"line {line}: the framework reaches cffi ({module}); go through "
                            "the runtime (e.g. Allocation.host_view())")
        if not module.startswith("vkumd."):
            continue
        target = layer_of(module)
        if layer == "framework" and target == "submission":
            problems.append(f"line {line}: the framework imports {module}; submission is "
                            "the runtime's business")
        elif {layer, target} == {"submission", "compiler"}:
            problems.append(f"line {line}: {layer} imports {module}; compiler and submission "
                            "sit side by side and never import each other")
        elif RANKS[target] > RANKS[layer]:
            problems.append(f"line {line}: {layer} imports {module} from the {target} layer "
                            "above it")
    assert not problems, f"{name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path: Path) -> None:
    name = module_name(path)
    lines = len(path.read_text().splitlines())
    most = LONG_MODULES[name][0] if name in LONG_MODULES else MAX_LINES
    assert lines <= most, (f"{name} has {lines} lines; split it (one job per module) or "
                           f"name it in LONG_MODULES with the reason")


def test_the_checker_catches_an_upward_import(tmp_path: Path) -> None:
    """The rule itself can fail: a runtime module importing the framework is caught."""
    runtime = PACKAGE / "runtime" / "_probe_for_test.py"
    assert layer_of("vkumd.runtime._probe_for_test") == "runtime"
    probe = tmp_path / "probe.py"
    probe.write_text("from vkumd.framework.tensor import Tensor\n")
    found = [module for _, module in imports_of(probe)]
    assert found == ["vkumd.framework.tensor"]
    assert RANKS[layer_of(found[0])] > RANKS[layer_of(module_name(runtime))]

"""A wheel built from the tree installs in a fresh virtual environment and finds its shaders."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, text=True)
    (built,) = out.glob("vkumd-*.whl")
    return built


def test_wheel_ships_the_shaders(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(n).name for n in names if n.startswith("vkumd/shaders/")}
    in_tree = {p.name for p in (ROOT / "shaders").glob("*.comp")}
    in_tree |= {p.name for p in (ROOT / "shaders" / "include").glob("*.glsl")}
    assert in_tree and in_tree <= shipped, f"missing from the wheel: {in_tree - shipped}"
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "vkumd").rglob("*.py")}
    assert modules <= set(names), f"modules missing from the wheel: {modules - set(names)}"


def test_wheel_installs_in_a_fresh_venv_and_compiles_a_kernel(wheel: Path, tmp_path: Path
                                                              ) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, text=True)
    # The dependencies come from this environment's site-packages, added as a plain path
    # (not a site dir), so the editable install of the tree is not visible in the new venv.
    deps = sysconfig.get_paths()["purelib"]
    site = next((env_dir / "lib").glob("python*/site-packages"))
    (site / "deps.pth").write_text(deps + "\n")
    probe = (
        "import vkumd, vkumd.compiler.shader_source as s, vkumd.compiler.kernels as k\n"
        "from vkumd.compiler.spirv_cache import SpirvCache\n"
        "kernel = k.ELEMENTWISE_BINARY\n"
        "spirv = SpirvCache(disk=False).get_or_compile(kernel.source_text(), name=kernel.source)\n"
        "print(vkumd.__file__); print(s.shaders_dir()); print(len(spirv))\n"
    )
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                            cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    module_file, shaders, size = result.stdout.split()
    assert Path(module_file).is_relative_to(env_dir), "vkumd came from the tree, not the wheel"
    assert Path(shaders).is_relative_to(env_dir), f"shaders found outside the wheel: {shaders}"
    assert int(size) > 0

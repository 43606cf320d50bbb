"""The Dockerfile stays in step with CI: it copies the repository, runs ci/setup.sh and then
``vkumd info`` and the demo, and every command and path it names exists here.

Docker is not available on the test machine, so this reads the file instead of building it.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined, comments
    and blank lines dropped."""
    found, pending = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        found.append((keyword, rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return found


def test_the_dockerfile_is_debian_12_and_calls_ci_setup() -> None:
    steps = instructions()
    known = {"FROM", "RUN", "COPY", "WORKDIR", "ENV", "CMD", "ARG", "LABEL"}
    assert all(keyword in known for keyword, _ in steps), steps
    assert steps[0] == ("FROM", "debian:bookworm")
    kinds = [keyword for keyword, _ in steps]
    runs = [args for keyword, args in steps if keyword == "RUN"]
    copy = kinds.index("COPY")
    setup = next(i for i, (k, a) in enumerate(steps) if k == "RUN" and "ci/setup.sh" in a)
    check = next(i for i, (k, a) in enumerate(steps)
                 if k == "RUN" and "vkumd info" in a and "python -m vkumd.demo" in a)
    assert copy < setup < check, "copy the tree, then ci/setup.sh, then info and the demo"
    assert steps[copy][1].split()[0] == ".", "COPY the whole repository"
    assert any("bash ci/setup.sh" in run for run in runs)


def test_what_the_dockerfile_names_exists() -> None:
    setup = ROOT / "ci" / "setup.sh"
    assert setup.is_file()
    env = dict(arg.split("=", 1) for keyword, args in instructions() if keyword == "ENV"
               for arg in shlex.split(args))
    workdir = next(args for keyword, args in instructions() if keyword == "WORKDIR")
    # The venv on PATH is the one ci/setup.sh makes by default: $here/.venv.
    assert env["PATH"].startswith(f"{workdir}/.venv/bin:")
    assert 'venv="${VKUMD_VENV:-$here/.venv}"' in setup.read_text()
    assert (ROOT / "vkumd" / "demo" / "__main__.py").is_file()
    # `vkumd info` is the console script of vkumd.cli:main (pyproject.toml); run it.
    assert 'vkumd = "vkumd.cli:main"' in (ROOT / "pyproject.toml").read_text()
    done = subprocess.run([sys.executable, "-m", "vkumd.cli", "info"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored, "the host's .venv must not be copied into the image"

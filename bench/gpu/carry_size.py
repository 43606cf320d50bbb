"""What the GPU run's device call would send, against its 64 MiB limit.

Usage: python bench/gpu/carry_size.py [--root .] [--limit-mib 64] .gl .whl

The call sends the working tree (tracked files and untracked files git does not ignore, and a
``shared/`` folder inside the checkout) plus the paths named in ``carry``, 64 MiB in all
(/work/.library/device/README.md). Prints each part and exits 1 when the sum is over the limit,
so prepare.sh fails here rather than the device call failing there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LIMIT_MIB = 64


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def travelling_bytes(root: Path, carry: list[str]) -> dict[str, int]:
    """Bytes per part: ``tree`` (what git would send), ``shared/``, and each carried path."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=root, capture_output=True, check=True)
    tree = 0
    for name in filter(None, listed.stdout.decode().split("\0")):
        path = root / name
        if path.is_file() or path.is_symlink():
            tree += path.lstat().st_size
    parts = {"tree": tree}
    if (root / "shared").is_dir():
        parts["shared/"] = _size(root / "shared")
    for name in carry:
        path = root / name
        parts[name] = _size(path) if path.exists() else 0
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd())
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    parser.add_argument("carry", nargs="*")
    args = parser.parse_args(argv)
    parts = travelling_bytes(args.root, args.carry)
    total = sum(parts.values())
    text = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in parts.items())
    verdict = "within" if total <= args.limit_mib * 2**20 else "OVER"
    print(f"carry: {text}; total {total / 2**20:.1f} MiB, {verdict} the "
          f"{args.limit_mib:g} MiB limit")
    return 0 if verdict == "within" else 1


if __name__ == "__main__":
    sys.exit(main())

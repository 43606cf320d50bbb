"""The README's environment table is the one list in ``vkumd.settings.VARIABLES``.

When this fails, the message holds the rows to paste into README.md's table.
"""

from __future__ import annotations

from pathlib import Path

from vkumd import settings

README = Path(__file__).resolve().parents[1] / "README.md"


def _row(name: str, meaning: str) -> str:
    return f"| `{name}` | {meaning} |"


def test_every_variable_is_in_the_readme_table() -> None:
    text = README.read_text()
    missing = [_row(name, meaning) for name, meaning in settings.VARIABLES.items()
               if _row(name, meaning) not in text]
    assert not missing, ("README.md's environment table lacks or words differently:\n"
                         + "\n".join(missing))


def test_every_documented_variable_is_read_somewhere() -> None:
    """A variable listed in the README but read nowhere in the package is a dead row."""
    package = README.parent / "vkumd"
    source = "\n".join(p.read_text() for p in package.rglob("*.py"))
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `VKUMD_")]
    documented = [line.split("`")[1] for line in rows]
    test_only = {"VKUMD_REQUIRE_COOPMAT", "VKUMD_LANE_DIR"}  # read by tests/ and ci/
    unread = [name for name in documented if name not in test_only and name not in source]
    assert not unread, f"documented but never read: {unread}"

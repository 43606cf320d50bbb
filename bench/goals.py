"""The goal table the benchmarks print: one row per measurement, with the goal it is held to
and whether this run met it, printed as each row comes (a long run shows its progress) and
kept for the summary at the end."""

from __future__ import annotations


class Table:
    """Rows of (what, measured, goal, verdict); ``widths`` are the first three columns'."""

    def __init__(self, widths: tuple[int, int, int] = (34, 58, 16)) -> None:
        self.rows: list[tuple[str, str, str, str]] = []
        self.widths = widths

    def add(self, what: str, measured: str, goal: str = "", met: bool | None = None) -> None:
        """Print and keep a row; ``met`` None for a row without a goal."""
        verdict = "" if met is None else ("pass" if met else "MISS")
        self.rows.append((what, measured, goal, verdict))
        a, b, c = self.widths
        print(f"{what:<{a}} {measured:<{b}} {goal:<{c}} {verdict}", flush=True)

"""Running a hostile input in a process of its own, bounded in time and memory.

A regression on a hostile file may hang (a FIFO opened for reading), allocate gigabytes
(a tiny file that expands) or kill the process (SIGBUS). Run in the pytest process, any of
them would take the whole run down; in a child with a timeout and an address-space limit it
is one failing test that says what happened.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Prints the child's peak RSS growth over what it had after its imports, for the assertions.
_EPILOGUE = """
import json as _json, resource as _resource
print("@@RESULT@@" + _json.dumps({"peak_rss_kib": _resource.getrusage(
    _resource.RUSAGE_SELF).ru_maxrss, "base_rss_kib": _BASE}))
"""


@dataclass
class Outcome:
    """What a child run did.

    Attributes:
        returncode: the child's exit status (negative: killed by that signal).
        stdout, stderr: its output (the result line removed).
        peak_rss_mib: its peak resident memory.
        growth_mib: peak RSS less the RSS it had once ``setup`` ran.
    """

    returncode: int
    stdout: str
    stderr: str
    peak_rss_mib: float
    growth_mib: float


def run_isolated(setup: str, body: str, *, timeout: float = 60,
                 address_space_gib: float = 8, env: dict[str, str] | None = None) -> Outcome:
    """Run ``setup`` then ``body`` in a fresh Python, killed past ``timeout`` seconds or
    ``address_space_gib`` of address space.

    Args:
        setup: imports and fixtures; the RSS baseline is taken after it.
        body: the code under test (it prints what the test checks).
        timeout: seconds before the child is killed (the test then fails, it does not hang).
        address_space_gib: ``RLIMIT_AS`` of the child: an allocation past it fails there.
        env: variables to set in the child (on top of this process's environment).

    Returns:
        The :class:`Outcome`; a timeout fails the calling test with the child's output.
    """
    code = (textwrap.dedent(setup) + "\nimport resource as _r\n"
            "_BASE = _r.getrusage(_r.RUSAGE_SELF).ru_maxrss\n" + textwrap.dedent(body)
            + _EPILOGUE)
    limit = int(address_space_gib * 2**30)

    def bound() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    child_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, preexec_fn=bound, env=child_env, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the child ran past {timeout} s (a hang); its output:\n"
                             f"{exc.stdout}\n{exc.stderr}") from None
    out, _, result = done.stdout.partition("@@RESULT@@")
    peak = base = 0.0
    if result:
        numbers = json.loads(result)
        peak, base = numbers["peak_rss_kib"] / 1024, numbers["base_rss_kib"] / 1024
    return Outcome(done.returncode, out, done.stderr, peak, peak - base)

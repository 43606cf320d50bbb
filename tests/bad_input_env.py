"""What the bad-input corpus's cases are made of: a :class:`Case` record and the :class:`Env`
each case's callable receives (the shared context, a second context, tensor helpers).

Kept apart from the cases so ``bad_input_cases.py`` and ``bad_input_ops.py`` read as tables.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import vkumd


@dataclass(frozen=True)
class Case:
    """One bad call: ``call(env)`` must raise ``error`` with ``fragment`` in its message."""

    id: str
    call: Callable[[Env], Any]
    error: type[BaseException]
    fragment: str


class Env:
    """What a case works with.

    Attributes:
        ctx: the suite's shared context; it must still work after every case.
        other: a second context, shared by the module, for mixed-context cases.
    """

    def __init__(self, ctx: Any, other: Any) -> None:
        self.ctx = ctx
        self.other = other

    def t(self, shape: Any = (2, 3), dtype: str = "float32", ctx: Any = None) -> Any:
        """A new tensor of ones (of ``ctx``, default the shared one)."""
        context = ctx if ctx is not None else self.ctx
        storage = "float32" if dtype == "bfloat16" or dtype.startswith("float8") else dtype
        if dtype in ("int4", "uint4", "int2", "uint2", "float4_e2m1"):  # no numpy type
            storage = "float32"
        return context.tensor(np.ones(shape, dtype=storage), dtype=dtype)

    def ints(self, values: Any) -> Any:
        """An int32 tensor of ``values``."""
        return self.ctx.tensor(np.asarray(values, dtype=np.int32))

    def released(self, shape: Any = (2, 3), dtype: str = "float32") -> Any:
        """A tensor that was released."""
        t = self.t(shape, dtype)
        t.release()
        return t

    def closed(self, shape: Any = (2, 3)) -> Any:
        """A tensor whose (throwaway) context was closed."""
        context = vkumd.Context()
        t = context.zeros(shape)
        context.close()
        return t

    def closed_context(self) -> Any:
        """A context that was closed."""
        context = vkumd.Context()
        context.close()
        return context

    def graph(self) -> Any:
        """A graph that captured one add."""
        a = self.t()
        with self.ctx.capture() as g:
            vkumd.ops.add(a, a)
        return g


def capture(env: Env, body: Callable[[], Any]) -> None:
    """Run ``body`` inside ``env.ctx.capture()``."""
    with env.ctx.capture():
        body()


def raise_in_child(code: str) -> None:
    """Run ``code`` in a fresh interpreter and re-raise the vkumd error it prints.

    For calls that could abort the process (a use-after-free in the driver): a crash there
    fails the case instead of killing the test run.

    Raises:
        The child's vkumd error, rebuilt by type name and message.
        AssertionError: the child crashed or raised nothing.
    """
    body = textwrap.indent(textwrap.dedent(code).strip(), "    ")
    program = (f"import numpy as np\nimport vkumd\ntry:\n{body}\n"
               "except vkumd.VkumdError as exc:\n"
               "    print('RAISED', type(exc).__name__, str(exc).replace(chr(10), ' '))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("RAISED "):
            _, name, message = line.split(" ", 2)
            raise getattr(vkumd, name)(message)
    raise AssertionError(f"the child raised no vkumd error (exit status {done.returncode}): "
                         f"{done.stderr[-2000:]}")

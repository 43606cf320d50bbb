"""One process of the quota test: a matmul checked against numpy, then, with ``overflow``,
an allocation past its ``VKUMD_MEMORY_LIMIT`` quota.

Usage: ``python quota_child.py SEED [overflow_bytes]``. Prints one JSON line; exits 3 when
the overflow raised ``OutOfDeviceMemory`` (as it should), 0 when all went well.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import vkumd
from vkumd.testing.numerics import rel_error


def main() -> int:
    """Run the check; see the module docstring."""
    seed = int(sys.argv[1])
    overflow = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((96, 80)).astype(np.float32)
    b = rng.standard_normal((80, 112)).astype(np.float32)
    with vkumd.Context() as ctx:
        got = vkumd.ops.matmul(ctx.tensor(a), ctx.tensor(b)).numpy().astype(np.float64)
        want = a.astype(np.float64) @ b
        error = rel_error(got, want)
        report: dict[str, object] = {"seed": seed, "rel_error": error,
                                     "limit": ctx.memory.get_limit()}
        if overflow:
            try:
                ctx.empty((overflow // 4,), "float32")
            except vkumd.OutOfDeviceMemory as exc:
                report.update(error=str(exc), requested=exc.requested, in_use=exc.in_use,
                              limit=exc.limit)
                print(json.dumps(report), flush=True)
                return 3
        print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

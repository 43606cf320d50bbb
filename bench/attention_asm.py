"""The instruction mix of the fused attention's hottest loop, from llvmpipe's assembly.

Usage: python bench/attention_asm.py [--seq 1024] [--heads 2] [--head-dim 64]
                                     [--dtype float32] [--path auto|tiled|lane_keys]
                                     [--save PATH] [--json PATH]

Runs one ``vkumd.ops.attention`` in a child process with llvmpipe printing the assembly of
every shader it compiles (``GALLIVM_DEBUG=asm``, every cache off) and reports the innermost
loop with the most float multiplies and adds, classified as ``bench/asm_mix.py`` does (its
docstring lists the classes). llvmpipe stops its listing of a shader at about 96 KiB of code
(the last line reads ``invalid``): a key loop placed past that is not seen, and the loop this
prints is then some other one (with no multiplies at all, as for the tiled kernel since it reads
64-bit words; its mix before that change is in docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import asm_mix

_CHILD = r"""
import numpy as np, sys, vkumd
from vkumd.framework.opset.attention import attention_path
seq, heads, dim = (int(x) for x in sys.argv[1:4])
dtype, path = sys.argv[4], sys.argv[5]
with vkumd.Context(validation=False) as ctx:
    q = ctx.tensor(np.ones((1, heads, seq, dim), np.float32), dtype=dtype)
    attention_path(path, q, q, q)
    ctx.synchronize()
"""


def capture(seq: int, heads: int, dim: int, dtype: str, path: str) -> str:
    """llvmpipe's assembly for the shaders one attention call compiles (its stderr)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GALLIVM_DEBUG="asm", MESA_SHADER_CACHE_DISABLE="true",
                   VKUMD_CACHE="0", VKUMD_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-c", _CHILD, str(seq), str(heads), str(dim),
                               dtype, path], env=env, capture_output=True, text=True,
                              check=False)
    if done.returncode != 0:
        sys.exit(f"the attention run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--path", default="auto")
    parser.add_argument("--save", help="write the whole assembly listing here")
    parser.add_argument("--json", help="write the mix as JSON here")
    args = parser.parse_args()
    text = capture(args.seq, args.heads, args.head_dim, args.dtype, args.path)
    if args.save:
        with open(args.save, "w") as f:
            f.write(text)
    body = asm_mix.hottest_loop(text)
    if not body:
        sys.exit("no loop found in the assembly: is GALLIVM_DEBUG=asm honoured by this Mesa?")
    result = asm_mix.mix(body)
    c = result["classes"]
    flops = c["fma"] * 2 + c["mul"] + c["add"]
    asm_mix.print_mix(f"hottest loop of attention seq {args.seq}, head_dim {args.head_dim}, "
                      f"{args.dtype}, path {args.path}: {result['instructions']} instructions, "
                      f"{flops} multiplies and adds", result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seq": args.seq, "head_dim": args.head_dim, "dtype": args.dtype,
                       "path": args.path, **result}, f, indent=2)


if __name__ == "__main__":
    main()

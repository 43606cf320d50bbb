"""The instruction mix of the GEMM's hottest loop, from llvmpipe's generated assembly.

Usage: python bench/asm_mix.py [--shape MxNxK] [--dtype float32|float16|bfloat16]
                               [--variant lanes|lanes_packed] [--save PATH] [--json PATH]

Runs one ``vkumd.ops.matmul`` in a child process with ``GALLIVM_DEBUG=asm`` (llvmpipe prints
the x86 assembly of every shader it compiles to stderr), ``MESA_SHADER_CACHE_DISABLE=true`` and
vkumd's own caches off (so the shaders are compiled, not fetched), then finds the hottest loop:
of the innermost loops (a backward branch and its target, with no other backward branch
between them) the one with the most float multiplies, adds and fmas -- the GEMM's K loop,
whatever else (the B-packing copy, the epilogue) was compiled in the same run. It prints the
loop's instruction mix by class. Classes, in order of matching (AT&T syntax: the destination
is the last operand):

- fma, mul, add: float vector or scalar fma / multiply / add or subtract;
- gather: ``vgather*`` / ``vpgather*``;
- broadcast: ``vbroadcast*`` / ``vpbroadcast*``, from memory or a register;
- shuffle: shuffles, permutes, unpacks, inserts, extracts, aligns;
- blend: ``vblend*`` / ``vpblend*``;
- convert: widenings, narrowings and float conversions (``vpmovzx``, ``vcvtph2ps``, ...);
- load: a move whose source is memory (``(%rsp)``/``(%rbp)`` ones are also counted as spill
  reloads); store: a move to memory (spills likewise);
- move: other moves (register to register);
- mask: compares, tests and mask-register instructions;
- int vector: other ``vp*`` integer vector arithmetic (address and index computation);
- scalar: everything else (scalar integer arithmetic, branches, ``lea``).
An arithmetic instruction that reads a memory operand counts in its class and also under
"folded loads".
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
_BRANCH = re.compile(r"^j[a-z]+$")
CLASSES = ("fma", "mul", "add", "gather", "broadcast", "shuffle", "blend", "convert", "load",
           "store", "move", "mask", "int vector", "scalar")
_RULES = (
    ("fma", re.compile(r"^vf(n?m(add|sub)|maddsub|msubadd)")),
    ("mul", re.compile(r"^v?mul(p|s)[sd]$")),
    ("add", re.compile(r"^v?(add|sub)(p|s)[sd]$")),
    ("gather", re.compile(r"^vp?gather")),
    ("broadcast", re.compile(r"^vp?broadcast")),
    ("shuffle", re.compile(r"^v(p?shuf|p?perm|p?unpck|insert|extract|pinsr|pextr|palignr|"
                           r"movs[lh]dup|movddup|movhl|movlh|movshdup|pcompress|pexpand|"
                           r"compress|expand)")),
    ("blend", re.compile(r"^vp?blend")),
    ("convert", re.compile(r"^v(pmov[zs]x|pmov[qdw][bdw]|pmovus|pmovs[qdw]|cvt)")),
    ("mask", re.compile(r"^(vp?cmp|vcmp|vptest|vtest|k[a-z]+$|vpmovm2|vpmov[bdqw]2m)")),
)
_CHILD = r"""
import numpy as np, sys, vkumd
from vkumd import ops
m, n, k = (int(x) for x in sys.argv[1].split("x"))
dtype, variant = sys.argv[2], sys.argv[3] or None
with vkumd.Context(validation=False) as ctx:
    a = ctx.tensor(np.ones((m, k), np.float32), dtype=dtype)
    b = ctx.tensor(np.ones((k, n), np.float32), dtype=dtype)
    ops.matmul(a, b, variant=variant)
    ctx.synchronize()
"""


def capture(shape: str, dtype: str, variant: str | None) -> str:
    """llvmpipe's assembly for the shaders one matmul compiles (its stderr)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GALLIVM_DEBUG="asm", MESA_SHADER_CACHE_DISABLE="true",
                   VKUMD_CACHE="0", VKUMD_CACHE_DIR=cache)
        done = subprocess.run([sys.executable, "-c", _CHILD, shape, dtype, variant or ""],
                              env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the matmul run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return done.stderr


def parse(text: str) -> list[list[tuple[int, str, str]]]:
    """Functions of the listing, each a list of (offset, mnemonic, operands)."""
    functions: list[list[tuple[int, str, str]]] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None:
            if line.strip().endswith(":") and not line.startswith(" "):
                functions.append([])
            continue
        if not functions:
            functions.append([])
        offset, mnemonic, operands = match.groups()
        functions[-1].append((int(offset, 16), mnemonic, operands.strip()))
    return [f for f in functions if f]


def classify(mnemonic: str, operands: str) -> str:
    """The class of one instruction (see the module docstring)."""
    for name, rule in _RULES:
        if rule.match(mnemonic):
            return name
    if mnemonic.startswith(("vmov", "mov")) or mnemonic in ("vlddqu",):
        parts = _operands(operands)
        if parts and "(" in parts[-1]:
            return "store"
        if any("(" in p for p in parts[:-1]):
            return "load"
        return "move"
    if mnemonic.startswith("vp") or mnemonic in ("vxorps", "vandps", "vorps", "vandnps"):
        return "int vector"
    return "scalar"


def _operands(text: str) -> list[str]:
    """Operands split on the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def loops(function: list[tuple[int, str, str]]) -> list[tuple[int, int]]:
    """Innermost loops as (first, last) instruction indices: backward branches whose range
    holds no other backward branch."""
    index = {off: i for i, (off, _, _) in enumerate(function)}
    found = []
    for i, (_, mnemonic, operands) in enumerate(function[:-1]):
        if not _BRANCH.match(mnemonic) or not re.fullmatch(r"-\d+", operands):
            continue
        target = function[i + 1][0] + int(operands)  # relative to the next instruction
        if target in index and index[target] <= i:
            found.append((index[target], i))
    return [(s, e) for s, e in found
            if not any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in found)]


def hottest_loop(text: str) -> list[tuple[int, str, str]]:
    """The innermost loop with the most float multiply/add/fma instructions."""
    best: list[tuple[int, str, str]] = []
    best_flops = -1
    for function in parse(text):
        for first, last in loops(function):
            body = function[first:last + 1]
            flops = sum(classify(m, o) in ("fma", "mul", "add") for _, m, o in body)
            if flops > best_flops:
                best, best_flops = body, flops
    return best


def mix(body: list[tuple[int, str, str]]) -> dict:
    """Counts per class, plus folded loads, spills and the most common mnemonics."""
    counts = collections.Counter(classify(m, o) for _, m, o in body)
    stack = ("%rsp)", "%rbp)")
    folded = sum(1 for _, m, o in body if classify(m, o) not in ("load", "store")
                 and any("(" in p for p in _operands(o)[:-1]))
    reloads = sum(1 for _, m, o in body if classify(m, o) == "load"
                  and any(p.endswith(stack) for p in _operands(o)[:-1]))
    spills = sum(1 for _, m, o in body if classify(m, o) == "store"
                 and _operands(o)[-1].endswith(stack))
    return {"instructions": len(body), "classes": {c: counts.get(c, 0) for c in CLASSES},
            "folded loads": folded, "spill reloads": reloads, "spill stores": spills,
            "mnemonics": collections.Counter(m for _, m, _ in body).most_common(12)}



def print_mix(title: str, result: dict) -> None:
    """Print :func:`mix`'s ``result`` under ``title``: each class's count and share, the
    folded loads and spills, and the most common mnemonics."""
    n = result["instructions"]
    print(title)
    for name in CLASSES:
        count = result["classes"][name]
        print(f"  {name:>12} {count:>5} {count / n:>6.1%}")
    for name in ("folded loads", "spill reloads", "spill stores"):
        print(f"  {name:>12} {result[name]:>5}")
    print("  most common: " + ", ".join(f"{m} {c}" for m, c in result["mnemonics"]))

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1024x1024x1024", help="M x N x K")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--variant", choices=["lanes", "lanes_packed"],
                        help="force a variant (default: the device's choice)")
    parser.add_argument("--save", help="write the whole assembly listing here")
    parser.add_argument("--json", help="write the mix as JSON here")
    args = parser.parse_args()
    text = capture(args.shape, args.dtype, args.variant)
    if args.save:
        with open(args.save, "w") as f:
            f.write(text)
    body = hottest_loop(text)
    if not body:
        sys.exit("no loop found in the assembly: is GALLIVM_DEBUG=asm honoured by this Mesa?")
    result = mix(body)
    print_mix(f"hottest loop of the {args.shape} {args.dtype} GEMM "
              f"({args.variant or 'default variant'}): {result['instructions']} instructions",
              result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "dtype": args.dtype, "variant": args.variant,
                       **result}, f, indent=2)


if __name__ == "__main__":
    main()

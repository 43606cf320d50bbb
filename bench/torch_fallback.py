"""How much of a ``torch.compile``d module vkumd runs, and what it leaves to torch.

Usage: python bench/torch_fallback.py [--json out.json]

Each module is compiled with ``torch.compile(backend="vkumd")`` and called once; the backend's
own check (``vkumd.framework.frontends.torch.support.refusals``, the one that decides the
partitioning) is observed on every aten graph it receives, and the table counts the aten
compute nodes, how many of them vkumd refused (those run in torch) and which ops. Every
module's output is compared with eager torch (relative error), so a module counted as running
on vkumd is also right.

Modules: the torch frontend tests' MLP, transformer block and BERT encoder (all-MiniLM-L6-v2's
weights from the installed package; tests/frontends/torch_models.py), a small CNN, and four
modules of the tensor API's reductions, row ops and index ops over non-last dims (issue 29).
Run it against another checkout (``PYTHONPATH=/that/checkout python bench/torch_fallback.py``)
for a before/after table; docs/frameworks_torch.md quotes both. Needs torch (the ``torch``
extra); the numbers are counts, not times, so a loaded machine does not change them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("VKUMD_VALIDATION", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def modules() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """name -> (module, example inputs)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from tests.frontends.torch_models import MLP, Block, minilm

    torch.manual_seed(0)

    class CNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.fc = nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.max_pool2d(F.relu(self.bn(self.c1(x))), 2)
            x = F.hardswish(self.c2(x))
            return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))

    class Stats(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x.var(dim=0) + x.std(dim=(0, 2), keepdim=True)[0] + x.amax(dim=0)
                    + torch.logsumexp(x, dim=0) + x.mean(dim=0) * x.prod(dim=0))

    class RowOps(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (F.log_softmax(x, dim=1) + x.softmax(dim=0) + x.cumsum(dim=1)
                    + torch.tril(x))

    class Ranking(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            values, _ = torch.topk(x, 3, dim=-1)
            return values.sum(-1), x.argmax(dim=0).to(torch.float32)

    class Indexing(nn.Module):
        def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            picked = torch.gather(x, 1, idx)
            return torch.zeros_like(x).scatter_add(1, idx, picked) + torch.triu(x)

    x2 = torch.randn(6, 9)
    return {
        "MLP": (MLP(), (torch.randn(5, 64),)),
        "transformer block": (Block(), (torch.randn(2, 7, 64),)),
        "MiniLM": (minilm(),
                                    (torch.randint(0, 30522, (2, 11)),
                                     torch.ones(2, 11, dtype=torch.int64))),
        "small CNN": (CNN().eval(), (torch.randn(2, 3, 17, 17),)),
        "reductions over dims": (Stats(), (torch.randn(5, 6, 7),)),
        "row ops over dims": (RowOps(), (x2,)),
        "top-k and argmax": (Ranking(), (x2,)),
        "gather, scatter_add, triu": (Indexing(), (x2, torch.randint(0, 9, (6, 4)))),
    }


def measure(name: str, module: Any, inputs: tuple[Any, ...]) -> dict[str, Any]:
    import importlib

    import torch

    # The module, not the package's ``backend`` function of the same name.
    backend = importlib.import_module("vkumd.framework.frontends.torch.backend")
    seen = {"nodes": 0, "refused": Counter()}
    original = backend.refusals

    def observed(gm: Any, kinds: dict[str, str]) -> dict[Any, str]:
        refused = original(gm, kinds)
        seen["nodes"] += sum(1 for n in gm.graph.nodes if n.op == "call_function")
        for node in refused:
            target = str(node.target)  # "aten.topk.default"
            seen["refused"][target.split(".")[1] if target.count(".") >= 2 else target] += 1
        return refused

    backend.refusals = observed
    row: dict[str, Any] = {"module": name}
    try:
        torch._dynamo.reset()
        compiled = torch.compile(module, backend="vkumd", dynamic=False)
        with warnings.catch_warnings(record=True), torch.no_grad():
            warnings.simplefilter("always")
            got, want = compiled(*inputs), module(*inputs)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        row["rel_err"] = max(float((g.double() - w.double()).norm()
                                   / max(float(w.double().norm()), 1e-30))
                             for g, w in zip(got, want, strict=True))
    except Exception as exc:  # a module that cannot compile is a row, not a crash
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    finally:
        backend.refusals = original
    row["aten_nodes"] = seen["nodes"]
    row["in_torch"] = sum(seen["refused"].values())
    row["ops_in_torch"] = dict(seen["refused"])
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import vkumd

    rows = [measure(name, module, inputs) for name, (module, inputs) in modules().items()]
    print(f"vkumd at {Path(vkumd.__file__).resolve().parents[1]}")
    print("| module | aten nodes | left to torch | ops left to torch | rel. error |")
    print("|---|---|---|---|---|")
    for r in rows:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(r["ops_in_torch"].items())) or "-"
        check = r.get("error") or f"{r['rel_err']:.1e}"
        print(f"| {r['module']} | {r['aten_nodes']} | {r['in_torch']} | {ops} | {check} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

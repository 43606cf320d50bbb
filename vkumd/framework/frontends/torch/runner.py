"""Running a converted FX graph on vkumd with torch tensors in and out.

Memory: each call copies every input once, from the torch tensor's memory (read in place
through ``Tensor.numpy()``, no copy) into the recording's input tensors (a recording binds
its own buffers, so this copy cannot be avoided). Outputs are read through DLPack where the
device memory is host-visible (lavapipe, integrated GPUs): ``torch.from_dlpack`` views the
mapped memory without a copy, and by default the view is cloned once, because the next call
of the same shape bucket overwrites the recording's outputs. ``copy_outputs=False`` returns
the views themselves (zero-copy, valid until the next call). Memory the host cannot map is
read back with one staging copy. int64 tensors run as int32 and come back as int64.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import fx

from vkumd.errors import VkumdError
from vkumd.framework import dtypes
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.execute.lower import check_recordable
from vkumd.framework.frontends.torch.convert import Converted, Converter
from vkumd.framework.frontends.torch.support import WEIGHT
from vkumd.framework.graph import run_passes
from vkumd.framework.graph.dims import Dim, sym
from vkumd.framework.tensor import DLPACK_CPU, Tensor

log = logging.getLogger("vkumd.torch")

_DEFAULT_CONTEXT: Any = None
_CONTEXT_LOCK = threading.Lock()


class VkumdFallbackWarning(UserWarning):
    """Part or all of a torch graph runs in torch because vkumd lacks an op it uses."""


def default_context() -> Any:
    """The context torch graphs run on unless given one: one per process, made on first use."""
    global _DEFAULT_CONTEXT
    with _CONTEXT_LOCK:
        if _DEFAULT_CONTEXT is None:
            from vkumd.framework.context import Context

            _DEFAULT_CONTEXT = Context()
        return _DEFAULT_CONTEXT


def warn_fallback(message: str) -> None:
    """Say once (per message) that work falls back to torch."""
    warnings.warn(message, VkumdFallbackWarning, stacklevel=3)


def _to_host(t: torch.Tensor, name: str) -> Any:
    """A placeholder's value as the array its graph input takes: int64 ids checked to fit
    int32 by the one conversion rule (:func:`vkumd.framework.dtypes.host_array`), never
    wrapped; bfloat16 as float32 (rounded back exactly on upload)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.int64:
        return dtypes.host_array(t.contiguous().numpy(), expected=dtypes.int32,
                                 what=f"input {name!r}")[0].astype(np.int32)
    if t.dtype == torch.bfloat16:
        t = t.float()  # the input tensor converts float32 to its bfloat16 storage
    return t.contiguous().numpy()


def to_torch(t: Tensor, dtype: torch.dtype, copy: bool = True) -> torch.Tensor:
    """A vkumd tensor as a torch tensor of ``dtype`` (see the module docstring for copies)."""
    if t.__dlpack_device__()[0] == DLPACK_CPU and t.dtype.name != "bfloat16":
        out = torch.from_dlpack(t)
        if copy:
            out = out.clone()
    else:
        out = torch.from_numpy(t.numpy())
    return out if out.dtype == dtype else out.to(dtype)


def _plain_symbol(d: Any) -> str | None:
    if isinstance(d, Dim) and len(d.symbols) == 1:
        name = next(iter(d.symbols))
        return name if d == sym(name) else None
    return None


class VkumdGraphModule:
    """An aten-level FX graph compiled for vkumd; call it with the placeholders' values.

    Conversion waits for the first call, which brings the weights' real values; they are
    read once and kept on the device. A weight changed in place later (its version counter
    moves) or replaced makes the next call convert again. A graph the converter or the
    executor refuses runs in torch instead, with a :class:`VkumdFallbackWarning`.

    Args:
        gm: the graph (aten ops, ``meta["val"]`` on its nodes).
        kinds: placeholder name -> ``"weight"`` or ``"input"`` (absent: input).
        ctx: the vkumd context (default :func:`default_context`).
        passes, disable: as :func:`vkumd.framework.graph.run_passes`.
        buckets: as :class:`~vkumd.framework.execute.CompiledGraph`.
        copy_outputs: clone outputs out of the recording's memory (default); False returns
            zero-copy views that the next call of the same bucket overwrites.
        name: the IR graph's name.
    """

    def __init__(self, gm: fx.GraphModule, kinds: dict[str, str], *, ctx: Any = None,
                 passes: Sequence[str] | None = None, disable: Sequence[str] | None = None,
                 buckets: Any = None, copy_outputs: bool = True, name: str = "torch") -> None:
        self.gm = gm
        self.kinds = dict(kinds)
        self.ctx = ctx
        self.passes, self.disable, self.buckets = passes, disable, buckets
        self.copy_outputs = copy_outputs
        self.name = name
        self.converted: Converted | None = None
        self.compiled: CompiledGraph | None = None
        self.fallback: str | None = None
        """Why this graph runs in torch (None while it runs on vkumd)."""
        self.builds = 0
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        self._weight_index = [i for i, n in enumerate(names) if kinds.get(n) == WEIGHT]
        self._snapshot: list[tuple[int, int, int]] = []
        # Threads making the first call (or a call after a weight changed) build once.
        self._build_lock = threading.Lock()

    # -- building ----------------------------------------------------------------------------
    def _fingerprint(self, args: Sequence[Any]) -> list[tuple[int, int, int]]:
        out = []
        for i in self._weight_index:
            t = args[i]
            out.append((id(t), getattr(t, "_version", 0),
                        t.data_ptr() if isinstance(t, torch.Tensor) else 0))
        return out

    def build(self, args: Sequence[Any]) -> None:
        """Convert, optimise and compile with these placeholder values (weights read now)."""
        if self.compiled is not None:
            self.compiled.release()
            self.compiled = None
        try:
            converted = Converter(self.gm, self.kinds, args, self.name).convert()
            graph = run_passes(converted.graph, self.passes, disable=self.disable)
            check_recordable(graph)
            ctx = self.ctx if self.ctx is not None else default_context()
            self.compiled = CompiledGraph(graph, ctx, buckets=self.buckets)
        except VkumdError as exc:
            self.fallback = str(exc)
            warn_fallback(f"vkumd: graph {self.name} runs in torch: {exc}")
            return
        self.converted = converted
        self._snapshot = self._fingerprint(args)
        self.builds += 1
        log.info("graph %s: %d IR nodes after the passes", self.name, len(graph.nodes))

    # -- calling -----------------------------------------------------------------------------
    def __call__(self, *args: Any) -> list[Any]:
        """Run the graph; returns one value per FX output, as the FX graph would."""
        with self._build_lock:
            if self.fallback is None and (self.compiled is None
                                          or self._fingerprint(args) != self._snapshot):
                if self.compiled is not None:
                    log.info("graph %s: a weight changed; converting again", self.name)
                self.build(args)
            compiled, conv = self.compiled, self.converted
        if self.fallback is not None:
            result = self.gm(*args)
            return list(result) if isinstance(result, (list, tuple)) else [result]
        assert compiled is not None and conv is not None
        live = {v.name for v in compiled.graph.inputs}
        feeds = {name: _to_host(args[i], name) for i, name in conv.inputs.items() if name in live}
        if conv.ranges:
            env = self._symbols(args)
            for name, (start, end, step) in conv.ranges.items():
                lo, hi = (d if isinstance(d, int) else d.bind(env) for d in (start, end))
                feeds[name] = np.arange(lo, hi, step, dtype=np.int32)
        results = compiled(**feeds)
        return [self._output(spec, results, args) for spec in conv.outputs]

    def _output(self, spec: tuple[Any, ...], results: list[Tensor], args: Sequence[Any]
                ) -> Any:
        kind = spec[0]
        if kind == "value":
            return to_torch(results[spec[1]], spec[2], self.copy_outputs)
        if kind == "input":
            return args[spec[1]]
        if kind == "const":
            return spec[1]
        if kind == "size":
            return spec[1] if isinstance(spec[1], int) else spec[1].bind(self._symbols(args))
        return None

    def _symbols(self, args: Sequence[Any]) -> dict[str, int]:
        assert self.converted is not None
        env: dict[str, int] = {}
        for i, shape in self.converted.shapes.items():
            for d, actual in zip(shape, args[i].shape, strict=True):
                name = _plain_symbol(d)
                if name is not None:
                    env[name] = int(actual)
        return env

    def release(self) -> None:
        """Free the device memory (weights, recordings); the next call builds again."""
        if self.compiled is not None:
            self.compiled.release()
            self.compiled = None

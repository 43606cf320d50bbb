"""The ``torch.compile`` backend, and the partitioning both frontends share.

Dynamo hands the backend one FX graph of torch-level calls. ``aot_module_simplified`` traces
it to aten ops (functional, with ``meta["val"]`` fake tensors carrying dynamo's symbolic
sizes) and calls :func:`compile_aten` on the forward graph; a backward graph, when autograd
needs one, runs in torch. Parameters and buffers (dynamo passes them as graph inputs) are
weights: read once and kept on the device.

Fallback: when every node is one vkumd takes, the graph runs whole on vkumd. Otherwise the
graph is cut with torch's ``CapabilityBasedPartitioner`` into the largest subgraphs vkumd
takes (each at least two compute ops, no cycles through torch nodes); those run on vkumd and
the rest in torch, and one :class:`VkumdFallbackWarning` names the ops left to torch.
``partition=False`` runs such a graph entirely in torch instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from vkumd.framework.frontends.torch.aten_layout import VIEW_TARGETS
from vkumd.framework.frontends.torch.runner import VkumdGraphModule, warn_fallback
from vkumd.framework.frontends.torch.support import (
    WEIGHT,
    constant_nodes,
    describe,
    refusal,
    refusals,
)

_names = itertools.count()
_ASSERTS = frozenset({torch.ops.aten._assert_tensor_metadata.default,
                      torch.ops.aten._assert_scalar.default,
                      torch.ops.aten.sym_constrain_range_for_size.default})


class _Supported(OperatorSupportBase):
    def __init__(self, constants: set[fx.Node]) -> None:
        super().__init__()
        self.constants = constants

    def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
        return node.op == "call_function" and refusal(node, self.constants) is None


class _Part(torch.nn.Module):
    """A fused partition's stand-in: runs its graph on vkumd, returns what it returned."""

    def __init__(self, runner: VkumdGraphModule, single: bool) -> None:
        super().__init__()
        self.runner = runner
        self.single = single

    def forward(self, *args: Any) -> Any:
        out = self.runner(*args)
        return out[0] if self.single else tuple(out)


def _computes(nodes: Any) -> bool:
    return any(n.op == "call_function" and n.target not in VIEW_TARGETS for n in nodes)


def compile_aten(gm: fx.GraphModule, kinds: dict[str, str], *, partition: bool = True,
                 name: str | None = None, **options: Any) -> Callable[..., Any]:
    """An aten-level graph as a callable over its placeholders' values (returning a list or
    tuple, one entry per output), on vkumd where it can be.

    Args:
        gm: the graph (``meta["val"]`` on its nodes); changed in place by partitioning.
        kinds: placeholder name -> ``"weight"`` / ``"input"`` (absent: input).
        partition: cut a graph with unsupported ops into vkumd and torch parts (else run it
            all in torch).
        name: the graph's name in warnings and the IR (default ``torch_<n>``).
        options: :class:`VkumdGraphModule`'s keyword arguments.

    Returns:
        The callable.
    """
    name = name or f"torch_{next(_names)}"
    for node in list(gm.graph.nodes):
        # Export's runtime checks (dtype, device, size ranges) were true when torch traced;
        # vkumd checks shapes when it binds the inputs, and these produce nothing.
        if node.op == "call_function" and node.target in _ASSERTS and not node.users:
            gm.graph.erase_node(node)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    refused = refusals(gm, kinds)
    if not refused:
        return VkumdGraphModule(gm, kinds, name=name, **options)
    ops = describe(refused.items())
    if not partition:
        warn_fallback(f"vkumd: graph {name} runs in torch; vkumd lacks: {ops}")
        return gm
    constants = constant_nodes(gm, kinds)
    partitioner = CapabilityBasedPartitioner(
        gm, _Supported(constants), non_compute_ops=[_qualified(t) for t in VIEW_TARGETS])
    parts = [p for p in partitioner.propose_partitions() if _computes(p.nodes)]
    if not parts:
        warn_fallback(f"vkumd: graph {name} runs in torch; vkumd lacks: {ops}")
        return gm
    fused = partitioner.fuse_partitions(parts, prefix="vkumd_")
    count = 0
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not str(node.target).startswith("vkumd_"):
            continue
        sub = getattr(fused, node.target)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        sub_kinds = {p.name: WEIGHT for p, a in zip(placeholders, node.args, strict=True)
                     if isinstance(a, fx.Node) and a.op == "placeholder"
                     and kinds.get(a.name) == WEIGHT}
        out = next(n for n in sub.graph.nodes if n.op == "output")
        single = not isinstance(out.args[0], (tuple, list))
        runner = VkumdGraphModule(sub, sub_kinds, name=f"{name}_{node.target}", **options)
        setattr(fused, node.target, _Part(runner, single))
        count += 1
    fused.recompile()
    warn_fallback(f"vkumd: graph {name} runs {count} part(s) on vkumd and the rest in torch; "
                  f"vkumd lacks: {ops}")
    return fused


def _qualified(target: Any) -> str:
    from torch.fx.node import _get_qualified_name

    return _get_qualified_name(target)


def _dynamo_weights(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[bool]:
    """Per dynamo input, whether it is a parameter or buffer of the compiled module."""
    out = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, example_inputs, strict=False):
        # Dynamo records where each input came from: L['self']._modules['fc']._parameters[..]
        label = getattr(getattr(node.meta.get("grapharg"), "source", None), "name", "")
        where = label() if callable(label) else str(label)
        out.append(isinstance(value, torch.nn.Parameter)
                   or "_buffers" in where or "_parameters" in where)
    return out


def make_backend(*, ctx: Any = None, passes: Sequence[str] | None = None,
                 disable: Sequence[str] | None = None, buckets: Any = None,
                 copy_outputs: bool = True, partition: bool = True) -> Callable[..., Any]:
    """A ``torch.compile`` backend with these settings (``backend="vkumd"`` is the defaults).

    Args:
        ctx: the vkumd context (default one per process).
        passes, disable: the graph passes to run / not to run.
        buckets: shape buckets for the recordings (see ``CompiledGraph``).
        copy_outputs: see :class:`VkumdGraphModule`.
        partition: see :func:`compile_aten`.

    Returns:
        ``backend(gm, example_inputs) -> callable``.
    """
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    options = {"ctx": ctx, "passes": passes, "disable": disable, "buckets": buckets,
               "copy_outputs": copy_outputs}

    def backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        weights = _dynamo_weights(gm, example_inputs)

        def forward(fgm: fx.GraphModule, fexample: Sequence[Any]) -> Callable[..., Any]:
            placeholders = [n for n in fgm.graph.nodes if n.op == "placeholder"]
            kinds: dict[str, str] = {}
            # AOT keeps dynamo's inputs first and in order; anything else is an input.
            if len(placeholders) == len(weights):
                kinds = {p.name: WEIGHT for p, w in zip(placeholders, weights, strict=True)
                         if w}
            return make_boxed_func(compile_aten(fgm, kinds, partition=partition, **options))

        def backward(bgm: fx.GraphModule, bexample: Sequence[Any]) -> Callable[..., Any]:
            return make_boxed_func(bgm.forward)

        return aot_module_simplified(gm, example_inputs, fw_compiler=forward,
                                     bw_compiler=backward)

    return backend


backend = make_backend()
"""The default backend: ``torch.compile(model, backend=vkumd.torch.backend)``."""

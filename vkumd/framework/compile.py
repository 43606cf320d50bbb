"""``vkumd.compile``: trace a Python function on the tensor API into a graph, optimise it,
and return something to call.

Example::

    def block(x, w, b):
        h = vkumd.ops.matmul(x, w, bias=b, activation="gelu")
        return (h + x).layer_norm()

    f = vkumd.compile(block, {"x": x, "w": w, "b": b}, dynamic={"x": {0: "batch"}})
    print(f.graph)          # the optimised IR; f.graph.to_dot() for Graphviz
    y = f(x=x2, w=w, b=b)   # any batch size

Execution records the graph's launches once per shape bucket and replays them
(:class:`vkumd.framework.execute.CompiledGraph`); a graph with an op the executor cannot
lower yet runs through the eager interpreter (:mod:`vkumd.framework.interpret`) instead,
with a warning in the log, and :meth:`CompiledFunction.run_eager` always uses that.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from vkumd.errors import VkumdTypeError
from vkumd.framework import dtypes
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.execute.buckets import BucketPolicy
from vkumd.framework.execute.lower import check_recordable
from vkumd.framework.graph import Graph, UnsupportedOpError, run_passes
from vkumd.framework.graph.reference import bindings_for
from vkumd.framework.graph.trace import Trace, trace
from vkumd.framework.interpret import run_graph
from vkumd.framework.tensor import Tensor

log = logging.getLogger("vkumd.compile")


def compiled_graph_class() -> type:
    """The executor compiled functions use (a seam for tests that stand one in)."""
    return CompiledGraph


class CompiledFunction:
    """A traced, optimised function; call it as the original (positionally or by name).

    Results are views of memory the compiled function owns: a thread's next call that falls
    in the same shape bucket overwrites them (``vkumd.ops.copy`` keeps one).

    Thread model: one compiled function may be called from any number of threads at once,
    each on its own current stream or all on the default stream. Each calling thread gets
    its own per-bucket memory and recordings, so every call returns that caller's results;
    a short lock covers only the bookkeeping (finding the bucket, recording it the first
    time), not writing the inputs or submitting. Eviction (the executor keeps a bounded
    number of buckets over all threads) never frees a bucket while a call is using it.
    Results handed to another thread stay valid until the producing thread calls again
    with shapes in the same bucket.

    Attributes:
        graph: the optimised graph.
        traced_graph: the graph as traced, before the passes.
        input_names: the inputs, in the function's parameter order.
        executor: ``"compiled"`` (CompiledGraph) or ``"eager"`` (the interpreter).
    """

    def __init__(self, traced: Trace, graph: Graph, ctx: Any, buckets: Any = None) -> None:
        self.traced_graph = traced.graph
        self.graph = graph
        self.input_names = list(traced.input_names)
        self._trace = traced
        self._ctx = ctx
        self._buckets = buckets
        self._constants: dict[int, Tensor] = {}
        self._compiled: Any = None
        self._lock = threading.Lock()  # makes the context and the executor once
        self.executor = "compiled"
        try:
            check_recordable(graph)
        except UnsupportedOpError as exc:
            log.warning("%s runs eagerly, node by node: %s", graph.name, exc)
            self.executor = "eager"

    # -- calling ---------------------------------------------------------------------------

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        names = self.input_names
        if len(args) > len(names):
            raise VkumdTypeError(f"{self.graph.name}() takes {len(names)} inputs "
                                 f"({', '.join(names)}), got {len(args)} positional")
        bound = dict(zip(names, args, strict=False))
        for name, value in kwargs.items():
            if name not in names:
                raise VkumdTypeError(f"{self.graph.name}() has no input {name!r}; its inputs "
                                     f"are {', '.join(names)}")
            if name in bound:
                raise VkumdTypeError(f"{self.graph.name}() got input {name!r} twice")
            bound[name] = value
        missing = [n for n in names if n not in bound]
        if missing:
            raise VkumdTypeError(f"{self.graph.name}() is missing input(s) "
                                 f"{', '.join(missing)}")
        return bound

    def _context(self, bound: Mapping[str, Any]) -> Any:
        if self._ctx is not None:
            return self._ctx
        with self._lock:
            if self._ctx is None:
                self._ctx = next((t.context for t in bound.values()
                                  if isinstance(t, Tensor)), None)
            if self._ctx is None:
                from vkumd.framework.context import Context

                self._ctx = Context()
        return self._ctx

    def _tensors(self, args: Sequence[Any], kwargs: Mapping[str, Any],
                 upload: bool | None = None) -> dict[str, Any]:
        """The inputs by name, checked by the one conversion rule; host data uploaded to
        tensors with ``upload`` (default: unless a CompiledGraph, which copies arrays
        straight into its bucket's inputs, runs the call; a stand-in executor gets tensors)."""
        if upload is None:
            upload = not isinstance(self._compiled, CompiledGraph)
        bound = self._bind(args, kwargs)
        ctx = self._context(bound)
        by_name = {v.name: v for v in self.graph.inputs}
        out: dict[str, Any] = {}
        for name, value in bound.items():
            if name not in by_name:
                continue  # an input the passes found unused
            expected = by_name[name].dtype
            if isinstance(value, Tensor):
                if value.dtype is not expected:
                    raise dtypes.mismatch(f"input {name!r}", value.dtype, expected)
            else:
                value, _ = dtypes.host_array(value, expected=expected, what=f"input {name!r}")
                if upload:
                    value = ctx.tensor(value, dtype=expected)
            out[name] = value
        bindings_for(self.graph, {n: tuple(t.shape) for n, t in out.items()})
        return out

    def _structure(self, outputs: Sequence[Tensor]) -> Any:
        keys = self._trace.output_keys
        if keys is None:
            return outputs[0]
        if isinstance(keys, int):
            return tuple(outputs)
        return dict(zip(keys, outputs, strict=True))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the graph on tensors (or arrays) shaped like the examples.

        Returns:
            What the traced function returned: a Tensor, a tuple or a dict of Tensors.

        Raises:
            VkumdTypeError: missing or unknown inputs; an input of another dtype than the
                graph's (arrays are never narrowed: :func:`vkumd.framework.dtypes.host_array`).
            VkumdValueError: shapes that contradict the graph; integer values outside the
                input's type.
        """
        if self.executor == "eager":
            return self.run_eager(*args, **kwargs)
        inputs = self._tensors(args, kwargs)
        compiled = self._compiled
        if compiled is None:
            with self._lock:
                if self._compiled is None:
                    cls = compiled_graph_class()
                    self._compiled = cls(self.graph, self._ctx, buckets=self._buckets)
                compiled = self._compiled
        result = compiled(**inputs)
        if isinstance(result, Mapping):
            result = list(result.values())
        return self._structure(list(result) if isinstance(result, (list, tuple)) else [result])

    def run_eager(self, *args: Any, **kwargs: Any) -> Any:
        """As calling, but always through the eager interpreter (one vkumd op per node)."""
        inputs = self._tensors(args, kwargs, upload=True)
        return self._structure(run_graph(self.graph, self._ctx, inputs, self._constants))

    # -- looking -----------------------------------------------------------------------------

    def summary(self, bindings: Mapping[str, int] | None = None) -> str:
        """A text table of the optimised graph, the passes that ran and the executor."""
        if self._compiled is not None and hasattr(self._compiled, "summary"):
            return str(self._compiled.summary())
        passes = ", ".join(self.graph.passes_run) or "none"
        return (f"{self.graph.summary(bindings)}\npasses: {passes}\nexecutor: {self.executor}"
                f" ({len(self.traced_graph.nodes)} traced nodes, {len(self.graph.nodes)} "
                "after the passes)")

    def __repr__(self) -> str:
        return (f"<CompiledFunction {self.graph.name}({', '.join(self.input_names)}): "
                f"{len(self.graph.nodes)} nodes, executor {self.executor}>")


def compile(fn: Callable[..., Any],  # noqa: A001 - the public name, as torch.compile
            example_inputs: Mapping[str, Any] | Sequence[Any], *,
            dynamic: Mapping[Any, Mapping[int, Any]] | None = None, ctx: Any = None,
            passes: Sequence[str] | None = None, disable: Iterable[str] | None = None,
            buckets: Any = None) -> CompiledFunction:
    """Trace ``fn`` once, optimise the graph and return a :class:`CompiledFunction`.

    Args:
        fn: a function of tensors using the tensor API and ``vkumd.ops``; values it closes
            over (eager tensors, numpy arrays) become constants.
        example_inputs: name -> vkumd Tensor or numpy array (``fn`` is called by keyword),
            or a tuple of them (called positionally, named after ``fn``'s parameters).
        dynamic: input -> {axis: symbol}, e.g. ``{"x": {0: "batch", 1: "seq"}}``; one symbol
            name across inputs is one dimension. Other dimensions are fixed. A symbol may be
            a multiple of one (``{"x": {2: "32*h", 3: 32 * sym("w")}}``), which lets
            strided convolutions and pooling keep the size symbolic (docs/graphs.md).
        ctx: the context to run on (default: the examples' tensors', else a new one).
        passes: pass names to run (default the pipeline,
            :data:`vkumd.framework.graph.PIPELINE`).
        disable: pass names not to run.
        buckets: handed to the compiled executor (shape buckets to record).

    Returns:
        The compiled function.

    Raises:
        TraceError: the function reads tensor data on the host (data-dependent control
            flow), uses a symbolic dimension as an int, or calls what cannot be traced.
        GraphError: shape or dtype errors, naming the node and the user's line.
        VkumdValueError: an unknown pass name; ``buckets`` naming a symbol no input has
            (the message lists the symbols).
        VkumdTypeError: ``buckets`` not a dict of symbol -> list of int sizes or None.
    """
    traced = trace(fn, example_inputs, dynamic=dynamic)
    graph = run_passes(traced.graph, passes, disable=disable)
    if buckets is not None and compiled_graph_class() is CompiledGraph:
        BucketPolicy(graph, buckets)  # a misspelt symbol is refused now, not at the first call
    if ctx is None:
        values = (example_inputs.values() if isinstance(example_inputs, Mapping)
                  else example_inputs)
        ctx = next((t.context for t in values if isinstance(t, Tensor)), None)
    return CompiledFunction(traced, graph, ctx, buckets)

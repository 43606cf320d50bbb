"""``graph.summary()``: a small text table of a graph's nodes, values, memory and passes.

The ``kernels`` and ``barriers`` columns are the lowering's to fill (launches per op, and
barriers between them); until then they read ``—``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from vkumd.framework.graph.ir import Graph, ValueKind
from vkumd.framework.graph.memory import DEFAULT_ALIGNMENT, format_bytes, plan_memory

NOT_YET = "—"


def summarize(graph: Graph, bindings: Mapping[str, int] | None = None, *,
              alignment: int = DEFAULT_ALIGNMENT) -> str:
    """The summary table of ``graph``.

    Args:
        graph: the graph.
        bindings: symbol sizes; with them (or with no symbols in the intermediates) the
            arena is planned and its size shown.
        alignment: as :func:`~vkumd.framework.graph.memory.plan_memory`.

    Returns:
        The table, one line per op and a few lines of totals.

    Raises:
        GraphError, VkumdValueError: as the memory planner, when bindings are given.
    """
    counts = Counter(node.op for node in graph.nodes)
    width = max([len("op"), len("total"), *(len(op) for op in counts)])
    lines = [f"graph {graph.name}",
             f"  {'op':<{width}}  {'nodes':>5}  {'kernels':>7}  {'barriers':>8}"]
    for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {op:<{width}}  {n:>5}  {NOT_YET:>7}  {NOT_YET:>8}")
    lines.append(f"  {'total':<{width}}  {len(graph.nodes):>5}  {NOT_YET:>7}  {NOT_YET:>8}")
    kinds = Counter(v.kind for v in graph.values())
    weight_bytes = sum(v.data.nbytes for v in graph.weights if v.data is not None)
    lines.append(f"  values: {kinds[ValueKind.INPUT]} inputs, {kinds[ValueKind.WEIGHT]} "
                 f"weights ({format_bytes(weight_bytes)}), "
                 f"{kinds[ValueKind.INTERMEDIATE]} intermediates, {len(graph.outputs)} outputs")
    symbolic = any(not isinstance(d, int) for node in graph.nodes for v in node.outputs
                   for d in v.shape)
    if bindings is None and symbolic:
        lines.append("  arena: not planned (pass bindings= for the symbolic dims)")
    else:
        plan = plan_memory(graph, bindings, alignment=alignment)
        bound = ", ".join(f"{k}={v}" for k, v in sorted(plan.bindings.items()))
        lines.append(f"  {plan.report()}" + (f" at {bound}" if bound else ""))
    lines.append(f"  passes: {', '.join(graph.passes_run) or 'none'}")
    return "\n".join(lines)

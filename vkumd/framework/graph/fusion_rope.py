"""Rotary embedding into the cache write: ``kv_write(cache, rope(k, positions), positions)``
becomes one ``kv_write(cache, k, positions, rope_theta=..., rope_pairs=...)``, whose kernel
rotates the keys as it stores them (the issue's "fusable into the cache write"): the rotated
keys never make a trip to memory and the step has one launch fewer per layer.

It fuses when the rotation is read only by the write (and is no graph output), both use the
same positions value, and the write rotates nothing yet. A decode step whose attention reads
the cache qualifies; a prefill whose attention reads the new keys directly does not (the
rotation is still needed there).
"""

from __future__ import annotations

from vkumd.framework.graph.fusion_rewrite import replace_group, sole_user
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.registry import OPS


def fuse_rope_into_cache_write(graph: Graph) -> Graph:
    """A copy of ``graph`` with each one-reader ``rope`` feeding a ``kv_write`` at the same
    positions folded into the write.

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for rope in list(g.nodes):
        if rope.op != "rope":
            continue
        rotated = rope.outputs[0]
        write = sole_user(g, rotated)
        if write is None or write.op != "kv_write" or write.inputs[1] is not rotated:
            continue
        if write.inputs[2] is not rope.inputs[1] or write.attrs.get("rope_theta") is not None:
            continue
        attrs = OPS["rope"].full_attrs(rope.attrs)
        replace_group(g, write, [rope, write], "kv_write",
                      [write.inputs[0], rope.inputs[0], write.inputs[2]],
                      {**write.attrs, "rope_theta": attrs["theta"],
                       "rope_pairs": attrs["pairs"]})
    return g

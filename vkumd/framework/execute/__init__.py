"""Executing graphs: lowering to ``vkumd.ops`` on the one path, arenas, buckets, replay.

The device-free half of the graph compiler lives in :mod:`vkumd.framework.graph`; this
package runs its graphs on a context.
"""

from vkumd.framework.execute.arena import Arena, TensorView, view
from vkumd.framework.execute.buckets import BucketPolicy, bind_symbols
from vkumd.framework.execute.compiled import CompiledGraph
from vkumd.framework.execute.lower import LOWERINGS, VIEW_OPS, Lowering, lowering_for
from vkumd.framework.execute.padding import leaky_symbols
from vkumd.framework.execute.recording import BucketStats, Recording, planning_graph

__all__ = ["LOWERINGS", "VIEW_OPS", "Arena", "BucketPolicy", "BucketStats", "CompiledGraph",
           "Lowering", "Recording", "TensorView", "bind_symbols", "leaky_symbols",
           "lowering_for", "planning_graph", "view"]

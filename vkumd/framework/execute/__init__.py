"""Executing graphs: lowering to ``vkumd.ops`` on the one path, arenas, buckets, replay.

The device-free half of the graph compiler lives in :mod:`vkumd.framework.graph`; this
package runs its graphs on a context.
"""

from vkumd.framework.execute.arena import Arena, TensorView, view
from vkumd.framework.execute.bucket import Bucket, BucketStats, planning_graph
from vkumd.framework.execute.buckets import BucketPolicy, bind_symbols
from vkumd.framework.execute.compiled import CompiledGraph
from vkumd.framework.execute.lower import LOWERINGS, VIEW_OPS, Lowering, lowering_for
from vkumd.framework.execute.recording import Recording

__all__ = ["LOWERINGS", "VIEW_OPS", "Arena", "Bucket", "BucketPolicy", "BucketStats",
           "CompiledGraph", "Lowering", "Recording", "TensorView", "bind_symbols",
           "lowering_for", "planning_graph", "view"]

"""Scale-out: several devices in one process, and (with the ``ray`` extra) many processes.

- :class:`DataParallelEncoder` splits each batch across contexts in one process, one thread
  per context; :func:`open_contexts` opens one context per entry of ``VKUMD_DEVICE=0,1``.
- :func:`embed`, :class:`EncoderActor` and :func:`node_resources` spread a corpus over Ray
  actors, one per device; they import Ray only when called (``pip install 'vkumd[ray]'``).

See docs/scale-out.md.
"""

from __future__ import annotations

from vkumd.framework.parallel import (
    DataParallelEncoder,
    device_list,
    open_contexts,
    split_evenly,
)
from vkumd.framework.ray_pool import (
    RESOURCE,
    EmbedResult,
    EmbedStats,
    EmbedStream,
    EncoderActor,
    embed,
    iter_embed,
    node_resources,
    remote_class,
    start_actors,
)

__all__ = ["RESOURCE", "DataParallelEncoder", "EmbedResult", "EmbedStats", "EmbedStream",
           "EncoderActor", "device_list", "embed", "iter_embed", "node_resources",
           "open_contexts", "remote_class", "split_evenly", "start_actors"]

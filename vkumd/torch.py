"""``vkumd.torch``: run PyTorch models on vkumd (needs the ``torch`` extra).

Example::

    import torch, vkumd.torch

    fast = torch.compile(model, backend="vkumd")        # or backend=vkumd.torch.backend
    y = fast(x)

    ep = torch.export.export(model, (x,), dynamic_shapes={"x": {0: torch.export.Dim("b")}})
    y = vkumd.torch.load_exported(ep)(x)

Importing this module registers the backend name ``"vkumd"`` with dynamo; the package's
``torch_dynamo_backends`` entry point does the same without an import. See
docs/frameworks_torch.md for the ops covered, fallbacks, dynamic sizes and copies.
"""

from __future__ import annotations

try:
    import torch._dynamo
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("vkumd.torch needs PyTorch: `pip install torch==2.13.0` (the CPU "
                      "build is enough), or `pip install vkumd[torch]`") from exc

from vkumd.framework.frontends.torch import (
    ExportedModule,
    VkumdFallbackWarning,
    backend,
    load_exported,
    make_backend,
)

__all__ = ["ExportedModule", "VkumdFallbackWarning", "backend", "load_exported",
           "make_backend"]


def _register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS

    # Registering twice raises; the entry point may have registered it already.
    if "vkumd" not in _BACKENDS:
        torch._dynamo.register_backend(backend, name="vkumd")


_register()

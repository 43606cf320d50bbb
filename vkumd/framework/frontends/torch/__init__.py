"""The PyTorch frontend: ``torch.compile(backend="vkumd")`` and ``torch.export`` programs.

Importing this package imports torch; ``vkumd`` itself never does (see :mod:`vkumd.torch`).
"""

from vkumd.framework.frontends.torch.backend import backend, compile_aten, make_backend
from vkumd.framework.frontends.torch.export import ExportedModule, load_exported
from vkumd.framework.frontends.torch.runner import VkumdFallbackWarning, VkumdGraphModule
from vkumd.framework.frontends.torch.support import refusals

__all__ = ["ExportedModule", "VkumdFallbackWarning", "VkumdGraphModule", "backend",
           "compile_aten", "load_exported", "make_backend", "refusals"]

"""The model loaders' errors: each names the file and the field or tensor at fault."""

from __future__ import annotations

from vkumd.errors import VkumdValueError


class ModelFileError(VkumdValueError):
    """A model file is missing, unreadable, or says something vkumd cannot run."""


class ModelNotFound(ModelFileError):
    """Neither a model directory nor an installed model package goes by that name."""


class SafetensorsError(ModelFileError):
    """A ``.safetensors`` file is truncated, corrupt, or lacks what was asked for."""


class GGUFError(ModelFileError):
    """A ``.gguf`` file is truncated, corrupt, or holds something vkumd cannot read."""


class UnsupportedModelError(ModelFileError):
    """A model file is well formed but describes a model vkumd does not run (another
    architecture, a tensor type not supported yet)."""


__all__ = ["GGUFError", "ModelFileError", "ModelNotFound", "SafetensorsError",
           "UnsupportedModelError"]

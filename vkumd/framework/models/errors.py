"""The model loaders' errors: each names the file and the field or tensor at fault."""

from __future__ import annotations

from vkumd.errors import VkumdValueError


class ModelFileError(VkumdValueError):
    """A model file is missing, unreadable, or says something vkumd cannot run."""


class ModelNotFound(ModelFileError):
    """Neither a model directory nor an installed model package goes by that name."""


class SafetensorsError(ModelFileError):
    """A ``.safetensors`` file is truncated, corrupt, or lacks what was asked for."""


__all__ = ["ModelFileError", "ModelNotFound", "SafetensorsError"]

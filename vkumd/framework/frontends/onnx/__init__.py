"""The ONNX frontend: a model file or ``ModelProto`` becomes a graph of vkumd's IR.

:func:`~vkumd.framework.frontends.onnx.importer.import_model` does the translation,
:class:`~vkumd.framework.frontends.onnx.model.OnnxModel` runs it, and
:mod:`~vkumd.framework.frontends.onnx.backend` exposes it to ONNX's backend test suite.
Needs the ``onnx`` package (``pip install vkumd[onnx]``).
"""

from vkumd.framework.execute.lower import NoDeviceKernel
from vkumd.framework.frontends.onnx.errors import (
    MalformedGraphError,
    OnnxFileError,
    UnsupportedModelError,
)
from vkumd.framework.frontends.onnx.importer import import_model
from vkumd.framework.frontends.onnx.model import OnnxModel, load

__all__ = ["MalformedGraphError", "NoDeviceKernel", "OnnxFileError", "OnnxModel",
           "UnsupportedModelError", "import_model", "load"]

"""``vkumd.onnx.load``: run ONNX models on vkumd (needs ``pip install vkumd[onnx]``).

Example::

    import vkumd.onnx
    model = vkumd.onnx.load("model.onnx", dynamic={"input_ids": {0: "batch", 1: "seq"}})
    print(model.graph)
    outputs = model(input_ids=ids, attention_mask=mask)
"""

from vkumd.framework.frontends.onnx import (
    MalformedGraphError,
    NoDeviceKernel,
    OnnxFileError,
    OnnxModel,
    UnsupportedModelError,
    import_model,
    load,
)

__all__ = ["MalformedGraphError", "NoDeviceKernel", "OnnxFileError", "OnnxModel",
           "UnsupportedModelError", "import_model", "load"]

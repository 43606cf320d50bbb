"""vkumd as an ONNX backend (``onnx.backend.base.Backend``), for ONNX's own test cases.

Example::

    from vkumd.framework.frontends.onnx.backend import VkumdBackend
    rep = VkumdBackend.prepare(model)
    outputs = rep.run([x, y])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from vkumd.framework.frontends.onnx.model import OnnxModel, load

_shared: dict[str, Any] = {}


def shared_context() -> Any:
    """One :class:`~vkumd.Context` for every model the backend prepares without ``ctx``."""
    if "ctx" not in _shared:
        from vkumd.framework.context import Context

        _shared["ctx"] = Context()
    return _shared["ctx"]


class VkumdRep(BackendRep):
    """A prepared model; :meth:`run` takes inputs in the graph's order.

    Args:
        model: the loaded model.
    """

    def __init__(self, model: OnnxModel) -> None:
        self.model = model

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run on ``inputs`` (a list in the graph's input order, a dict, or one array).

        Returns:
            The outputs, in the graph's output order.

        Raises:
            NoDeviceKernel: the model needs a kernel vkumd lacks.
        """
        names = self.model.input_names
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            items = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feed = dict(zip(names, items, strict=False))
        out = self.model(**feed)
        return tuple(out[n] for n in self.model.output_names)


class VkumdBackend(Backend):
    """ONNX's backend interface over :func:`vkumd.onnx.load`."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> VkumdRep:
        """Import ``model`` (raising ``UnsupportedModelError`` listing every refused node).

        Args:
            model: the model.
            device: ``"CPU"`` (vkumd runs on the Vulkan device its context picked).
            kwargs: ``ctx`` (a context) and ``dynamic`` (symbol overrides).

        Returns:
            The prepared model.
        """
        ctx = kwargs.get("ctx") or shared_context()
        return VkumdRep(load(model, ctx=ctx, dynamic=kwargs.get("dynamic")))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Sequence[Any], device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Prepare ``model`` and run it once on ``inputs``."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """``CPU`` only: ONNX names no Vulkan device; vkumd's context picks its own."""
        return device == "CPU"


prepare = VkumdBackend.prepare
run_model = VkumdBackend.run_model
supports_device = VkumdBackend.supports_device

"""ONNX's nine light models (AlexNet, DenseNet-121, Inception v1 and v2, ResNet-50,
ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) through vkumd's ONNX backend, run by ONNX's own
runner (``onnx.backend.test.BackendTest``) with its inputs, expected outputs and tolerances.

The models hold their placeholder weights as ConstantOfShape nodes; VGG-19's first fully
connected weight is 411 MB, past vkumd's default fold limit, so the module raises
``VKUMD_FOLD_LIMIT`` as the refusal tells the user of a trusted model to. The runner writes
its generated test data under ``ONNX_MODELS``, pointed at a temporary directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

pytest.importorskip("onnx", reason="ONNX's light models and runner come with the onnx package")

import onnx.backend.test  # noqa: E402
import onnx.backend.test.runner  # noqa: E402

from vkumd.framework.frontends.onnx.backend import VkumdBackend  # noqa: E402

MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512")


@pytest.fixture(scope="module", autouse=True)
def _runner_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ONNX_MODELS", str(tmp_path_factory.mktemp("onnx-light")))
        patch.setenv("VKUMD_FOLD_LIMIT", str(1 << 30))
        yield



def _real_models_only(*args: Any, kind: str | None = None, **kwargs: Any) -> list[Any]:
    # The runner also loads ONNX's ~1900 node cases (17 s here), all of which the include
    # pattern below would skip: it is handed the real models alone.
    return _load_model_tests(*args, kind=kind, **kwargs) if kind == "real" else []


_load_model_tests = onnx.backend.test.runner.load_model_tests
with mock.patch.object(onnx.backend.test.runner, "load_model_tests", _real_models_only):
    _runner = onnx.backend.test.BackendTest(VkumdBackend, __name__)
_runner.include(rf"^test_({'|'.join(MODELS)})_cpu$")
OnnxBackendRealModelTest = _runner.test_cases["OnnxBackendRealModelTest"]


def test_every_light_model_is_collected() -> None:
    # A new onnx could rename a model; none may drop out of the run silently.
    names = {name for name in dir(OnnxBackendRealModelTest) if name.endswith("_cpu")}
    assert {f"test_{m}_cpu" for m in MODELS} <= names, sorted(names)
    assert os.environ.get("VKUMD_FOLD_LIMIT") == str(1 << 30)

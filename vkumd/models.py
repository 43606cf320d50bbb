"""``vkumd.models``: ready-made models on vkumd ops.

The implementations live in :mod:`vkumd.framework.models`; see ``docs/models.md``.
"""

from vkumd.framework.models.config import BertConfig, SentenceConfig
from vkumd.framework.models.encoder import SentenceEncoder
from vkumd.framework.models.errors import (
    GGUFError,
    ModelFileError,
    ModelNotFound,
    SafetensorsError,
    UnsupportedModelError,
)
from vkumd.framework.models.generation import TextGenerator
from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.models.llama_config import LlamaConfig
from vkumd.framework.models.loader import INSTALLED_MODELS, find_model, load_model_files
from vkumd.framework.models.ocr import OCR, OCRResult, Orientation, TextLine
from vkumd.framework.models.safetensors import SafetensorsFile

__all__ = ["INSTALLED_MODELS", "BertConfig", "GGUFError", "GGUFFile", "LlamaConfig",
           "ModelFileError", "ModelNotFound", "OCR", "OCRResult", "Orientation",
           "SafetensorsError", "SafetensorsFile", "SentenceConfig", "SentenceEncoder",
           "TextGenerator", "TextLine", "UnsupportedModelError", "find_model", "load_model_files"]

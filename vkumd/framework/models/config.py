"""What a BERT sentence-encoder directory says about the model, read and checked.

Two sources: Hugging Face's ``config.json`` (the encoder: sizes, layer-norm eps, activation)
and the sentence-transformers files (``modules.json``, the pooling module's
``config.json``, ``sentence_bert_config.json``: pooling, normalisation, window). Every
refusal names the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vkumd.framework.models.errors import ModelFileError
from vkumd.framework.untrusted import read_regular

# A config file is a few KiB; anything this big is not one (and would be parsed in memory).
MAX_JSON_BYTES = 16 * 2**20
# Sizes past these are refused before anything is built from them: no real BERT comes near,
# and a hostile config.json could otherwise make the loader loop or allocate for minutes.
MAX_SIZES = {"vocab_size": 2**24, "hidden_size": 2**16, "num_hidden_layers": 1024,
             "num_attention_heads": 2**12, "intermediate_size": 2**18,
             "max_position_embeddings": 2**20, "type_vocab_size": 2**16,
             "max_seq_length": 2**20}

# Hugging Face activation names and the matmul epilogue that computes each.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "relu": "relu", "silu": "silu", "swish": "silu"}
_ST = "sentence_transformers.models."


@dataclass(frozen=True)
class BertConfig:
    """The encoder's shape, from ``config.json``.

    Attributes:
        vocab_size, hidden_size, num_layers, num_heads, intermediate_size,
        max_positions, type_vocab_size: the sizes the weights must have.
        layer_norm_eps: added to the variance in every layer norm.
        activation: the FFN's activation as a matmul epilogue name (``"gelu"`` is erf GELU).
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float
    activation: str

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class SentenceConfig:
    """How token states become a sentence embedding, from the sentence-transformers files.

    Attributes:
        pooling: ``"mean"`` (over the sentence's tokens), ``"cls"`` (the first token) or
            ``"mean_sqrt_len"`` (the sum over tokens divided by the square root of the count).
        normalize: whether a Normalize module follows (unit L2 length).
        max_seq_length: tokens per sentence, special tokens included; longer ones are cut.
    """

    pooling: str
    normalize: bool
    max_seq_length: int


# The largest float32: the kernels take layer-norm eps as one.
FLOAT32_MAX = 3.4028234663852886e38


def read_json(path: Path) -> Any:
    """The JSON value in ``path``.

    Raises:
        ModelFileError: the file is missing, not a regular file, over
            :data:`MAX_JSON_BYTES`, or is not valid UTF-8 JSON.
    """
    data = read_regular(path, MAX_JSON_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFileError(f"{path}: cannot read it ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{path}: not valid JSON ({exc})") from None
    except (ValueError, RecursionError) as exc:
        # Nesting thousands deep, or an integer of thousands of digits.
        raise ModelFileError(f"{path}: not a JSON file vkumd reads ({type(exc).__name__}: "
                             f"{str(exc)[:200]})") from None


def _object(path: Path) -> dict[str, Any]:
    value = read_json(path)
    if not isinstance(value, dict):
        raise ModelFileError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def _int(path: Path, data: dict[str, Any], field: str, default: int | None = None,
         minimum: int = 1) -> int:
    value = data.get(field, default)
    if value is None:
        raise ModelFileError(f"{path}: field {field!r} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelFileError(f"{path}: field {field!r} = {str(value)[:100]}; it must be an "
                             f"int >= {minimum}")
    limit = MAX_SIZES.get(field)
    if limit is not None and value > limit:
        raise ModelFileError(f"{path}: field {field!r} = {str(value)[:100]} is more than "
                             f"{limit}, the most vkumd accepts; the file is corrupt")
    return value


def read_bert_config(path: Path) -> BertConfig:
    """Parse and check a Hugging Face BERT ``config.json``.

    Raises:
        ModelFileError: the file is missing or corrupt, names another architecture, or
            has sizes vkumd's kernels cannot run (named by field).
    """
    data = _object(path)
    model_type = data.get("model_type")
    architectures = data.get("architectures") or []
    if model_type != "bert" or not isinstance(architectures, list) or any(
            not (isinstance(a, str) and a.startswith("Bert")) for a in architectures):
        raise ModelFileError(f"{path}: model_type={str(model_type)[:100]!r}, architectures="
                             f"{str(architectures)[:200]}; only BERT encoders (model_type 'bert', "
                             "architectures BertModel/Bert*) are supported")
    position = data.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise ModelFileError(f"{path}: field 'position_embedding_type' = {position!r}; only "
                             "'absolute' is supported")
    act = data.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise ModelFileError(f"{path}: field 'hidden_act' = {act!r}; supported: "
                             f"{', '.join(ACTIVATIONS)}")
    eps = data.get("layer_norm_eps", 1e-12)
    if (isinstance(eps, bool) or not isinstance(eps, (int, float))
            or not 0 <= eps <= FLOAT32_MAX):
        raise ModelFileError(f"{path}: field 'layer_norm_eps' = {eps!r}; it must be a "
                             f"number from 0 to {FLOAT32_MAX:.4g} (float32's largest)")
    config = BertConfig(
        vocab_size=_int(path, data, "vocab_size"),
        hidden_size=_int(path, data, "hidden_size"),
        num_layers=_int(path, data, "num_hidden_layers"),
        num_heads=_int(path, data, "num_attention_heads"),
        intermediate_size=_int(path, data, "intermediate_size"),
        max_positions=_int(path, data, "max_position_embeddings"),
        type_vocab_size=_int(path, data, "type_vocab_size", default=2),
        layer_norm_eps=float(eps),
        activation=ACTIVATIONS[act],
    )
    if config.hidden_size % config.num_heads:
        raise ModelFileError(f"{path}: hidden_size {config.hidden_size} is not a multiple of "
                             f"num_attention_heads {config.num_heads}")
    if config.head_dim % 4:
        raise ModelFileError(f"{path}: the head width hidden_size / num_attention_heads = "
                             f"{config.head_dim} is not a multiple of 4, which vkumd's "
                             "attention kernel needs")
    return config


def read_sentence_config(root: Path, bert: BertConfig) -> SentenceConfig:
    """Parse the sentence-transformers files of a model directory.

    Args:
        root: the model directory (holding ``modules.json``).
        bert: the encoder's config (the window may not exceed its positions).

    Raises:
        ModelFileError: a missing or corrupt file, a module other than Transformer, Pooling
            and Normalize, a pooling mode other than mean, cls and mean_sqrt_len (or several
            at once), or a window the position table cannot cover.
    """
    path = root / "modules.json"
    modules = read_json(path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelFileError(f"{path}: expected a JSON list of module objects")
    types = [m.get("type") for m in modules]
    if not types or types[0] != _ST + "Transformer":
        raise ModelFileError(f"{path}: the first module is {types[:1]!r}; it must be "
                             f"{_ST}Transformer")
    pooling_path: Path | None = None
    normalize = False
    for module in modules[1:]:
        kind = module.get("type")
        if kind == _ST + "Pooling" and pooling_path is None:
            pooling_path = _inside(root, path, module.get("path", "1_Pooling")) / "config.json"
        elif kind == _ST + "Normalize" and not normalize and pooling_path is not None:
            normalize = True
        else:
            raise ModelFileError(f"{path}: module type {kind!r} (after {types[:-1]}) is not "
                                 "supported; vkumd runs Transformer -> Pooling [-> Normalize]")
    if pooling_path is None:
        raise ModelFileError(f"{path}: no {_ST}Pooling module; a sentence encoder needs one")
    return SentenceConfig(_pooling_mode(pooling_path, bert), normalize,
                          _window(root / "sentence_bert_config.json", bert))


def _inside(root: Path, path: Path, relative: object) -> Path:
    """``root / relative``, refused unless it is a relative path that stays inside ``root``
    (a model directory's files must not name files elsewhere)."""
    if not isinstance(relative, str) or not relative:
        raise ModelFileError(f"{path}: module path {str(relative)[:100]!r} is not a relative "
                             "path inside the model directory")
    target = (root / relative).resolve()
    if Path(relative).is_absolute() or not target.is_relative_to(root.resolve()):
        raise ModelFileError(f"{path}: module path {relative[:200]!r} leads outside the model "
                             f"directory {root}; vkumd reads only files inside it")
    return root / relative


def _pooling_mode(path: Path, bert: BertConfig) -> str:
    data = _object(path)
    dim = data.get("word_embedding_dimension", bert.hidden_size)
    if dim != bert.hidden_size:
        raise ModelFileError(f"{path}: field 'word_embedding_dimension' = {dim!r} but "
                             f"config.json's hidden_size is {bert.hidden_size}")
    supported = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
                 "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len"}
    chosen = [field for field, value in data.items()
              if field.startswith("pooling_mode_") and value is True]
    unknown = [field for field in chosen if field not in supported]
    if unknown or len(chosen) != 1:
        raise ModelFileError(f"{path}: pooling modes {chosen or 'none'} are set; vkumd needs "
                             "exactly one of " + ", ".join(supported))
    return supported[chosen[0]]


def _window(path: Path, bert: BertConfig) -> int:
    length = _int(path, _object(path), "max_seq_length")
    if length > bert.max_positions:
        raise ModelFileError(f"{path}: field 'max_seq_length' = {length} is past config.json's "
                             f"max_position_embeddings {bert.max_positions}")
    return length

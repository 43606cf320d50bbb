"""The fuzzer's seed inputs: small ONNX graphs and a tiny BERT sentence-encoder directory.

The ONNX seeds are a MatMul+Add and the frontend tests' models (``onnx_models.py``: most
device operators in a BERT-like chain; the generated-kernel ops with ConstantOfShape and
Expand). The model directory is a two-layer BERT of width 16 with a 40-token WordPiece
vocabulary, written here (``tokenizers`` builds its tokenizer), so loading it takes a
fraction of a second.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "frontends"))

WORDS = ["hello", "world", "the", "a", "model", "file", "##s", "##ing"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [chr(c) for c in range(97, 123)] + WORDS
SENTENCES = ["hello world", "the model files", "a b c d e f g h i j k l m n o p q r s t"]
CONFIG = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
          "hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2,
          "num_hidden_layers": 2, "max_position_embeddings": 24, "type_vocab_size": 2,
          "vocab_size": len(VOCAB), "layer_norm_eps": 1e-12,
          "position_embedding_type": "absolute", "pad_token_id": 0}
_ST = "sentence_transformers.models."
MODULES = [{"idx": 0, "name": "0", "path": "", "type": _ST + "Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": _ST + "Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": _ST + "Normalize"}]
POOLING = {"word_embedding_dimension": 16, "pooling_mode_cls_token": False,
           "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
           "pooling_mode_mean_sqrt_len_tokens": False}
WINDOW = 16


def onnx_seeds() -> dict[str, object]:
    """The seed ``ModelProto`` s by name."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper
    from onnx_models import Net, device_model, ir_only_model

    n = Net(3)
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", 4])
    y = n.op("Add", n.op("MatMul", "x", n.weight(4, 3)), n.weight(3))
    seeds: dict[str, onnx.ModelProto] = {"matmul_add": n.model([x], [y])}
    seeds["device_model"] = device_model()
    seeds["ir_only_model"] = ir_only_model()
    return seeds


def _tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    c = CONFIG
    h, f = c["hidden_size"], c["intermediate_size"]

    def w(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype("<f4")

    out = {"embeddings.word_embeddings.weight": w(c["vocab_size"], h),
           "embeddings.position_embeddings.weight": w(c["max_position_embeddings"], h),
           "embeddings.token_type_embeddings.weight": w(c["type_vocab_size"], h),
           "embeddings.LayerNorm.weight": 1 + w(h, scale=0.1),
           "embeddings.LayerNorm.bias": w(h, scale=0.1)}
    linear = {"attention.self.query": (h, h), "attention.self.key": (h, h),
              "attention.self.value": (h, h), "attention.output.dense": (h, h),
              "intermediate.dense": (f, h), "output.dense": (h, f)}
    for i in range(c["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for name, shape in linear.items():
            out[p + name + ".weight"] = w(*shape)
            out[p + name + ".bias"] = w(shape[0], scale=0.1)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            out[p + norm + ".weight"] = 1 + w(h, scale=0.1)
            out[p + norm + ".bias"] = w(h, scale=0.1)
    return out


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """A safetensors file of float32 tensors, laid out in name order."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    parts, offset = [], 0
    for name in sorted(tensors):
        data = tensors[name].astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        parts.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(parts)


def tokenizer_json() -> str:
    """A BERT WordPiece tokenizer over :data:`VOCAB`, serialized by ``tokenizers``."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    tok = Tokenizer(WordPiece({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    return tok.to_str()


def write_tiny_model(root: Path, seed: int = 0) -> dict[str, bytes]:
    """Write the tiny sentence-encoder directory into ``root``.

    Returns:
        Each file's bytes by relative path (the mutators start from these).
    """
    files = {
        "config.json": json.dumps(CONFIG, indent=2).encode(),
        "model.safetensors": safetensors_bytes(_tensors(np.random.default_rng(seed))),
        "tokenizer.json": tokenizer_json().encode(),
        "modules.json": json.dumps(MODULES).encode(),
        "1_Pooling/config.json": json.dumps(POOLING).encode(),
        "sentence_bert_config.json": json.dumps({"max_seq_length": WINDOW}).encode(),
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files

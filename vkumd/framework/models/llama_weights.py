"""A Llama model's weights on the host, as stored: quantized blocks stay blocks.

Names (the same for both sources): ``embed``, ``norm``, ``output`` (absent when the head is
tied to the embedding), and per layer ``layers.{i}.`` + ``attn_norm``, ``q``, ``k``, ``v``,
``o``, ``ffn_norm``, ``gate``, ``up``, ``down``. A matrix is ``[out_features, in_features]``.
Nothing is permuted: GGUF's query/key rows are in adjacent-pair RoPE order, Hugging Face's
in halves order, as :attr:`LlamaConfig.rope_pairs` says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vkumd.framework.models.errors import ModelFileError
from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.models.gguf_quant import FLOAT_QTYPES, QTYPES, dequantize, row_bytes
from vkumd.framework.models.llama_config import LlamaConfig
from vkumd.framework.models.safetensors import SafetensorsFile

GGUF_NAMES = {"embed": "token_embd.weight", "norm": "output_norm.weight",
              "output": "output.weight", "attn_norm": "attn_norm.weight",
              "q": "attn_q.weight", "k": "attn_k.weight", "v": "attn_v.weight",
              "o": "attn_output.weight", "ffn_norm": "ffn_norm.weight",
              "gate": "ffn_gate.weight", "up": "ffn_up.weight", "down": "ffn_down.weight"}
HF_NAMES = {"embed": "model.embed_tokens.weight", "norm": "model.norm.weight",
            "output": "lm_head.weight", "attn_norm": "input_layernorm.weight",
            "q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight",
            "v": "self_attn.v_proj.weight", "o": "self_attn.o_proj.weight",
            "ffn_norm": "post_attention_layernorm.weight", "gate": "mlp.gate_proj.weight",
            "up": "mlp.up_proj.weight", "down": "mlp.down_proj.weight"}


@dataclass(frozen=True)
class HostWeight:
    """One weight as stored.

    Attributes:
        qtype: ``F32``, ``F16``, ``Q8_0``, ``Q4_0`` or ``Q4_1`` (BF16 is widened to F32 on
            load: exact, and one float type fewer for the device).
        shape: the logical shape: ``(N, K)`` for a matrix, ``(K,)`` for a norm.
        data: for a ``Q*`` type ``uint8 [N, row_bytes]`` blocks; else the float array
            (float32 or float16) of ``shape``.
    """

    qtype: str
    shape: tuple[int, ...]
    data: np.ndarray

    def dequantize(self) -> np.ndarray:
        """The values as a new float32 array of :attr:`shape`."""
        k = self.shape[-1]
        rows = self.data.reshape(-1, row_bytes(self.qtype, k) if self.qtype not in
                                 FLOAT_QTYPES else k)
        return dequantize(rows, self.qtype, k).reshape(self.shape)


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every weight's name and shape for ``config``."""
    d, f = config.hidden_size, config.intermediate_size
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    out: dict[str, tuple[int, ...]] = {"embed": (config.vocab_size, d), "norm": (d,)}
    if not config.tie_embeddings:
        out["output"] = (config.vocab_size, d)
    for i in range(config.num_layers):
        out.update({f"layers.{i}.attn_norm": (d,), f"layers.{i}.q": (q, d),
                    f"layers.{i}.k": (kv, d), f"layers.{i}.v": (kv, d),
                    f"layers.{i}.o": (d, q), f"layers.{i}.ffn_norm": (d,),
                    f"layers.{i}.gate": (f, d), f"layers.{i}.up": (f, d),
                    f"layers.{i}.down": (d, f)})
    return out


def _file_name(name: str, table: dict[str, str], layer: str) -> str:
    if name.startswith("layers."):
        _, i, short = name.split(".")
        return f"{layer}.{i}.{table[short]}"
    return table[name]


def _check(source: str, config: LlamaConfig, present: dict[str, tuple[int, ...]],
           table: dict[str, str], layer: str) -> dict[str, tuple[int, ...]]:
    shapes = expected_shapes(config)
    missing = [_file_name(n, table, layer) for n in shapes
               if _file_name(n, table, layer) not in present]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ModelFileError(f"{source}: the model needs tensors it does not have: "
                             f"{', '.join(missing[:5])}{more}")
    for name, shape in shapes.items():
        got = present[_file_name(name, table, layer)]
        if tuple(got) != shape:
            raise ModelFileError(f"{source}: tensor {_file_name(name, table, layer)!r} has "
                                 f"shape {list(got)}; the config needs {list(shape)}")
    return shapes


def load_gguf_weights(gguf: GGUFFile, config: LlamaConfig) -> dict[str, HostWeight]:
    """Every weight of a Llama GGUF file, kept in its storage type.

    Args:
        gguf: the open file.
        config: its config (:func:`config_from_gguf`).

    Returns:
        Weight name -> :class:`HostWeight`.

    Raises:
        ModelFileError: a tensor is missing or has the wrong shape (the message names it),
            or a norm is quantized.
        GGUFError: the file shrank since it was opened.
    """
    present = {n: t.shape for n, t in gguf.tensors.items()}
    shapes = _check(str(gguf.path), config, present, GGUF_NAMES, "blk")
    out: dict[str, HostWeight] = {}
    for name, shape in shapes.items():
        tname = _file_name(name, GGUF_NAMES, "blk")
        qtype = gguf.tensors[tname].qtype
        if len(shape) == 1 and qtype not in FLOAT_QTYPES:
            raise ModelFileError(f"{gguf.path}: norm {tname!r} is stored as {qtype}; norms "
                                 "must be F32, F16 or BF16")
        data = gguf.raw(tname)
        if qtype == "BF16":
            qtype, data = "F32", dequantize(data.reshape(-1, shape[-1]), "BF16",
                                            shape[-1]).reshape(shape)
        out[name] = HostWeight(qtype, shape, data)
    return out


def load_hf_weights(path: str | os.PathLike[str], config: LlamaConfig
                    ) -> dict[str, HostWeight]:
    """Every weight of a Hugging Face Llama directory (``model.safetensors``) as float32.

    Args:
        path: the model directory.
        config: its config (:func:`config_from_hf`).

    Returns:
        Weight name -> :class:`HostWeight` (``F32``).

    Raises:
        ModelFileError: the weights file is missing (or sharded), or a tensor is missing or
            has the wrong shape; SafetensorsError for a corrupt file.
    """
    file = Path(path) / "model.safetensors"
    if not file.exists() and (Path(path) / "model.safetensors.index.json").exists():
        raise ModelFileError(f"{path}: sharded safetensors are not supported yet; merge "
                             "the shards into model.safetensors")
    with SafetensorsFile(file) as st:
        present = {n: t.shape for n, t in st.tensors.items()}
        shapes = _check(str(file), config, present, HF_NAMES, "model.layers")
        return {name: HostWeight("F32", shape, st.read(_file_name(name, HF_NAMES,
                                                                  "model.layers")))
                for name, shape in shapes.items()}


__all__ = ["GGUF_NAMES", "HF_NAMES", "QTYPES", "HostWeight", "expected_shapes",
           "load_gguf_weights", "load_hf_weights"]

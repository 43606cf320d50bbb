"""Plain-torch models for the torch frontend tests: an MLP, a transformer block and a BERT
encoder (all-MiniLM-L6-v2's architecture, written out; transformers is not needed)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vkumd.testing.numerics import rel_error


class MLP(nn.Module):
    """Linear -> GELU -> Linear -> ReLU -> Linear."""

    def __init__(self, d: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(d, hidden), nn.Linear(hidden, d), nn.Linear(d, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.relu(self.fc2(F.gelu(self.fc1(x)))))


class Block(nn.Module):
    """A post-norm transformer encoder block over [batch, seq, d]."""

    def __init__(self, d: int = 64, heads: int = 4, ffn: int = 128, eps: float = 1e-5) -> None:
        super().__init__()
        self.heads, self.eps = heads, eps
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return x.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, s, d = x.shape
        a = F.scaled_dot_product_attention(self._split(self.q(x)), self._split(self.k(x)),
                                           self._split(self.v(x)), attn_mask=mask)
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, s, d)))
        return self.ln2(x + self.down(F.gelu(self.up(x))))


class Bert(nn.Module):
    """BertModel's encoder with mean pooling, from a config and Hugging Face weights."""

    def __init__(self, config: object, weights: dict[str, object]) -> None:
        super().__init__()
        c = config
        h, eps = c.hidden_size, c.layer_norm_eps
        self.word = nn.Embedding(c.vocab_size, h)
        self.pos = nn.Embedding(c.max_positions, h)
        self.typ = nn.Embedding(c.type_vocab_size, h)
        self.ln = nn.LayerNorm(h, eps=eps)
        self.layers = nn.ModuleList(Block(h, c.num_heads, c.intermediate_size, eps)
                                    for _ in range(c.num_layers))
        names = {"word.weight": "embeddings.word_embeddings.weight",
                 "pos.weight": "embeddings.position_embeddings.weight",
                 "typ.weight": "embeddings.token_type_embeddings.weight",
                 "ln.weight": "embeddings.LayerNorm.weight",
                 "ln.bias": "embeddings.LayerNorm.bias"}
        ours = {"q": "attention.self.query", "k": "attention.self.key",
                "v": "attention.self.value", "o": "attention.output.dense",
                "ln1": "attention.output.LayerNorm", "up": "intermediate.dense",
                "down": "output.dense", "ln2": "output.LayerNorm"}
        for i in range(c.num_layers):
            for mine, theirs in ours.items():
                for p in ("weight", "bias"):
                    names[f"layers.{i}.{mine}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
        state = {k: torch.from_numpy(weights[v].copy()) for k, v in names.items()}
        self.load_state_dict(state)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, s = ids.shape
        positions = torch.arange(s)
        x = self.word(ids) + self.pos(positions) + self.typ.weight[0]  # token type 0
        x = self.ln(x)
        m = mask.to(torch.float32)
        bias = ((1.0 - m) * -10000.0).view(b, 1, 1, s)
        for layer in self.layers:
            x = layer(x, bias)
        pooled = (x * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True)
        return x, pooled


def minilm() -> Bert:
    """The BERT with all-MiniLM-L6-v2's weights (skips when the package is missing)."""
    import pytest

    from vkumd.framework.models.config import read_bert_config
    from vkumd.framework.models.errors import ModelNotFound
    from vkumd.framework.models.loader import find_model, read_weights

    try:
        root = find_model("all-MiniLM-L6-v2")
    except ModelNotFound as exc:
        pytest.skip(str(exc))
    config = read_bert_config(root / "config.json")
    return Bert(config, read_weights(root / "model.safetensors", config)).eval()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative Frobenius error of ``a`` against the reference ``b`` (float64)."""
    return rel_error(a, b, floor=1e-30)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """The smallest row-wise cosine between ``a`` and ``b``."""
    return float(F.cosine_similarity(a.double(), b.double(), dim=-1).min())



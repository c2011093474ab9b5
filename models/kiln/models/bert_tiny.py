"""bert_tiny: a BERT-tiny-like encoder (Devlin et al., 2019; BERT-tiny: Turc et al., 2019, L=2,
H=128, A=2). Inputs three 1x16 int64 tensors, as the model libraries hand them over: token
ids, segment (token type) ids and the padding mask (1 for a token, 0 for padding).

Embeddings: token, learned position (ids built in the model by ``arange``) and segment
embeddings summed, then LayerNorm. Two post-norm encoder layers (x = LayerNorm(x + MHA(x)),
x = LayerNorm(x + FFN(x)), FFN of 4x the width with exact GELU), here at width 32 with 2
heads over a 100-token vocabulary. Padding keys are masked out of every query's attention.
Outputs the final hidden states (1x16x32) and the pooled class token (linear and tanh, 1x32).
Attention through ``F.scaled_dot_product_attention`` or ``nn.MultiheadAttention`` (``kind``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import prepare, seeded
from kiln.models._transformer import SelfAttention

SEED = 43
TOKENS = 16
REAL_TOKENS = 12  # the example's padding mask: 12 tokens, then 4 of padding
FIRST_SEGMENT = 7  # the example's first sentence; the second runs to the end


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, kind: str) -> None:
        super().__init__()
        self.attn = SelfAttention(dim, heads, kind)
        self.norm1 = nn.LayerNorm(dim, eps=1e-12)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x, padding))
        return self.norm2(x + self.fc2(F.gelu(self.fc1(x))))


class Bert(nn.Module):
    def __init__(
        self,
        kind: str = "sdpa",
        vocab: int = 100,
        positions: int = TOKENS,
        dim: int = 32,
        heads: int = 2,
        depth: int = 2,
    ) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(positions, dim)
        self.segment = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList([EncoderLayer(dim, heads, kind) for _ in range(depth)])
        self.pooler = nn.Linear(dim, dim)

    def forward(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.norm(self.token(input_ids) + self.position(positions) + self.segment(token_type_ids))
        padding = attention_mask.bool()
        for layer in self.layers:
            x = layer(x, padding)
        return x, torch.tanh(self.pooler(x[:, 0]))


def example_inputs(vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random token ids (from the current random state), two segments and a padding mask."""
    ids = torch.randint(0, vocab, (1, TOKENS))
    segments = (torch.arange(TOKENS) >= FIRST_SEGMENT).long()[None]
    mask = (torch.arange(TOKENS) < REAL_TOKENS).long()[None]
    return ids, segments, mask


def build(kind: str = "sdpa") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random LayerNorm affine) and one example input."""
    with seeded(SEED):
        model = prepare(Bert(kind))
        return model, example_inputs(model.token.num_embeddings)


ModelUnderTest, ModelInputs = build()

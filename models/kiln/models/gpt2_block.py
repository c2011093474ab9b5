"""gpt2_block: GPT-2-like decoder blocks (Radford et al., 2019). Input 1x16 int64 token ids.

As GPT-2 describes its changes to GPT: token embeddings plus learned position embeddings
(position ids built in the model by ``arange``); pre-norm blocks (LayerNorm, causal
multi-head self-attention, residual add; LayerNorm, MLP of 4x the width with the
tanh-approximate GELU, residual add); a final LayerNorm; logits by the token embedding's
transpose (tied weights). GPT-2 small: width 768, 12 heads, 12 blocks, 50,257 tokens, 1,024
positions; here width 32, 2 heads, 2 blocks, 64 tokens, 16 positions. Outputs 1x16x64
logits. Attention through ``F.scaled_dot_product_attention`` (``is_causal``) or
``nn.MultiheadAttention`` (a ``triu`` mask), ``kind``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import prepare, seeded
from kiln.models._transformer import PreNormBlock

SEED = 45
TOKENS = 16


def tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


class GPT2(nn.Module):
    def __init__(
        self,
        kind: str = "sdpa",
        vocab: int = 64,
        positions: int = TOKENS,
        dim: int = 32,
        heads: int = 2,
        depth: int = 2,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(positions, dim)
        self.blocks = nn.Sequential(*[PreNormBlock(dim, heads, kind, tanh_gelu, causal=True) for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.ln_f(self.blocks(self.wte(input_ids) + self.wpe(positions)))
        return F.linear(x, self.wte.weight)


def build(kind: str = "sdpa") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random LayerNorm affine) and random token ids."""
    with seeded(SEED):
        model = prepare(GPT2(kind))
        return model, (torch.randint(0, model.wte.num_embeddings, (1, TOKENS)),)


ModelUnderTest, ModelInputs = build()

"""kwt: a small Keyword Transformer (Berg et al., 2021). Input 1x49x10: 49 frames of 10 MFCCs.

Each time frame is a token: a linear projection of its 10 MFCCs to width 32; a learned
class token concatenated in front; a learned positional embedding (an nn.Parameter)
added; two post-norm encoder blocks, the paper's choice (x = LayerNorm(x + MHA(x)),
x = LayerNorm(x + MLP(x)), MLP of width 64 with GELU, dropout after the attention and in
the MLP); the classifier on the class token. Attention (``kind``): by default torch's
nn.MultiheadAttention (2 heads, batch first) as users call it, weights returned and ignored
(PyTorch's unfused path: bmm and softmax); the transformer zoo's ``kwt_sdpa`` and
``kwt_mha`` write it through ``F.scaled_dot_product_attention`` and through
nn.MultiheadAttention without weights (the fused path), see kiln.models._transformer.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded
from kiln.models._transformer import SelfAttention

SEED = 28
INPUT_SHAPE = (1, 49, 10)
CLASSES = 12
DIM = 32
HEADS = 2
MLP = 64
DEPTH = 2
DROPOUT = 0.1
WEIGHTS = "weights"  # nn.MultiheadAttention returning its weights


class PostNormBlock(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, kind: str) -> None:
        super().__init__()
        if kind == WEIGHTS:
            self.attention = nn.MultiheadAttention(dim, heads, dropout=DROPOUT, batch_first=True)
        else:
            self.attention = SelfAttention(dim, heads, kind)
        self.kind = kind
        self.dropout = nn.Dropout(DROPOUT)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(DROPOUT), nn.Linear(hidden, dim), nn.Dropout(DROPOUT)
        )
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attended = self.attention(x, x, x)[0] if self.kind == WEIGHTS else self.attention(x)
        x = self.norm1(x + self.dropout(attended))
        return self.norm2(x + self.mlp(x))


class KeywordTransformer(nn.Module):
    def __init__(self, classes: int = CLASSES, kind: str = WEIGHTS) -> None:
        super().__init__()
        frames, coefficients = INPUT_SHAPE[1:]
        self.to_tokens = nn.Linear(coefficients, DIM)
        self.class_token = nn.Parameter(0.02 * torch.randn(1, 1, DIM))
        self.positions = nn.Parameter(0.02 * torch.randn(1, frames + 1, DIM))
        self.blocks = nn.ModuleList([PostNormBlock(DIM, HEADS, MLP, kind) for _ in range(DEPTH)])
        self.head = nn.Linear(DIM, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.to_tokens(x)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.positions
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, 0])


def build(kind: str = WEIGHTS) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random LayerNorm affine) and one example input."""
    return build_seeded(SEED, lambda: KeywordTransformer(kind=kind), INPUT_SHAPE, signed=True)


ModelUnderTest, ModelInputs = build()

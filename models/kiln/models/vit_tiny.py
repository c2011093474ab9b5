"""vit_tiny: a small Vision Transformer (Dosovitskiy et al., 2021). Input 1x3x32x32.

Patch embedding by an 8x8 stride-8 convolution (16 patches of width 32), flattened and
transposed to tokens; a learned class token concatenated in front; a learned positional
embedding (an nn.Parameter) added; two pre-norm encoder blocks (LayerNorm, multi-head
self-attention with 2 heads, residual add; LayerNorm, MLP of width 64 with exact GELU,
residual add); a final LayerNorm and the classifier on the class token. Attention is
written by hand as in timm's ViT: one linear for q, k and v, reshape and permute to
heads, unbind, q @ k^T times 1/sqrt(head width), softmax, @ v, transpose back.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import build_seeded

SEED = 27
INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 10
PATCH = 8
DIM = 32
HEADS = 2
MLP = 64
DEPTH = 2
TOKENS = (INPUT_SHAPE[2] // PATCH) * (INPUT_SHAPE[3] // PATCH) + 1  # the patches and the class token


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attention = (q @ k.transpose(-2, -1)) * self.scale
        attention = attention.softmax(dim=-1)
        x = (attention @ v).transpose(1, 2).reshape(batch, tokens, dim)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(INPUT_SHAPE[1], DIM, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, DIM))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, TOKENS, DIM))
        self.blocks = nn.Sequential(*[Block(DIM, HEADS, MLP) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = self.norm(self.blocks(x + self.pos_embed))
        return self.head(x[:, 0])


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random LayerNorm affine) and one example input."""
    return build_seeded(SEED, VisionTransformer, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

"""deit_tiny: a DeiT-tiny-like Vision Transformer (Touvron et al., 2021). Input 1x3x32x32.

DeiT-Ti is ViT-B's architecture at width 192 with 3 heads of 64, 12 blocks and an MLP of 4x
the width, on 16x16 patches. Here: 8x8 patches by an 8x8 stride-8 convolution (16 tokens
of width 48), flattened and transposed to tokens; a learned class token concatenated in
front; learned positions (an nn.Parameter) added; two pre-norm blocks (LayerNorm,
multi-head self-attention with 3 heads of 16, residual add; LayerNorm, MLP of width 192
with exact GELU, residual add); a final LayerNorm; the classifier on the class token.
Attention through ``F.scaled_dot_product_attention`` or ``nn.MultiheadAttention``
(``kind``, see kiln.models._transformer).
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded
from kiln.models._transformer import PreNormBlock

SEED = 40
INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 10


class DeiT(nn.Module):
    def __init__(
        self,
        kind: str = "sdpa",
        image: int = INPUT_SHAPE[2],
        patch: int = 8,
        dim: int = 48,
        heads: int = 3,
        depth: int = 2,
        classes: int = CLASSES,
    ) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, (image // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[PreNormBlock(dim, heads, kind, eps=1e-6) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def build(kind: str = "sdpa") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random LayerNorm affine) and one example image."""
    return build_seeded(SEED, lambda: DeiT(kind), INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

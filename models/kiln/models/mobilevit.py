"""mobilevit: a MobileViT-like convolution and transformer hybrid (Mehta and Rastegari, 2022).
Input 1x3x32x32.

A stem (3x3 stride-2 convolution to 16 channels, BatchNorm, SiLU); a MobileNetV2 block
(1x1 expansion to 32, 3x3 stride-2 depthwise, 1x1 projection to 24, BatchNorm after each,
SiLU after the first two); a MobileViT block on the 8x8 map, as the paper describes it:
local representation (3x3 convolution with BatchNorm and SiLU, 1x1 convolution to width
32); unfold into 2x2 patches, X_U in R^{P x N x d} with P = 4 pixels per patch and
N = 16 patches, by reshape and transpose; two pre-norm transformer layers (2 heads, MLP of
width 64 with SiLU) attending across the patches at each pixel position; a LayerNorm; fold
back to the 8x8 map; 1x1 convolution to 24 with BatchNorm and SiLU; concatenation with the
block's input and a 3x3 fusion convolution (BatchNorm, SiLU). Then a 1x1 convolution to 64,
global average pooling and the classifier. Attention through
``F.scaled_dot_product_attention`` or ``nn.MultiheadAttention`` (``kind``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import build_seeded
from kiln.models._transformer import PreNormBlock

SEED = 41
INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 10
PATCH = 2  # pixels per side of a patch


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([nn.SiLU()] if act else []))


def unfold(x: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, d, H, W] -> [B * P, N, d]: pixel p of every patch (P = patch^2 of them, row-major in
    the patch) is one sequence of the N patches (row-major in the map)."""
    batch, dim, height, width = x.shape
    rows, cols = height // patch, width // patch
    x = x.reshape(batch * dim * rows, patch, cols, patch).transpose(1, 2)
    x = x.reshape(batch, dim, rows * cols, patch * patch).transpose(1, 3)
    return x.reshape(batch * patch * patch, rows * cols, dim)


def fold(x: torch.Tensor, patch: int, height: int, width: int) -> torch.Tensor:
    """The inverse of `unfold`: [B * P, N, d] -> [B, d, H, W]."""
    pixels, patches, dim = x.shape
    batch, rows, cols = pixels // (patch * patch), height // patch, width // patch
    x = x.reshape(batch, patch * patch, patches, dim).transpose(1, 3)
    x = x.reshape(batch * dim * rows, cols, patch, patch).transpose(1, 2)
    return x.reshape(batch, dim, height, width)


class MobileViTBlock(nn.Module):
    def __init__(self, channels: int, dim: int, heads: int, hidden: int, depth: int, kind: str) -> None:
        super().__init__()
        self.local = nn.Sequential(conv_bn(channels, channels, 3), nn.Conv2d(channels, dim, 1, bias=False))
        self.layers = nn.Sequential(*[PreNormBlock(dim, heads, kind, F.silu, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.project = conv_bn(dim, channels, 1)
        self.fuse = conv_bn(2 * channels, channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        y = self.norm(self.layers(unfold(self.local(x), PATCH)))
        y = self.project(fold(y, PATCH, height, width))
        return self.fuse(torch.cat((x, y), dim=1))


class MobileViT(nn.Module):
    def __init__(self, kind: str = "sdpa", classes: int = CLASSES) -> None:
        super().__init__()
        self.stem = conv_bn(3, 16, 3, stride=2)
        self.mv2 = nn.Sequential(conv_bn(16, 32, 1), conv_bn(32, 32, 3, 2, groups=32), conv_bn(32, 24, 1, act=False))
        self.mvit = MobileViTBlock(24, 32, 2, 64, 2, kind)
        self.head = conv_bn(24, 64, 1)
        self.classifier = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.mvit(self.mv2(self.stem(x))))
        return self.classifier(F.adaptive_avg_pool2d(x, 1).flatten(1))


def build(kind: str = "sdpa") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BatchNorm and LayerNorm) and one example image."""
    return build_seeded(SEED, lambda: MobileViT(kind), INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

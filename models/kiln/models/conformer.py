"""conformer: Conformer blocks (Gulati et al., 2020) on filterbank frames. Input 1x32x20: 32 frames of
20 log-mel features.

A linear projection of each frame to width 32; two Conformer blocks as the paper's figure 1
draws them: x + 1/2 FFN(x); + multi-head self-attention (pre-norm, 2 heads; without the
paper's relative positional encoding); + convolution module; + 1/2 FFN; a final
LayerNorm. The feed-forward module: LayerNorm, linear to 4x the width, Swish (SiLU), linear
back (dropout, identity in inference, left out). The convolution module (figure 2):
LayerNorm, pointwise Conv1d to twice the width, GLU over channels, depthwise Conv1d (kernel
15, same padding), BatchNorm, Swish, pointwise Conv1d. Then a linear per frame to 16 output
tokens (a CTC head's shape). Attention through ``F.scaled_dot_product_attention`` or
``nn.MultiheadAttention`` (``kind``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import build_seeded
from kiln.models._transformer import SelfAttention

SEED = 42
INPUT_SHAPE = (1, 32, 20)
TOKENS = 16


class FeedForward(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(self.norm(x))))


class ConvolutionModule(nn.Module):
    def __init__(self, dim: int, kernel: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pointwise1 = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.pointwise2 = nn.Conv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.glu(self.pointwise1(self.norm(x).transpose(1, 2)), dim=1)
        x = self.pointwise2(F.silu(self.bn(self.depthwise(x))))
        return x.transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, kernel: int, kind: str) -> None:
        super().__init__()
        self.ff1 = FeedForward(dim)
        self.attn_norm = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, kind)
        self.conv = ConvolutionModule(dim, kernel)
        self.ff2 = FeedForward(dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn(self.attn_norm(x))
        x = x + self.conv(x)
        return self.norm(x + 0.5 * self.ff2(x))


class Conformer(nn.Module):
    def __init__(self, kind: str = "sdpa", dim: int = 32, heads: int = 2, kernel: int = 15, depth: int = 2) -> None:
        super().__init__()
        self.project = nn.Linear(INPUT_SHAPE[2], dim)
        self.blocks = nn.Sequential(*[ConformerBlock(dim, heads, kernel, kind) for _ in range(depth)])
        self.head = nn.Linear(dim, TOKENS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.project(x)))


def build(kind: str = "sdpa") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BatchNorm and LayerNorm) and one example
    input of standard normal features."""
    return build_seeded(SEED, lambda: Conformer(kind), INPUT_SHAPE, signed=True)


ModelUnderTest, ModelInputs = build()

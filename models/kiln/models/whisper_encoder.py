"""whisper_encoder: a Whisper-tiny-like audio encoder (Radford et al., 2022). Input 1x16x32: 16
log-mel channels by 32 frames.

As the paper's figure 1 draws the encoder: two Conv1d layers with kernel 3 and GELU, the
second of stride 2 (32 frames to 16 positions); sinusoidal positions (a fixed buffer: sines
then cosines over geometrically spaced timescales up to 10,000) added; pre-norm residual
attention blocks (LayerNorm, self-attention, residual add; LayerNorm, MLP of 4x the width
with exact GELU, residual add); a final LayerNorm. Whisper-tiny has 80 mel channels, width
384, 6 heads and 4 blocks; here 16 channels, width 32, 2 heads, 2 blocks. Outputs the
encoded audio, 1x16x32. Attention through ``F.scaled_dot_product_attention`` or
``nn.MultiheadAttention`` (``kind``).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import build_seeded
from kiln.models._transformer import PreNormBlock

SEED = 44
INPUT_SHAPE = (1, 16, 32)
MAX_TIMESCALE = 10_000


def sinusoids(length: int, channels: int) -> torch.Tensor:
    """[length, channels]: position t's sin(t / s_i) for channels 0..channels/2-1, then cos(t / s_i),
    the timescales s_i geometric from 1 to MAX_TIMESCALE."""
    increment = math.log(MAX_TIMESCALE) / (channels // 2 - 1)
    inverse = torch.exp(-increment * torch.arange(channels // 2))
    angles = torch.arange(length)[:, None] * inverse[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class AudioEncoder(nn.Module):
    def __init__(self, kind: str = "sdpa", dim: int = 32, heads: int = 2, depth: int = 2) -> None:
        super().__init__()
        mels, frames = INPUT_SHAPE[1:]
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        self.register_buffer("positions", sinusoids(frames // 2, dim))
        self.blocks = nn.Sequential(*[PreNormBlock(dim, heads, kind) for _ in range(depth)])
        self.ln_post = nn.LayerNorm(dim)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        return self.ln_post(self.blocks(x + self.positions))


def build(kind: str = "sdpa") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random LayerNorm affine) and one example
    input of standard normal features."""
    return build_seeded(SEED, lambda: AudioEncoder(kind), INPUT_SHAPE, signed=True)


ModelUnderTest, ModelInputs = build()

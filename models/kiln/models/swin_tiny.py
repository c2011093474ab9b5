"""swin_tiny: Swin-Transformer-like stages (Liu et al., 2021). Input 1x3x32x32.

As the paper and its reference implementation structure them: a patch embedding (a 4x4
stride-4 convolution, flattened to tokens, LayerNorm); stage 1 on the 8x8 token map, width 16,
2 heads: a block of window attention (W-MSA) and a block of shifted-window attention
(SW-MSA); patch merging (the four 2x2 neighbours taken by strided slices, concatenated on
channels, LayerNorm, a bias-free linear from 4C to 2C); stage 2 on the 4x4 map, width 32, 4
heads, one block (the window covers the whole map, so it is not shifted); a final LayerNorm,
average pooling over tokens and the classifier.

Each block: x + W-MSA(LayerNorm(x)), then x + MLP(LayerNorm(x)) with an MLP of 4x the width
and exact GELU. Window attention partitions the [B, H, W, C] map into 4x4 windows by view
and permute (and reverses it the same way), computes q.k^T per window and head with a scaled
q, adds a relative position bias: a learned table of (2M - 1)^2 entries per head indexed by
a registered index buffer (``table[index.view(-1)]``, viewed and permuted to [heads, N, N]),
adds the shifted window's mask, softmax, then the values and an output projection. The
shifted block rolls the map by -M/2 with ``torch.roll`` before partitioning and by M/2 after;
its mask is built in forward as in torchvision's implementation: an image mask of region
labels filled by slice assignment, partitioned into windows, labels compared pairwise and
``masked_fill`` with -100 where they differ. The bias table is drawn at a standard deviation
of 0.5 (the reference initialises it at 0.02) so the biases move the scores as trained ones do.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import build_seeded

SEED = 47
INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 10


def window_partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """[B, H, W, C] -> [B * windows, window, window, C], windows row-major."""
    batch, height, width, channels = x.shape
    x = x.view(batch, height // window, window, width // window, window, channels)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window, window, channels)


def window_reverse(windows: torch.Tensor, window: int, height: int, width: int) -> torch.Tensor:
    """[B * windows, window, window, C] -> [B, H, W, C], window_partition's inverse."""
    batch = int(windows.shape[0] / (height * width / window / window))
    x = windows.view(batch, height // window, width // window, window, window, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(batch, height, width, -1)


def relative_position_index(window: int) -> torch.Tensor:
    """[N, N] with N = window^2: for tokens i, j of a window, the row of the bias table of their
    offset (dy, dx), each in [-(window - 1), window - 1], as (dy + window - 1) * (2 window - 1)
    + dx + window - 1."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    relative[:, :, 0] += window - 1
    relative[:, :, 1] += window - 1
    relative[:, :, 0] *= 2 * window - 1
    return relative.sum(-1)


class WindowAttention(nn.Module):
    def __init__(self, dim: int, window: int, heads: int) -> None:
        super().__init__()
        self.window, self.heads = window, heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(0.5 * torch.randn((2 * window - 1) ** 2, heads))
        self.register_buffer("relative_position_index", relative_position_index(window))
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        windows, tokens, channels = x.shape
        qkv = self.qkv(x).reshape(windows, tokens, 3, self.heads, channels // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        bias = bias.view(tokens, tokens, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            count = mask.shape[0]
            attn = attn.view(windows // count, count, self.heads, tokens, tokens) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, tokens, tokens)
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(windows, tokens, channels))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SwinBlock(nn.Module):
    def __init__(self, dim: int, resolution: int, heads: int, window: int, shift: int) -> None:
        super().__init__()
        if resolution <= window:  # one window covers the map: nothing to shift
            window, shift = resolution, 0
        self.resolution, self.window, self.shift = resolution, window, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)

    def shifted_window_mask(self, x: torch.Tensor) -> torch.Tensor:
        """[windows, N, N]: 0 where two tokens of a window came from the same region of the
        unrolled map, -100 where the roll brought them together from different regions."""
        size, window, shift = self.resolution, self.window, self.shift
        image = x.new_zeros((1, size, size, 1))
        slices = ((0, size - window), (size - window, size - shift), (size - shift, size))
        label = 0
        for h in slices:
            for w in slices:
                image[:, h[0] : h[1], w[0] : w[1], :] = label
                label += 1
        labels = window_partition(image, window).view(-1, window * window)
        mask = labels.unsqueeze(1) - labels.unsqueeze(2)
        return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, channels = x.shape
        size, window, shift = self.resolution, self.window, self.shift
        shortcut = x
        x = self.norm1(x).view(batch, size, size, channels)
        mask = None
        if shift:
            x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
            mask = self.shifted_window_mask(x)
        windows = window_partition(x, window).view(-1, window * window, channels)
        windows = self.attn(windows, mask).view(-1, window, window, channels)
        x = window_reverse(windows, window, size, size)
        if shift:
            x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
        x = shortcut + x.view(batch, tokens, channels)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim: int, resolution: int) -> None:
        super().__init__()
        self.resolution = resolution
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, channels = x.shape
        x = x.view(batch, self.resolution, self.resolution, channels)
        x0 = x[:, 0::2, 0::2, :]
        x1 = x[:, 1::2, 0::2, :]
        x2 = x[:, 0::2, 1::2, :]
        x3 = x[:, 1::2, 1::2, :]
        x = torch.cat([x0, x1, x2, x3], -1).view(batch, -1, 4 * channels)
        return self.reduction(self.norm(x))


class Swin(nn.Module):
    def __init__(
        self, image: int = INPUT_SHAPE[2], patch: int = 4, dim: int = 16, window: int = 4, classes: int = CLASSES
    ) -> None:
        super().__init__()
        size = image // patch
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.patch_norm = nn.LayerNorm(dim)
        self.stage1 = nn.Sequential(
            SwinBlock(dim, size, 2, window, shift=0), SwinBlock(dim, size, 2, window, shift=window // 2)
        )
        self.merge = PatchMerging(dim, size)
        self.stage2 = nn.Sequential(SwinBlock(2 * dim, size // 2, 4, window, shift=window // 2))
        self.norm = nn.LayerNorm(2 * dim)
        self.head = nn.Linear(2 * dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_norm(self.patch_embed(x).flatten(2).transpose(1, 2))
        x = self.stage2(self.merge(self.stage1(x)))
        x = F.adaptive_avg_pool1d(self.norm(x).transpose(1, 2), 1).flatten(1)
        return self.head(x)


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random LayerNorm affine) and one example image."""
    return build_seeded(SEED, Swin, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

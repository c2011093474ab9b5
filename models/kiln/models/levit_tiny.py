"""levit_tiny: a LeViT-like convolution and attention hybrid (Graham et al., 2021). Input 1x3x64x64.

As the paper and its reference implementation structure it: a stem of four 3x3 stride-2
convolutions, each followed by BatchNorm and all but the last by Hardswish (64x64 -> a 4x4
map, width 32), flattened to 16 tokens; stage 1 (width 32): a residual attention block and a
residual MLP block; a subsampling attention to stage 2 (2x2 map, width 48) followed by a
residual MLP block; stage 2's residual attention and MLP blocks; the mean over tokens; a
classifier and a distillation classifier (each BatchNorm1d then linear), averaged at
inference.

Every linear layer is LeViT's Linear_BN: a bias-free linear then BatchNorm1d applied to the
tokens flattened to [B * N, C] and reshaped back. Attention: q, k, v from one Linear_BN,
split per head into key, key and value widths (values 2x the key width), q.k^T scaled, plus
a learned attention bias per head and offset: ``attention_biases[:, attention_bias_idxs]``,
with the index a registered buffer of each query/key pair's (|dy|, |dx|) offset class; as in
the reference, eval mode caches that gather as a plain tensor attribute (``ab``). Softmax,
the values, then Hardswish and an output Linear_BN. The subsampling attention takes its
queries from a strided subset of the tokens (the map viewed as [B, H, W, C], every second row
and column) through their own Linear_BN, and its keys and values from all tokens; its biases
index the offsets between the strided query positions and all key positions. MLP blocks:
Linear_BN to 2x the width, Hardswish, Linear_BN back. The attention biases are drawn from a
standard normal (the reference initialises them at zero) so they move the scores.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 48
INPUT_SHAPE = (1, 3, 64, 64)
CLASSES = 10


def conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout))


class LinearBN(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.Linear(cin, cout, bias=False), nn.BatchNorm1d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        linear, bn = self
        x = linear(x)
        return bn(x.flatten(0, 1)).reshape_as(x)


class BNLinear(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.BatchNorm1d(cin), nn.Linear(cin, cout))


def bias_index(queries: list[tuple[int, int]], keys: list[tuple[int, int]], stride: int) -> tuple[int, torch.Tensor]:
    """(number of offset classes, [len(queries), len(keys)] int64): the class of each query/key
    pair's offset (|qy * stride - ky|, |qx * stride - kx|), numbered in order of appearance."""
    classes: dict[tuple[int, int], int] = {}
    index = []
    for qy, qx in queries:
        for ky, kx in keys:
            offset = (abs(qy * stride - ky), abs(qx * stride - kx))
            index.append(classes.setdefault(offset, len(classes)))
    return len(classes), torch.tensor(index).view(len(queries), len(keys))


class AttentionBiases(nn.Module):
    """The learned biases `attention_biases[:, attention_bias_idxs]` ([heads, queries, keys]),
    gathered once into `ab` whenever the module enters eval mode, as LeViT does."""

    def __init__(self, heads: int, resolution: int, stride: int = 1) -> None:
        super().__init__()
        keys = list(itertools.product(range(resolution), range(resolution)))
        queries = list(itertools.product(range(0, resolution, stride), range(0, resolution, stride)))
        queries = [(y // stride, x // stride) for y, x in queries]
        classes, index = bias_index(queries, keys, stride)
        self.attention_biases = nn.Parameter(torch.randn(heads, classes))
        self.register_buffer("attention_bias_idxs", index)

    @torch.no_grad()
    def train(self, mode: bool = True) -> AttentionBiases:
        super().train(mode)
        if mode and hasattr(self, "ab"):
            del self.ab
        elif not mode:
            self.ab = self.attention_biases[:, self.attention_bias_idxs]
        return self

    def biases(self) -> torch.Tensor:
        return self.attention_biases[:, self.attention_bias_idxs] if self.training else self.ab


class Attention(nn.Module):
    def __init__(self, dim: int, key_dim: int, heads: int, ratio: int, resolution: int) -> None:
        super().__init__()
        self.heads, self.key_dim, self.value_dim = heads, key_dim, ratio * key_dim
        self.scale = key_dim**-0.5
        self.qkv = LinearBN(dim, heads * (2 * key_dim + self.value_dim))
        self.proj = nn.Sequential(nn.Hardswish(), LinearBN(heads * self.value_dim, dim))
        self.bias = AttentionBiases(heads, resolution)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, self.heads, -1).split([self.key_dim, self.key_dim, self.value_dim], 3)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        attn = (q @ k.transpose(-2, -1)) * self.scale + self.bias.biases()
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, tokens, -1)
        return self.proj(x)


class Subsample(nn.Module):
    def __init__(self, stride: int, resolution: int) -> None:
        super().__init__()
        self.stride, self.resolution = stride, resolution

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, channels = x.shape
        x = x.view(batch, self.resolution, self.resolution, channels)[:, :: self.stride, :: self.stride]
        return x.reshape(batch, -1, channels)


class AttentionSubsample(nn.Module):
    def __init__(self, dim: int, out: int, key_dim: int, heads: int, ratio: int, resolution: int) -> None:
        super().__init__()
        self.heads, self.key_dim, self.value_dim = heads, key_dim, ratio * key_dim
        self.scale = key_dim**-0.5
        self.kv = LinearBN(dim, heads * (key_dim + self.value_dim))
        self.q = nn.Sequential(Subsample(2, resolution), LinearBN(dim, heads * key_dim))
        self.proj = nn.Sequential(nn.Hardswish(), LinearBN(heads * self.value_dim, out))
        self.bias = AttentionBiases(heads, resolution, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        k, v = self.kv(x).view(batch, tokens, self.heads, -1).split([self.key_dim, self.value_dim], dim=3)
        k, v = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        q = self.q(x).view(batch, -1, self.heads, self.key_dim).permute(0, 2, 1, 3)
        attn = (q @ k.transpose(-2, -1)) * self.scale + self.bias.biases()
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, -1, self.heads * self.value_dim)
        return self.proj(x)


class Residual(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.m = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.m(x)


def mlp(dim: int) -> Residual:
    return Residual(nn.Sequential(LinearBN(dim, 2 * dim), nn.Hardswish(), LinearBN(2 * dim, dim)))


class LeViT(nn.Module):
    def __init__(self, dims: tuple[int, int] = (32, 48), key_dim: int = 8, classes: int = CLASSES) -> None:
        super().__init__()
        d0, d1 = dims
        self.patch_embed = nn.Sequential(
            conv_bn(3, d0 // 8), nn.Hardswish(), conv_bn(d0 // 8, d0 // 4), nn.Hardswish(),
            conv_bn(d0 // 4, d0 // 2), nn.Hardswish(), conv_bn(d0 // 2, d0),
        )  # fmt: skip
        resolution = INPUT_SHAPE[2] // 16
        self.blocks = nn.Sequential(
            Residual(Attention(d0, key_dim, d0 // 16, 2, resolution)),
            mlp(d0),
            AttentionSubsample(d0, d1, key_dim, d0 // key_dim, 4, resolution),
            mlp(d1),
            Residual(Attention(d1, key_dim, d1 // 16, 2, resolution // 2)),
            mlp(d1),
        )
        self.head = BNLinear(d1, classes)
        self.head_dist = BNLinear(d1, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.patch_embed(x).flatten(2).transpose(1, 2)).mean(1)
        x = self.head(x), self.head_dist(x)
        return (x[0] + x[1]) / 2 if not self.training else x


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BatchNorm statistics) and one example image."""
    return build_seeded(SEED, LeViT, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

"""efficientnet_b0: EfficientNet-B0's blocks (Tan and Le, 2019) at reduced width and depth. Input 1x3x64x64.

A 3x3 stride-2 stem with SiLU; MBConv blocks (1x1 expansion unless the ratio is 1,
kxk depthwise, squeeze-and-excitation, linear 1x1 projection, stochastic depth on the
residual branch when stride 1 and widths match); a 1x1 head convolution, global average
pool, dropout and the classifier. Squeeze-and-excitation as in the reference
implementation: average pool, 1x1 conv to a quarter of the block's input width, SiLU,
1x1 conv, sigmoid, a multiply. Stochastic depth drops whole residual branches while
training and is the identity in inference, as torchvision's StochasticDepth.
The stages are B0's first four (expansion, kernel, stride) at widths 16, 8, 16, 24, 40
instead of 32, 16, 24, 40, 80, with one block per stage but the second (two).
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 22
INPUT_SHAPE = (1, 3, 64, 64)
CLASSES = 10
STEM = 16
# (expansion ratio, kernel, first stride, output channels, blocks)
STAGES = (
    (1, 3, 1, 8, 1),
    (6, 3, 2, 16, 2),
    (6, 5, 2, 24, 1),
    (6, 3, 2, 40, 1),
)
HEAD = 128
DROPOUT = 0.2
STOCHASTIC_DEPTH = 0.2  # the last block's drop probability; earlier blocks' grow linearly to it


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, silu: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([nn.SiLU(inplace=True)] if silu else []))


class StochasticDepth(nn.Module):
    """Row-wise stochastic depth (Huang et al., 2016): while training, zero each sample's
    branch with probability p and scale the kept ones by 1 / (1 - p); the identity otherwise."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        mask = torch.empty([x.shape[0]] + [1] * (x.dim() - 1), dtype=x.dtype).bernoulli_(keep)
        return x * mask.div_(keep)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = nn.functional.adaptive_avg_pool2d(x, 1)
        scale = torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(scale))))
        return x * scale


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, expansion: int, kernel: int, stride: int, drop: float) -> None:
        super().__init__()
        hidden = cin * expansion
        self.residual = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expansion != 1:
            layers.append(conv_bn(cin, hidden, 1))
        layers.append(conv_bn(hidden, hidden, kernel, stride, groups=hidden))
        layers.append(SqueezeExcitation(hidden, max(1, cin // 4)))
        layers.append(conv_bn(hidden, cout, 1, silu=False))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        if self.residual:
            out = self.stochastic_depth(out)
            out += x
        return out


class EfficientNetB0(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        total = sum(stage[-1] for stage in STAGES)
        layers: list[nn.Module] = [conv_bn(3, STEM, 3, 2)]
        channels, index = STEM, 0
        for expansion, kernel, stride, cout, blocks in STAGES:
            for i in range(blocks):
                drop = STOCHASTIC_DEPTH * index / total
                layers.append(MBConv(channels, cout, expansion, kernel, stride if i == 0 else 1, drop))
                channels, index = cout, index + 1
        layers.append(conv_bn(channels, HEAD, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=DROPOUT, inplace=True), nn.Linear(HEAD, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    return build_seeded(SEED, EfficientNetB0, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

"""mobilenet_v3_small: MobileNetV3-Small (Howard et al., 2019) with fewer blocks. Input 1x3x64x64.

The paper's table 2 (Small) up to its sixth bottleneck, at width 1.0: a 3x3 stride-2 stem
with hardswish, then bottlenecks (1x1 expansion unless the expansion equals the input
width, kxk depthwise, squeeze-and-excitation where the table says so, linear 1x1
projection, a residual add when stride 1 and widths match), a 1x1 convolution, global
average pool, a hardswish linear layer, dropout and the classifier. Squeeze-and-excitation
as the paper's figure 4: average pool, 1x1 conv, ReLU, 1x1 conv, hard sigmoid, a multiply
(squeezed to a quarter of the expansion, rounded to a multiple of 8). Activations are
in place, as users write them.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 21
INPUT_SHAPE = (1, 3, 64, 64)
CLASSES = 10
STEM = 16
# (kernel, expansion, output channels, squeeze-and-excitation, hardswish (else ReLU), stride)
SETTINGS = (
    (3, 16, 16, True, False, 2),
    (3, 72, 24, False, False, 2),
    (3, 88, 24, False, False, 1),
    (5, 96, 40, True, True, 2),
    (5, 240, 40, True, True, 1),
)
LAST_CONV = 240
HIDDEN = 256
DROPOUT = 0.2


def squeezed(channels: int) -> int:
    """A quarter of `channels` rounded to the nearest multiple of 8, never below 90% of it."""
    value = channels / 4
    rounded = max(8, int(value + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * value else rounded


def _activation(hardswish: bool) -> nn.Module:
    return nn.Hardswish(inplace=True) if hardswish else nn.ReLU(inplace=True)


def conv_bn_act(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: nn.Module | None = None):
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act] if act is not None else []))


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeezed(channels), 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeezed(channels), channels, 1)
        self.gate = nn.Hardsigmoid(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))
        return scale * x


class Bottleneck(nn.Module):
    def __init__(self, cin: int, kernel: int, expansion: int, cout: int, se: bool, hardswish: bool, stride: int):
        super().__init__()
        self.residual = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expansion != cin:
            layers.append(conv_bn_act(cin, expansion, 1, act=_activation(hardswish)))
        layers.append(conv_bn_act(expansion, expansion, kernel, stride, groups=expansion, act=_activation(hardswish)))
        if se:
            layers.append(SqueezeExcitation(expansion))
        layers.append(conv_bn_act(expansion, cout, 1))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        if self.residual:
            out += x
        return out


class MobileNetV3Small(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn_act(3, STEM, 3, 2, act=nn.Hardswish(inplace=True))]
        channels = STEM
        for kernel, expansion, cout, se, hardswish, stride in SETTINGS:
            layers.append(Bottleneck(channels, kernel, expansion, cout, se, hardswish, stride))
            channels = cout
        layers.append(conv_bn_act(channels, LAST_CONV, 1, act=nn.Hardswish(inplace=True)))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(LAST_CONV, HIDDEN),
            nn.Hardswish(inplace=True),
            nn.Dropout(p=DROPOUT, inplace=True),
            nn.Linear(HIDDEN, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    return build_seeded(SEED, MobileNetV3Small, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

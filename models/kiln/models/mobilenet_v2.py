"""MobileNetV2 (Sandler et al., 2018) at any width; two zoo entries use it.

- ``mobilenet_v2``: width 1.0, input 1x3x224x224 (3,504,872 parameters).
- ``mobilenet_v2_035``: width 0.35, input 1x3x96x96.

Inverted residual blocks (1x1 expansion, 3x3 depthwise, linear 1x1 projection,
ReLU6, skip connection when stride 1 and the channel count is unchanged);
channel counts rounded to multiples of 8; the last 1x1 convolution has 1280
channels, scaled only for widths above 1. Convolutions have no bias (a
BatchNorm follows each); the classifier's dropout, identity in inference, is
left out.

``ModelUnderTest`` and ``ModelInputs`` (width 1.0) are built on first access,
not at import.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import built_on_first_access, prepare, seeded

SEED = 6
CLASSES = 1000
FIRST_CHANNELS = 32
LAST_CHANNELS = 1280
ROUND_TO = 8
# (expansion t, output channels c, repeats n, first stride s), from the paper's table 2.
SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
# Input resolution per zoo width; other widths default to 224.
RESOLUTIONS = {1.0: 224, 0.35: 96}


def make_divisible(value: float, divisor: int = ROUND_TO) -> int:
    """Round to the nearest multiple of `divisor`, never going below 90% of `value`."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def _conv_bn(in_channels: int, out_channels: int, kernel: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    conv = nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False)
    return [conv, nn.BatchNorm2d(out_channels)]


def _conv_bn_relu6(in_channels: int, out_channels: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(*_conv_bn(in_channels, out_channels, kernel, stride, groups), nn.ReLU6())


class InvertedResidual(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = in_channels * expansion
        self.use_residual = stride == 1 and in_channels == out_channels
        layers: list[nn.Module] = []
        if expansion != 1:
            layers.append(_conv_bn_relu6(in_channels, hidden, 1))
        layers.append(_conv_bn_relu6(hidden, hidden, 3, stride=stride, groups=hidden))
        layers.extend(_conv_bn(hidden, out_channels, 1))  # linear bottleneck: no activation
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:
            return x + self.block(x)
        return self.block(x)


class MobileNetV2(nn.Module):
    def __init__(self, width: float = 1.0, classes: int = CLASSES) -> None:
        super().__init__()
        channels = make_divisible(FIRST_CHANNELS * width)
        last = make_divisible(LAST_CHANNELS * max(1.0, width))
        layers: list[nn.Module] = [_conv_bn_relu6(3, channels, 3, stride=2)]
        for expansion, c, repeats, first_stride in SETTINGS:
            out = make_divisible(c * width)
            for i in range(repeats):
                layers.append(InvertedResidual(channels, out, first_stride if i == 0 else 1, expansion))
                channels = out
        layers.append(_conv_bn_relu6(channels, last, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.classifier = nn.Linear(last, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.pool(self.features(x))))


def build(width: float = 1.0, resolution: int | None = None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """MobileNetV2 at `width` (eval mode, deterministic weights, random BN statistics) and one input.

    The input is 1x3xRxR with R = `resolution`, by default 224 for width 1.0 and
    96 for width 0.35.
    """
    if resolution is None:
        resolution = RESOLUTIONS.get(width, 224)
    with seeded(SEED):
        model = prepare(MobileNetV2(width))
        inputs = (torch.rand(1, 3, resolution, resolution),)
    return model, inputs


# The full-size model is built when first asked for, not at import.
__getattr__ = built_on_first_access(globals(), build)

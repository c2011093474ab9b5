"""shufflenet_v2: ShuffleNetV2 x0.5 (Ma et al., 2018) with fewer units. Input 1x3x64x64.

A 3x3 stride-2 stem convolution with BN and ReLU, a 3x3 stride-2 max pool; three stages
at x0.5's widths 48, 96, 192, each a stride-2 unit then one stride-1 unit (the paper
repeats 3, 7, 3); a 1x1 convolution to 256 channels (the paper's 1024); global average
pool as a mean over height and width, and the classifier. A stride-1 unit splits the
channels in two with chunk, transforms one half (1x1 conv, BN, ReLU, 3x3 depthwise, BN,
1x1 conv, BN, ReLU) and concatenates; a stride-2 unit concatenates two branches that
both downsample. Every unit ends with the channel shuffle in two groups, written with
view, transpose, contiguous and view as in torchvision's implementation.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 24
INPUT_SHAPE = (1, 3, 64, 64)
CLASSES = 10
STEM = 24
WIDTHS = (48, 96, 192)
UNITS = (2, 2, 2)  # units per stage, the stride-2 one included
LAST_CONV = 256


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    batch, channels, height, width = x.size()
    x = x.view(batch, groups, channels // groups, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batch, -1, height, width)


def _pointwise(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


def _depthwise(channels: int, stride: int) -> list[nn.Module]:
    return [nn.Conv2d(channels, channels, 3, stride, 1, groups=channels, bias=False), nn.BatchNorm2d(channels)]


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(*_depthwise(cin, stride), *_pointwise(cin, half))
        else:
            self.branch1 = nn.Sequential()
        branch_in = cin if stride > 1 else half
        self.branch2 = nn.Sequential(*_pointwise(branch_in, half), *_depthwise(half, stride), *_pointwise(half, half))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNetV2 with stage widths `widths`, `units` per stage and a last 1x1 convolution
    to `last` channels (x0.5 in the paper: 48, 96, 192; 4, 8, 4; 1024)."""

    def __init__(
        self,
        widths: tuple[int, ...] = WIDTHS,
        units: tuple[int, ...] = UNITS,
        last: int = LAST_CONV,
        classes: int = CLASSES,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, STEM, 3, 2, 1, bias=False), nn.BatchNorm2d(STEM), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages, channels = [], STEM
        for width, count in zip(widths, units, strict=True):
            stage = [ShuffleUnit(channels, width, 2)] + [ShuffleUnit(width, width, 1) for _ in range(count - 1)]
            stages.append(nn.Sequential(*stage))
            channels = width
        self.stage2, self.stage3, self.stage4 = stages
        self.conv5 = nn.Sequential(*_pointwise(channels, last))
        self.fc = nn.Linear(last, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    return build_seeded(SEED, ShuffleNetV2, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

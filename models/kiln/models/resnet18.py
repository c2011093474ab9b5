"""resnet18: ResNet-18 (He et al., 2016) at quarter width. Input 1x3x64x64.

The paper's 18-layer network: a 7x7 stride-2 stem convolution, BatchNorm, ReLU and a
3x3 stride-2 max pool; four stages of two basic blocks (3x3 conv, BN, ReLU, 3x3 conv,
BN, the shortcut added in place, ReLU) at 16, 32, 64, 128 channels instead of 64, 128,
256, 512, the first block of stages 2-4 with stride 2 and a 1x1 stride-2 convolution +
BN as its shortcut (option B); global average pool and the classifier. Convolutions
have no bias, activations are in place, as in torchvision's implementation.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 23
INPUT_SHAPE = (1, 3, 64, 64)
CLASSES = 10
WIDTHS = (16, 32, 64, 128)
BLOCKS_PER_STAGE = 2


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    """ResNet-18 with stage widths `widths` (the paper's: 64, 128, 256, 512)."""

    def __init__(self, widths: tuple[int, ...] = WIDTHS, classes: int = CLASSES) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, channels = [], widths[0]
        for i, width in enumerate(widths):
            blocks = [
                BasicBlock(channels if b == 0 else width, width, 2 if i > 0 and b == 0 else 1)
                for b in range(BLOCKS_PER_STAGE)
            ]
            stages.append(nn.Sequential(*blocks))
            channels = width
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    return build_seeded(SEED, ResNet18, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

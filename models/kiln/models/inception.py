"""inception: GoogLeNet's Inception module (Szegedy et al., 2015) in a small network. Input 1x3x32x32.

A 3x3 stride-2 stem convolution, then two Inception modules with a 3x3 stride-2 max pool
(ceil mode) between them, global average pool, dropout and the classifier. A module has
four parallel branches concatenated on channels: 1x1; 1x1 reduce then 3x3; 1x1 reduce
then 5x5 (the paper's; torchvision uses 3x3 there); 3x3 stride-1 max pool (ceil mode)
then a 1x1 projection. Each convolution is torchvision's BasicConv2d: no bias, BatchNorm
(eps 0.001), in-place ReLU. Widths are a quarter of inception (3a) and (3b)'s.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 26
INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 10
STEM = 48
# (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection): (3a) and (3b) at a quarter width.
MODULES = ((16, 24, 32, 4, 8, 8), (32, 32, 48, 8, 24, 16))
DROPOUT = 0.4


class BasicConv2d(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    def __init__(self, cin: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int, ch5x5: int, pool_proj: int):
        super().__init__()
        self.branch1 = BasicConv2d(cin, ch1x1, 1)
        self.branch2 = nn.Sequential(BasicConv2d(cin, ch3x3red, 1), BasicConv2d(ch3x3red, ch3x3, 3))
        self.branch3 = nn.Sequential(BasicConv2d(cin, ch5x5red, 1), BasicConv2d(ch5x5red, ch5x5, 5))
        self.branch4 = nn.Sequential(
            nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True), BasicConv2d(cin, pool_proj, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branches = [self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)]
        return torch.cat(branches, 1)


def out_channels(module: tuple[int, ...]) -> int:
    ch1x1, _, ch3x3, _, ch5x5, pool_proj = module
    return ch1x1 + ch3x3 + ch5x5 + pool_proj


class InceptionNet(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.stem = BasicConv2d(3, STEM, 3, stride=2)
        self.inception3a = Inception(STEM, *MODULES[0])
        self.maxpool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception3b = Inception(out_channels(MODULES[0]), *MODULES[1])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=DROPOUT)
        self.fc = nn.Linear(out_channels(MODULES[1]), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inception3b(self.maxpool(self.inception3a(self.stem(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(self.dropout(x))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    return build_seeded(SEED, InceptionNet, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

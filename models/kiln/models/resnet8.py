"""resnet8: MLPerf Tiny image classification ResNet-8 (CIFAR-10). Input 1x3x32x32.

As in the MLPerf Tiny Keras reference, convolutions have biases (Keras'
default) and the 1x1 projection shortcut has no BatchNorm.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import prepare, seeded

SEED = 3
INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 10


class ResidualStack(nn.Module):
    """conv3x3/s + BN + ReLU, conv3x3 + BN, add the shortcut, ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(out_channels)
        if stride != 1 or in_channels != out_channels:
            self.shortcut: nn.Module = nn.Conv2d(in_channels, out_channels, 1, stride=stride)
        else:
            self.shortcut = nn.Identity()
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu2(y + self.shortcut(x))


class ResNet8(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.stack1 = ResidualStack(16, 16, stride=1)
        self.stack2 = ResidualStack(16, 32, stride=2)
        self.stack3 = ResidualStack(32, 64, stride=2)
        self.pool = nn.AvgPool2d(8)  # 32x32 -> 16x16 -> 8x8: pools the whole map
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stack3(self.stack2(self.stack1(self.stem(x))))
        return self.fc(self.flatten(self.pool(x)))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    with seeded(SEED):
        model = prepare(ResNet8())
        inputs = (torch.rand(INPUT_SHAPE),)
    return model, inputs


ModelUnderTest, ModelInputs = build()

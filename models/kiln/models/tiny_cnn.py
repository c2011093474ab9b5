"""tiny_cnn: the smallest useful CNN, for smoke tests of the compiler. Input 1x1x8x8."""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import prepare, seeded

SEED = 1
INPUT_SHAPE = (1, 1, 8, 8)


class TinyCNN(nn.Module):
    """conv 3x3 1->8 + ReLU, conv 3x3/2 8->16 + ReLU, global average pool, linear 16->4."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, stride=2, padding=1)
        self.relu2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu1(self.conv1(x))
        x = self.relu2(self.conv2(x))
        return self.fc(self.flatten(self.pool(x)))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights) and one example input."""
    with seeded(SEED):
        model = prepare(TinyCNN())
        inputs = (torch.rand(INPUT_SHAPE),)
    return model, inputs


ModelUnderTest, ModelInputs = build()

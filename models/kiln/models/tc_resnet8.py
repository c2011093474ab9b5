"""tc_resnet8: TC-ResNet8 keyword spotting (Choi et al., 2019) with 1-D convolutions. Input 1x10x49.

The MFCCs are the channels (10 coefficients) and time the one spatial axis (49 frames),
the paper's temporal convolution: a 3-tap Conv1d to 16 channels, then three residual
blocks to 24, 32 and 48 channels, each a 9-tap stride-2 Conv1d, BatchNorm, ReLU, a 9-tap
Conv1d and BatchNorm, added in place to a shortcut (1x1 stride-2 Conv1d, BatchNorm,
ReLU: the paper's figure 3b), then ReLU; global average pool over time, dropout and the
classifier. Convolutions have no bias; the paper's width multiplier is 1.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 29
INPUT_SHAPE = (1, 10, 49)
CLASSES = 12
STEM = 16
WIDTHS = (24, 32, 48)
KERNEL = 9
DROPOUT = 0.5


class Block(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(cin, cout, KERNEL, stride=2, padding=KERNEL // 2, bias=False)
        self.bn1 = nn.BatchNorm1d(cout)
        self.conv2 = nn.Conv1d(cout, cout, KERNEL, padding=KERNEL // 2, bias=False)
        self.bn2 = nn.BatchNorm1d(cout)
        self.shortcut = nn.Sequential(
            nn.Conv1d(cin, cout, 1, stride=2, bias=False), nn.BatchNorm1d(cout), nn.ReLU(inplace=True)
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        out += self.shortcut(x)
        return self.relu(out)


class TCResNet8(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.stem = nn.Conv1d(INPUT_SHAPE[1], STEM, 3, padding=1, bias=False)
        blocks, channels = [], STEM
        for width in WIDTHS:
            blocks.append(Block(channels, width))
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.dropout = nn.Dropout(DROPOUT)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.blocks(self.stem(x))).squeeze(-1)
        return self.fc(self.dropout(x))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    return build_seeded(SEED, TCResNet8, INPUT_SHAPE, signed=True)


ModelUnderTest, ModelInputs = build()

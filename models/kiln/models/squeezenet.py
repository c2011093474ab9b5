"""squeezenet: SqueezeNet 1.1 (Iandola et al., 2016; the 1.1 variant of the reference
repository) at half width. Input 1x3x50x50.

A 3x3 stride-2 convolution (no padding) and ReLU; eight fire modules (a 1x1 squeeze
convolution with ReLU feeding a 1x1 and a 3x3 expand convolution, each with ReLU, whose
outputs are concatenated) with 3x3 stride-2 max pools in ceil mode after the stem and
after fire modules 2 and 4; the classifier is dropout, a 1x1 convolution to the classes,
ReLU and global average pool. Channel counts are half of 1.1's. A 50x50 input makes
every pool's ceil mode count: 24 -> 12 -> 6 -> 3, where floor mode would give 11, 5, 2.
No BatchNorm, as in the paper; activations are in place.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 25
INPUT_SHAPE = (1, 3, 50, 50)
CLASSES = 10
STEM = 32
# (squeeze, expand 1x1, expand 3x3) per fire module; each module's input is the previous one's output.
FIRES = (
    (8, 32, 32),
    (8, 32, 32),
    (16, 64, 64),
    (16, 64, 64),
    (24, 96, 96),
    (24, 96, 96),
    (32, 128, 128),
    (32, 128, 128),
)
POOL_AFTER = (2, 4)  # max pools after these many fire modules (and one after the stem)
DROPOUT = 0.5


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat(
            [self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], 1
        )


def _pool() -> nn.MaxPool2d:
    return nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 with a `stem`-channel first convolution and `fires` (1.1's: 64; (16, 64,
    64) twice, (32, 128, 128) twice, (48, 192, 192) twice, (64, 256, 256) twice)."""

    def __init__(
        self, stem: int = STEM, fires: tuple[tuple[int, int, int], ...] = FIRES, classes: int = CLASSES
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, stem, 3, stride=2), nn.ReLU(inplace=True), _pool()]
        channels = stem
        for i, (squeeze, e1, e3) in enumerate(fires, start=1):
            layers.append(Fire(channels, squeeze, e1, e3))
            channels = e1 + e3
            if i in POOL_AFTER:
                layers.append(_pool())
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Dropout(p=DROPOUT), nn.Conv2d(channels, classes, 1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights) and one example input."""
    return build_seeded(SEED, SqueezeNet, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

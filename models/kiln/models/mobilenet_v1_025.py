"""mobilenet_v1_025: MLPerf Tiny visual wake words MobileNetV1, width 0.25. Input 1x3x96x96.

Convolutions have biases, as Keras' default in the MLPerf Tiny reference;
the global average pool is an AvgPool2d over the whole final map (3x3 at
96x96), as the reference's AveragePooling2D(pool_size=map size).
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import prepare, seeded

SEED = 4
WIDTH = 0.25
RESOLUTION = 96
INPUT_SHAPE = (1, 3, RESOLUTION, RESOLUTION)
CLASSES = 2

FIRST_CHANNELS = 32
# (output channels at width 1.0, depthwise stride) of the 13 depthwise-separable blocks.
BLOCKS = (
    (64, 1),
    (128, 2),
    (128, 1),
    (256, 2),
    (256, 1),
    (512, 2),
    (512, 1),
    (512, 1),
    (512, 1),
    (512, 1),
    (512, 1),
    (1024, 2),
    (1024, 1),
)


def _conv_bn_relu(conv: nn.Conv2d) -> nn.Sequential:
    return nn.Sequential(conv, nn.BatchNorm2d(conv.out_channels), nn.ReLU())


class MobileNetV1(nn.Module):
    def __init__(self, width: float = WIDTH, resolution: int = RESOLUTION, classes: int = CLASSES) -> None:
        super().__init__()
        channels = int(FIRST_CHANNELS * width)
        layers = [_conv_bn_relu(nn.Conv2d(3, channels, 3, stride=2, padding=1))]
        size = (resolution + 1) // 2
        for out_width1, stride in BLOCKS:
            out = int(out_width1 * width)
            layers.append(_conv_bn_relu(nn.Conv2d(channels, channels, 3, stride=stride, padding=1, groups=channels)))
            layers.append(_conv_bn_relu(nn.Conv2d(channels, out, 1)))
            channels = out
            size = (size - 1) // stride + 1
        self.features = nn.Sequential(*layers)
        self.pool = nn.AvgPool2d(size)  # the whole final map: 96 / 32 = 3
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flatten(self.pool(self.features(x))))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    with seeded(SEED):
        model = prepare(MobileNetV1())
        inputs = (torch.rand(INPUT_SHAPE),)
    return model, inputs


ModelUnderTest, ModelInputs = build()

"""ds_cnn: MLPerf Tiny keyword spotting DS-CNN. Input 1x1x49x10 (49 frames x 10 MFCCs).

Like the MLPerf Tiny Keras reference, every convolution has a bias (Keras'
default) even though a BatchNorm follows; the reference's dropout layers are
identity in inference and left out.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import prepare, seeded

SEED = 2
INPUT_SHAPE = (1, 1, 49, 10)
FILTERS = 64
CLASSES = 12
BLOCKS = 4

# The first convolution: kernel (10, 4), stride 2, padding (5, 1).
_KERNEL = (10, 4)
_STRIDE = 2
_PADDING = (5, 1)


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


# The depthwise-separable blocks keep the first convolution's output size:
# height (49 + 10 - 10) // 2 + 1 = 25, width (10 + 2 - 4) // 2 + 1 = 5.
POOL_KERNEL = (
    _conv_out(INPUT_SHAPE[2], _KERNEL[0], _STRIDE, _PADDING[0]),
    _conv_out(INPUT_SHAPE[3], _KERNEL[1], _STRIDE, _PADDING[1]),
)


def _conv_bn_relu(conv: nn.Conv2d) -> nn.Sequential:
    return nn.Sequential(conv, nn.BatchNorm2d(conv.out_channels), nn.ReLU())


class DSCNN(nn.Module):
    def __init__(self, filters: int = FILTERS, classes: int = CLASSES, blocks: int = BLOCKS) -> None:
        super().__init__()
        self.stem = _conv_bn_relu(nn.Conv2d(1, filters, _KERNEL, stride=_STRIDE, padding=_PADDING))
        layers = []
        for _ in range(blocks):
            layers.append(_conv_bn_relu(nn.Conv2d(filters, filters, 3, padding=1, groups=filters)))
            layers.append(_conv_bn_relu(nn.Conv2d(filters, filters, 1)))
        self.blocks = nn.Sequential(*layers)
        self.pool = nn.AvgPool2d(POOL_KERNEL)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(filters, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(self.flatten(self.pool(x)))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    with seeded(SEED):
        model = prepare(DSCNN())
        inputs = (torch.randn(INPUT_SHAPE),)
    return model, inputs


ModelUnderTest, ModelInputs = build()

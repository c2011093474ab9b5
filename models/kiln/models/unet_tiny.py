"""unet_tiny: a small U-Net (Ronneberger et al., 2015). Input 1x3x32x32, output 1x2x32x32.

Two levels down, two up, at 8, 16 and 32 channels instead of 64 to 1024. Each level
is a double convolution (two times 3x3 conv, BatchNorm, in-place ReLU; padded, so
skips need no cropping); down steps are 2x2 max pools. The first up step is the
paper's 2x2 stride-2 up-convolution (ConvTranspose2d), the second a bilinear
upsampling with align_corners=True followed by the double convolution, as in the
common PyTorch implementation's bilinear variant; each up step concatenates the skip
connection's features before its double convolution. A 1x1 convolution gives 2 class
maps.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 31
INPUT_SHAPE = (1, 3, 32, 32)
CLASSES = 2
WIDTHS = (8, 16, 32)


class DoubleConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.double_conv = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.double_conv(x)


class Down(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.MaxPool2d(2), DoubleConv(cin, cout))


class Up(nn.Module):
    """Up-sample `x` to twice its size (up-convolution to `skip` channels, or bilinear keeping
    its channels), concatenate the skip connection before it, double convolution."""

    def __init__(self, cin: int, skip: int, cout: int, bilinear: bool) -> None:
        super().__init__()
        if bilinear:
            self.up: nn.Module = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            merged = cin + skip
        else:
            self.up = nn.ConvTranspose2d(cin, skip, kernel_size=2, stride=2)
            merged = 2 * skip
        self.conv = DoubleConv(merged, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        w0, w1, w2 = WIDTHS
        self.inc = DoubleConv(INPUT_SHAPE[1], w0)
        self.down1 = Down(w0, w1)
        self.down2 = Down(w1, w2)
        self.up1 = Up(w2, w1, w1, bilinear=False)
        self.up2 = Up(w1, w0, w0, bilinear=True)
        self.outc = nn.Conv2d(w0, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x = self.up1(self.down2(x2), x2)
        return self.outc(self.up2(x, x1))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    return build_seeded(SEED, UNet, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

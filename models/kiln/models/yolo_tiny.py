"""yolo_tiny: a small YOLO-style detector (YOLOv5/v8's blocks). Input 1x3x64x64, output 1x240x8.

Backbone: Conv units (conv without bias, BatchNorm, in-place SiLU) down to stride 8
(P3, 32 channels) and 16 (P4, 64 channels), each followed by a C2f block (1x1 Conv,
chunk in two, a residual bottleneck on the second half, concatenation of all parts,
1x1 Conv) and P4 by SPPF (1x1 Conv, three chained 5x5 stride-1 max pools, concatenation,
1x1 Conv). Neck: P4 upsampled (nearest, x2), concatenated with P3, a 1x1 Conv. Head,
per level, YOLOv5's Detect in inference: a 1x1 convolution to anchors x (5 + classes),
view and permute to (batch, anchors, y, x, outputs), sigmoid, split into xy, wh and
scores; xy = (2 xy + grid) * stride, wh = (2 wh)^2 * anchor; concatenated and viewed as
(batch, anchors * y * x, outputs); the levels concatenated. The grids and anchors are
constant buffers. 3 anchors per level (YOLOv5's P3 and P4 anchors), 3 classes.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 32
INPUT_SHAPE = (1, 3, 64, 64)
CLASSES = 3
OUTPUTS = 5 + CLASSES  # x, y, w, h, objectness, class scores
STRIDES = (8, 16)
# Anchor (width, height) in pixels per level: YOLOv5's P3/8 and P4/16 anchors.
ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)))
P3, P4 = 32, 64


class Conv(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.cv1 = Conv(channels, channels, 3)
        self.cv2 = Conv(channels, channels, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.cv2(self.cv1(x))


class C2f(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.hidden = channels // 2
        self.cv1 = Conv(channels, 2 * self.hidden)
        self.m = Bottleneck(self.hidden)
        self.cv2 = Conv(3 * self.hidden, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(self.cv1(x).chunk(2, 1))
        parts.append(self.m(parts[-1]))
        return self.cv2(torch.cat(parts, 1))


class SPPF(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.cv1 = Conv(channels, channels // 2)
        self.m = nn.MaxPool2d(kernel_size=5, stride=1, padding=2)
        self.cv2 = Conv(channels // 2 * 4, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


def _grids(size: int, stride: int, anchors: tuple[tuple[int, int], ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(cell offsets - 0.5, anchor sizes in pixels), each 1 x anchors x size x size x 2."""
    ys, xs = torch.meshgrid(
        torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij"
    )
    grid = torch.stack((xs, ys), 2).expand(1, len(anchors), size, size, 2) - 0.5
    anchor_grid = torch.tensor(anchors, dtype=torch.float32).view(1, len(anchors), 1, 1, 2)
    return grid.contiguous(), anchor_grid.expand(1, len(anchors), size, size, 2).contiguous()


class Detect(nn.Module):
    def __init__(self, channels: tuple[int, ...], sizes: tuple[int, ...]) -> None:
        super().__init__()
        self.anchors = len(ANCHORS[0])
        self.m = nn.ModuleList(nn.Conv2d(c, self.anchors * OUTPUTS, 1) for c in channels)
        for i, (size, stride, anchors) in enumerate(zip(sizes, STRIDES, ANCHORS)):
            grid, anchor_grid = _grids(size, stride, anchors)
            self.register_buffer(f"grid{i}", grid, persistent=False)
            self.register_buffer(f"anchor_grid{i}", anchor_grid, persistent=False)

    def forward(self, levels: list[torch.Tensor]) -> torch.Tensor:
        boxes = []
        for i, x in enumerate(levels):
            x = self.m[i](x)
            batch, _, ny, nx = x.shape
            x = x.view(batch, self.anchors, OUTPUTS, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            xy, wh, scores = x.sigmoid().split((2, 2, OUTPUTS - 4), 4)
            xy = (xy * 2 + getattr(self, f"grid{i}")) * STRIDES[i]
            wh = (wh * 2) ** 2 * getattr(self, f"anchor_grid{i}")
            boxes.append(torch.cat((xy, wh, scores), 4).view(batch, self.anchors * ny * nx, OUTPUTS))
        return torch.cat(boxes, 1)


class YoloTiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        size = INPUT_SHAPE[2]
        self.backbone3 = nn.Sequential(Conv(3, 8, 3, 2), Conv(8, 16, 3, 2), Conv(16, P3, 3, 2), C2f(P3))
        self.backbone4 = nn.Sequential(Conv(P3, P4, 3, 2), C2f(P4), SPPF(P4))
        self.upsample = nn.Upsample(None, 2, "nearest")
        self.neck = Conv(P3 + P4, P3)
        self.detect = Detect((P3, P4), (size // STRIDES[0], size // STRIDES[1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.backbone3(x)
        p4 = self.backbone4(p3)
        p3 = self.neck(torch.cat((self.upsample(p4), p3), 1))
        return self.detect([p3, p4])


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    return build_seeded(SEED, YoloTiny, INPUT_SHAPE)


ModelUnderTest, ModelInputs = build()

"""fc_autoencoder: MLPerf Tiny anomaly detection fully connected autoencoder. Input 1x640.

640 -> 128 -> 128 -> 128 -> 128 -> 8 -> 128 -> 128 -> 128 -> 128 -> 640; every
layer but the last is Linear + BatchNorm1d + ReLU, the last is plain Linear.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import prepare, seeded

SEED = 5
FEATURES = 640
HIDDEN = 128
BOTTLENECK = 8
INPUT_SHAPE = (1, FEATURES)


def _dense_bn_relu(in_features: int, out_features: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_features, out_features), nn.BatchNorm1d(out_features), nn.ReLU())


class FCAutoencoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            _dense_bn_relu(FEATURES, HIDDEN),
            _dense_bn_relu(HIDDEN, HIDDEN),
            _dense_bn_relu(HIDDEN, HIDDEN),
            _dense_bn_relu(HIDDEN, HIDDEN),
            _dense_bn_relu(HIDDEN, BOTTLENECK),
        )
        self.decoder = nn.Sequential(
            _dense_bn_relu(BOTTLENECK, HIDDEN),
            _dense_bn_relu(HIDDEN, HIDDEN),
            _dense_bn_relu(HIDDEN, HIDDEN),
            _dense_bn_relu(HIDDEN, HIDDEN),
            nn.Linear(HIDDEN, FEATURES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights, random BN statistics) and one example input."""
    with seeded(SEED):
        model = prepare(FCAutoencoder())
        inputs = (torch.randn(INPUT_SHAPE),)
    return model, inputs


ModelUnderTest, ModelInputs = build()

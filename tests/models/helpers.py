"""Shared by the model tests."""

from __future__ import annotations

import torch
from torch import nn


def n_params(model: nn.Module) -> int:
    """Parameters (weights, biases, norm weights and biases; not buffers such as running statistics)."""
    return sum(p.numel() for p in model.parameters())


def run(model: nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)

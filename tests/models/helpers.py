"""Shared by the model tests."""

from __future__ import annotations

import torch
from torch import nn

from kiln import models


def n_params(model: nn.Module) -> int:
    """Parameters (weights, biases, norm weights and biases; not buffers such as running statistics)."""
    return sum(p.numel() for p in model.parameters())


def run(model: nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


def outputs(model: nn.Module, inputs: tuple) -> tuple[torch.Tensor, ...]:
    """The model's outputs (no gradients) as a tuple, one output or several."""
    out = run(model, inputs)
    return out if isinstance(out, tuple) else (out,)


def assert_builds_identically(name: str) -> None:
    """Building `name` twice gives the same inputs, weights, buffers and outputs."""
    (model_a, inputs_a), (model_b, inputs_b) = models.load(name), models.load(name)
    assert all(torch.equal(a, b) for a, b in zip(inputs_a, inputs_b, strict=True))
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert all(torch.equal(a, b) for a, b in zip(outputs(model_a, inputs_a), outputs(model_b, inputs_b), strict=True))

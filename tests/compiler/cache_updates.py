"""KV caches updated in the pure form (the cache an input of forward, the updated cache an output),
as kiln compiles each method's graph once its state is made inputs and outputs: small models around
one index_copy (or index_put) for the lowering tests and the virtual platform's."""

from __future__ import annotations

import torch
from torch import nn

H, T, D, P = 3, 16, 8, 4  # heads, cache length, head size, prompt length


class Decode(nn.Module):
    """A decode step: one token's key projected and written at a run-time position along T of a
    [1, H, T, D] cache (N = H planes of T rows of D), the cache then read by a max over D."""

    def __init__(self):
        super().__init__()
        self.key = nn.Linear(D, H * D)

    def forward(self, cache, position, x):
        k = self.key(x).reshape(1, 1, H, D).transpose(1, 2)
        cache = cache.index_copy(2, position, k)
        return cache, cache.amax(-1)


class Prefill(nn.Module):
    """A prompt's P keys written at the constant positions arange(P) (a buffer)."""

    def __init__(self):
        super().__init__()
        self.key = nn.Linear(D, H * D)
        self.register_buffer("positions", torch.arange(P))

    def forward(self, cache, x):
        k = self.key(x).reshape(1, P, H, D).transpose(1, 2)
        cache = cache.index_copy(2, self.positions, k)
        return cache, cache.amax(-1)


class Flat(nn.Module):
    """A [1, T, H * D] cache (N = 1) updated by an index assignment (index_put; a negative position
    counts from the end)."""

    def __init__(self):
        super().__init__()
        self.key = nn.Linear(D, H * D)

    def forward(self, cache, position, x):
        cache = cache * 1.0
        cache[:, position] = self.key(x)
        return cache, cache.amax(-1)


class Column(nn.Module):
    """A [1, H, T] cache written along its last dim (C = 1)."""

    def __init__(self):
        super().__init__()
        self.key = nn.Linear(D, H)

    def forward(self, cache, position, x):
        k = self.key(x).reshape(1, H, 1)
        cache = cache.index_copy(2, position, k)
        return cache, cache.amax(-1)


def make(name: str, position: int, seed: int) -> tuple:
    """Inputs of model `name` (a cache of normal values; prefill takes no position) writing at `position`."""
    g = torch.Generator().manual_seed(seed)
    if name == "prefill":
        return torch.randn(1, H, T, D, generator=g), torch.randn(1, P, D, generator=g)
    cache = {"decode": (1, H, T, D), "flat": (1, T, H * D), "column": (1, H, T)}[name]
    return torch.randn(*cache, generator=g), torch.tensor([position]), torch.randn(1, 1, D, generator=g)


MODELS = {"decode": Decode, "prefill": Prefill, "flat": Flat, "column": Column}
WRITTEN_DIM = {"decode": 2, "prefill": 2, "flat": 1, "column": 2}  # the cache's dim the update writes

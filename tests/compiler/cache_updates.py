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


class Step(nn.Module):
    """One attention layer's decode step: the rotary rows cos.index_select(0, position) (a simplified
    rotation: q and k times them), the key and value written into their caches at the position,
    attention over the whole caches with the mask arange(T) <= position, and the next token the
    argmax of a head. Every index use reads the one position."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(D, H * D), nn.Linear(D, H * D), nn.Linear(D, H * D)
        self.head = nn.Linear(H * D, 32)
        self.register_buffer("cos", torch.cos(torch.arange(T)[:, None] * torch.linspace(0.1, 1.0, D)[None]))
        self.register_buffer("steps", torch.arange(T))

    def forward(self, k_cache, v_cache, position, x):
        cos = self.cos.index_select(0, position)
        heads = lambda y: y.reshape(1, 1, H, D).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(x)) * cos, heads(self.k(x)) * cos, heads(self.v(x))
        k_cache, v_cache = k_cache.index_copy(2, position, k), v_cache.index_copy(2, position, v)
        attended = nn.functional.scaled_dot_product_attention(
            q, k_cache, v_cache, attn_mask=(self.steps <= position)[None, :]
        )
        return k_cache, v_cache, self.head(attended.transpose(1, 2).reshape(1, H * D)).argmax(-1)


def step_inputs(position: int, seed: int) -> tuple:
    """Step's inputs: caches of normal values, the position, one token's hidden state."""
    g = torch.Generator().manual_seed(seed)
    caches = [torch.randn(1, H, T, D, generator=g) for _ in range(2)]
    return (*caches, torch.tensor([position]), torch.randn(1, 1, D, generator=g))

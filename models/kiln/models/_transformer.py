"""The transformer zoo's shared layers: multi-head self-attention written two ways, and the
pre-norm block of ViT, Whisper and GPT-2.

``SelfAttention(dim, heads, kind)`` over [batch, tokens, dim]:

- ``kind="sdpa"``: one linear for q, k and v, heads split by view and transpose,
  ``F.scaled_dot_product_attention``, heads merged, an output linear;
- ``kind="mha"``: ``nn.MultiheadAttention(batch_first=True)`` called with
  ``need_weights=False`` (PyTorch's fused path, as model libraries call it).

Both take the same masks: ``padding`` (bool [batch, tokens], True for a real token, which
every query may attend) and ``causal`` (each query attends itself and the tokens before
it). Each form passes them in its own convention: SDPA's boolean ``attn_mask`` (True takes
part) and ``is_causal``; MultiheadAttention's ``key_padding_mask`` and a boolean
``attn_mask`` (True is masked out) built by ``triu``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

KINDS = ("sdpa", "mha")


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, kind: str = "sdpa") -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"attention kind {kind!r}; one of {KINDS}")
        self.kind, self.heads = kind, heads
        if kind == "mha":
            self.mha = nn.MultiheadAttention(dim, heads, batch_first=True)
        else:
            self.qkv = nn.Linear(dim, 3 * dim)
            self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        if self.kind == "mha":
            return self._mha(x, padding, causal)
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3 * self.heads, dim // self.heads).transpose(1, 2).chunk(3, dim=1)
        mask = None if padding is None else padding[:, None, None, :]
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.out(x.transpose(1, 2).reshape(batch, tokens, dim))

    def _mha(self, x: torch.Tensor, padding: torch.Tensor | None, causal: bool) -> torch.Tensor:
        tokens = x.shape[1]
        future = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).triu(1) if causal else None
        key_padding = None if padding is None else ~padding
        x, _ = self.mha(x, x, x, key_padding_mask=key_padding, attn_mask=future, need_weights=False, is_causal=causal)
        return x


class PreNormBlock(nn.Module):
    """x + attention(LayerNorm(x)), then x + fc2(activation(fc1(LayerNorm(x)))) with fc1 to
    `hidden` (4x the width unless given): the pre-norm block of ViT, Whisper and GPT-2."""

    def __init__(
        self,
        dim: int,
        heads: int,
        kind: str,
        activation: Callable[[torch.Tensor], torch.Tensor] = F.gelu,
        hidden: int | None = None,
        eps: float = 1e-5,
        causal: bool = False,
    ) -> None:
        super().__init__()
        self.activation, self.causal = activation, causal
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = SelfAttention(dim, heads, kind)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.fc1 = nn.Linear(dim, hidden or 4 * dim)
        self.fc2 = nn.Linear(hidden or 4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), causal=self.causal)
        return x + self.fc2(self.activation(self.fc1(self.norm2(x))))

"""llama_block: Llama-like decoder blocks (Touvron et al., 2023; grouped-query attention: Ainslie
et al., 2023). Input 1x16 int64 token ids.

As the Llama paper describes its departures from the original transformer: pre-normalisation
by RMSNorm (x / sqrt(mean(x^2) + eps) * w, written by hand with ``pow``, ``mean`` and
``rsqrt``); rotary position embeddings (RoFormer, Su et al.) applied to queries and keys by
cos/sin tables (non-persistent buffers over the 16 positions, each frequency repeated over
the two halves) and ``rotate_half`` (the halves swapped by slicing, the second negated,
``cat``); the SwiGLU feed-forward (w2(silu(w1 x) * w3 x)); no biases. Attention is
grouped-query: 4 query heads share 2 key/value heads, each repeated to its group by
``expand`` and ``reshape``; causal, through ``F.scaled_dot_product_attention`` with
``is_causal``. Then a final RMSNorm and an untied output projection. Here width 32, heads of
8, feed-forward width 64, 2 blocks, 64 tokens; outputs 1x16x64 logits. Rotary embeddings
act between the projections and the attention, so nn.MultiheadAttention cannot express
this block: one variant only.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from kiln.models._common import prepare, seeded

SEED = 46
TOKENS = 16
THETA = 10_000.0


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim).uniform_(0.5, 1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary_tables(positions: int, head_dim: int, theta: float = THETA) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, [positions, head_dim]: angle t * theta^(-2i / head_dim) for frequency i, the
    head_dim / 2 frequencies laid out twice (first half, second half)."""
    inverse = theta ** (-torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(positions).float(), inverse)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[B, kv heads, T, D] -> [B, kv heads * groups, T, D], each head repeated `groups` times in place."""
    batch, heads, tokens, dim = x.shape
    return x[:, :, None].expand(batch, heads, groups, tokens, dim).reshape(batch, heads * groups, tokens, dim)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape
        q = self.q_proj(x).view(batch, tokens, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, tokens, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        x = F.scaled_dot_product_attention(q, repeat_heads(k, groups), repeat_heads(v, groups), is_causal=True)
        return self.o_proj(x.transpose(1, 2).reshape(batch, tokens, -1))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.input_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.post_attention_norm = RMSNorm(dim)
        self.w1 = nn.Linear(dim, hidden, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, dim, bias=False)  # down

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin)
        h = self.post_attention_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(
        self,
        vocab: int = 64,
        positions: int = TOKENS,
        dim: int = 32,
        heads: int = 4,
        kv_heads: int = 2,
        hidden: int = 64,
        depth: int = 2,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([DecoderLayer(dim, heads, kv_heads, hidden) for _ in range(depth)])
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        cos, sin = rotary_tables(positions, dim // heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.lm_head(self.norm(x))


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model (eval mode, deterministic weights and RMSNorm scales) and random token ids."""
    with seeded(SEED):
        model = prepare(Llama())
        return model, (torch.randint(0, model.embed.num_embeddings, (1, TOKENS)),)


ModelUnderTest, ModelInputs = build()

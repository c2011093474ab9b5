"""Single-operator models as users write them: every case the frontend issue lists (the
operators that used to stop a compile), each an nn.Module with its example inputs.

CASES maps a name to (module factory, inputs factory). `combined()` puts every case in one
model (each case reads its own inputs, the outputs are all the cases' outputs in order), so
one firmware image runs them all on the virtual platform.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _seeded(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


class Fn(nn.Module):
    """A module computing fn(*inputs) (with the module's own parameters, if any, as `self`)."""

    def __init__(self, fn: Callable, **parameters):
        super().__init__()
        self.fn = fn
        for name, value in parameters.items():
            setattr(self, name, value)

    def forward(self, *xs):
        return self.fn(self, *xs)


def _conv_then(layer: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), layer)


def _bn() -> nn.Module:
    bn = nn.BatchNorm1d(6)
    bn.running_mean.copy_(_seeded(6, seed=1) * 0.3)
    bn.running_var.copy_(_seeded(6, seed=2).abs() + 0.5)
    bn.weight.data.copy_(_seeded(6, seed=3) * 0.5 + 1)
    bn.bias.data.copy_(_seeded(6, seed=4) * 0.2)
    return bn.eval()


def _inplace_residual(op: str) -> nn.Module:
    def fn(self, x):
        y = torch.relu(x * 1.5)
        getattr(y, op)(x) if op in ("add_", "mul_") else getattr(y, op)()
        return y

    return Fn(fn)


X4 = lambda: (_seeded(1, 3, 8, 8),)  # noqa: E731
X3 = lambda: (_seeded(1, 6, 16),)  # noqa: E731
X2 = lambda: (_seeded(2, 12),)  # noqa: E731
PAIR = lambda: (_seeded(1, 4, 6, seed=0), _seeded(1, 4, 6, seed=1))  # noqa: E731

CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple]]] = {
    # in-place ops and eval-mode no-ops
    "add_": (lambda: _inplace_residual("add_"), X4),
    "relu_": (lambda: _inplace_residual("relu_"), X4),
    "hardswish_": (lambda: Fn(lambda s, x: F.hardswish(x * 2, inplace=True)), X4),
    "silu_": (lambda: Fn(lambda s, x: F.silu(x * 2, inplace=True)), X4),
    "dropout": (lambda: nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(192, 5)).eval(), X4),
    "dropout_": (lambda: Fn(lambda s, x: F.dropout(x * 2, 0.3, training=False, inplace=True)), X4),
    # several outputs
    "chunk": (lambda: Fn(lambda s, x: torch.chunk(x, 2, dim=1)[1] * 2), X3),
    "split": (lambda: Fn(lambda s, x: torch.cat(list(reversed(torch.split(x, [2, 4], dim=1))), 1)), X3),
    "unbind": (lambda: Fn(lambda s, x: torch.unbind(x, 1)[2] + torch.unbind(x, 1)[0]), X3),
    "max_dim": (lambda: Fn(lambda s, x: torch.max(x, dim=-1).values), X3),
    # kept whole: one op with two outputs, on the CPU
    "sort": (lambda: Fn(lambda s, x: torch.sort(x, dim=-1, descending=True).values * 2), X2),
    "topk": (lambda: Fn(lambda s, x: (lambda t: t.values + t.indices.float())(torch.topk(x, 3))), X2),
    # composite and single operators
    "conv1d": (lambda: nn.Conv1d(6, 8, 3, padding=1), X3),
    "div": (lambda: Fn(lambda s, a, b: a / (b.abs() + 0.5)), PAIR),
    "div_scalar": (lambda: Fn(lambda s, x: x / 3.0), X4),
    "gelu": (lambda: nn.GELU(), X4),
    "gelu_tanh": (lambda: nn.GELU(approximate="tanh"), X4),
    "elu": (lambda: nn.ELU(), X4),
    "silu": (lambda: nn.SiLU(), X4),
    "layer_norm": (lambda: nn.LayerNorm(16), X3),
    "group_norm": (lambda: _conv_then(nn.GroupNorm(2, 4)), X4),
    "batch_norm": (_bn, X3),
    "expand": (lambda: Fn(lambda s, x: x[:, :, :1].expand(1, 6, 16) * x), X3),
    "repeat": (lambda: Fn(lambda s, x: x.repeat(1, 2, 1)), X3),
    "stack": (lambda: Fn(lambda s, a, b: torch.stack([a, b], dim=1)), PAIR),
    "select": (lambda: Fn(lambda s, x: x[:, 2]), X3),
    "slice": (lambda: Fn(lambda s, x: x[:, 1:5, 3:11]), X3),
    "minimum": (lambda: Fn(lambda s, a, b: torch.minimum(a, b)), PAIR),
    "maximum": (lambda: Fn(lambda s, a, b: torch.maximum(a, b)), PAIR),
    "rsqrt": (lambda: Fn(lambda s, x: torch.rsqrt(x.abs() + 0.1)), X4),
    "sqrt": (lambda: Fn(lambda s, x: torch.sqrt(x.abs())), X4),
    "abs": (lambda: Fn(lambda s, x: torch.abs(x)), X4),
    "neg": (lambda: Fn(lambda s, x: -x), X4),
    "prelu": (lambda: nn.PReLU(3, 0.2), X4),
    "sin": (lambda: Fn(lambda s, x: torch.sin(x * 2)), X4),
    "floor": (lambda: Fn(lambda s, x: torch.floor(x * 3)), X4),
    "glu": (lambda: nn.GLU(dim=1), X3),
    "var": (lambda: Fn(lambda s, x: torch.var(x, dim=-1, keepdim=True)), X3),
    "cumsum": (lambda: Fn(lambda s, x: torch.cumsum(x, dim=-1)), X3),
    "addmm": (
        lambda: Fn(
            lambda s, x: torch.addmm(s.bias, x, s.weight),
            bias=nn.Parameter(_seeded(5, seed=5)),
            weight=nn.Parameter(_seeded(12, 5, seed=6)),
        ),
        X2,
    ),
    "where_eq": (lambda: Fn(lambda s, a, b: torch.where(torch.round(a) == torch.round(b), a, b)), PAIR),
    "where_gt": (lambda: Fn(lambda s, a, b: torch.where(a > b, a, b * 0.5)), PAIR),
    "where_lt": (lambda: Fn(lambda s, a, b: torch.where(a < 0.2, a, b)), PAIR),
    "mul_int32": (
        lambda: Fn(lambda s, a, b: a * b),
        lambda: (
            torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4),
            torch.arange(12, dtype=torch.int32).reshape(3, 4) - 3,
        ),
    ),
    "pad_reflect": (lambda: Fn(lambda s, x: F.pad(x, [1, 2, 2, 1], mode="reflect")), X4),
    "grouped_conv_transpose": (lambda: nn.ConvTranspose2d(4, 4, 2, stride=2, groups=2), lambda: (_seeded(1, 4, 5, 5),)),
}


class Combined(nn.Module):
    """Every case of `names`, each on its own inputs; returns all their outputs."""

    def __init__(self, names: list[str]):
        super().__init__()
        self.names = list(names)
        self.cases = nn.ModuleList(CASES[n][0]().eval() for n in self.names)
        self.arity = [len(CASES[n][1]()) for n in self.names]

    def forward(self, *xs):
        outputs, i = [], 0
        for case, n in zip(self.cases, self.arity):
            out = case(*xs[i : i + n])
            outputs.extend(out if isinstance(out, tuple) else (out,))
            i += n
        return tuple(outputs)


def combined(names: list[str] | None = None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    names = list(CASES) if names is None else names
    return Combined(names).eval(), tuple(x for n in names for x in CASES[n][1]())

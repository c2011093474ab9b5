"""The lowerings' integer arithmetic over random parameters: for seeded draws of an op, its
shapes (ranks 1-4, broadcast dims), input spreads from 1e-3 to 1e3 and offsets that put the
zero points far from the middle, the TOSA graph on tosa_reference_model is within one step of
the PT2E reference, at int8 and at int16 (the fixed cases of test_lowering.py cover each op's layouts and options;
bench/model_fuzz.py combines ops into random graphs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.compiler.helpers import compare_steps

F = torch.nn.functional
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum, "minimum": torch.minimum}
UNARY = {"sigmoid": torch.sigmoid, "gelu": F.gelu, "tanh": torch.tanh, "hardswish": F.hardswish}
REDUCTIONS = {"mean": torch.mean, "sum": torch.sum, "amax": torch.amax, "amin": torch.amin}
KINDS = ["binary", "scalar", "unary", "reduction", "softmax"]
DRAWS = 40


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def draw(seed: int, kinds=KINDS, reductions=tuple(REDUCTIONS)):
    """(description, module, input shapes, spread, offset) of draw `seed`."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 8, int(rng.integers(1, 5))))
    spread, offset = 10.0 ** rng.uniform(-3, 3), float(rng.uniform(-3, 3))
    kind = kinds[seed % len(kinds)]
    rank = len(shape)
    if kind == "binary":
        name = list(BINARY)[int(rng.integers(len(BINARY)))]
        other = tuple(d if rng.random() < 0.6 else 1 for d in shape)[int(rng.integers(rank)) :]
        return f"{name} {shape} {other}", Fn(BINARY[name]), [shape, other or (1,)], spread, offset
    if kind == "scalar":
        c = float(rng.choice([-1, 1]) * 10.0 ** rng.uniform(-2, 2)) * spread
        name, fn = [("add", lambda x: x + c), ("sub", lambda x: x - c), ("mul", lambda x: x * (c / spread))][
            int(rng.integers(3))
        ]
        return f"{name} scalar {c:g} {shape}", Fn(fn), [shape], spread, offset
    if kind == "unary":
        name = list(UNARY)[int(rng.integers(len(UNARY)))]
        return f"{name} {shape}", Fn(UNARY[name]), [shape], min(spread, 10.0), offset
    if kind == "reduction":
        name = reductions[int(rng.integers(len(reductions)))]
        dims = sorted(int(d) for d in rng.choice(rank, int(rng.integers(1, rank + 1)), replace=False))
        keep = bool(rng.random() < 0.5)
        if all(shape[d] == 1 for d in dims) or (not keep and len(dims) == rank):
            keep = True  # a 0-dimensional or unreduced result is no test of the arithmetic
        return (
            f"{name} {shape} dims {dims} keepdim {keep}",
            Fn(lambda x: REDUCTIONS[name](x, dim=dims, keepdim=keep)),
            [shape],
            spread,
            offset,
        )
    dim = int(rng.integers(rank))
    log = bool(rng.random() < 0.3)
    fn = torch.log_softmax if log else torch.softmax
    return (
        f"{'log_' if log else ''}softmax {shape} dim {dim}",
        Fn(lambda x: fn(x, dim)),
        [shape],
        min(spread, 30.0),
        offset,
    )


@pytest.mark.parametrize("seed", range(DRAWS))
def test_random_op_within_one_step_of_pt2e(seed):
    description, module, shapes, spread, offset = draw(seed)
    g = torch.Generator().manual_seed(seed)
    calibration = [tuple(torch.randn(*s, generator=g) * spread + offset * spread for s in shapes) for _ in range(2)]
    diffs, _ = compare_steps(module, calibration[0], calibration)
    for d in diffs:
        assert d.max() <= 1, f"draw {seed} ({description}, spread {spread:.3g}): up to {d.max()} steps off"


@pytest.mark.parametrize("seed", range(DRAWS // 2))
def test_random_16_bit_op_within_one_step_of_pt2e(seed):
    """The same at int16 for the ops whose arithmetic does not depend on a table's fit (tables
    and amin stay on the CPU where a rule says so; test_tables.py checks that)."""
    description, module, shapes, spread, offset = draw(seed, ["binary", "scalar", "reduction"], ("mean", "sum", "amax"))
    g = torch.Generator().manual_seed(seed)
    calibration = [tuple(torch.randn(*s, generator=g) * spread + offset * spread for s in shapes) for _ in range(2)]
    diffs, _ = compare_steps(module, calibration[0], calibration, bits=16)
    for d in diffs:
        assert d.max() <= 1, f"draw {seed} ({description}, spread {spread:.3g}): up to {d.max()} steps off at int16"

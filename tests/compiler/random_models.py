"""Random small PyTorch models composed from what users write, for the differential model
fuzzer (bench/model_fuzz.py, and a short seeded run in tests/compiler/test_model_fuzz.py).

`generate(seed)` draws a program: one or two inputs of random rank and shape, then a chain
of steps, each applying one op (drawn from STEPS, among those that apply to the shapes at
hand) to one or two live tensors: elementwise functions, arithmetic between tensors (with
broadcasting) and with constants, convolutions, pooling, normalisation, reductions, data
movement, in-place forms, eval-mode dropout, and attention (scaled_dot_product_attention with
and without bool, float and causal masks, and a causal mask written with masked_fill), RMSNorm
and rotary position embeddings (halves rotated, or interleaved pairs).
Branches come from reusing earlier tensors. The same seed always gives the same model, weights and inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

MAX_ELEMENTS = 4096


@dataclass
class Step:
    name: str
    inputs: tuple[int, ...]  # indices of live tensors
    params: dict = field(default_factory=dict)


class RandomModel(torch.nn.Module):
    """forward runs the steps in order; each step's result joins the tensors; the outputs are
    the tensors no step read (at most three), so every branch reaches an output."""

    def __init__(self, steps: list[Step], outputs: list[int]):
        super().__init__()
        self.steps = steps
        self.outputs = outputs
        self.weights = torch.nn.ParameterList()
        for step in steps:
            for key, value in list(step.params.items()):
                if isinstance(value, torch.Tensor):
                    step.params[key] = len(self.weights)
                    step.params.setdefault("_tensors", []).append(key)
                    self.weights.append(torch.nn.Parameter(value, requires_grad=False))

    def forward(self, *inputs):
        env = list(inputs)
        for step in self.steps:
            params = {
                k: (self.weights[v] if k in step.params.get("_tensors", ()) else v)
                for k, v in step.params.items()
                if k != "_tensors"
            }
            env.append(STEPS[step.name].apply([env[i] for i in step.inputs], params))
        return tuple(env[i] for i in self.outputs)


@dataclass(frozen=True)
class Kind:
    """One op a step can apply: `fits(shapes)` says whether it applies to those input shapes;
    `draw(rng, shapes)` its parameters; `apply(tensors, params)` computes it."""

    arity: int
    fits: Callable
    draw: Callable
    apply: Callable


def _t(rng, *shape, scale=0.5):
    return torch.from_numpy(np.asarray(rng.standard_normal(shape) * scale, dtype=np.float32))  # shape () too


def _any(shapes):
    return True


def _none(rng, shapes):
    return {}


def _rank(*ranks):
    return lambda shapes: len(shapes[0]) in ranks


def _unary(fn):
    return Kind(1, _any, _none, lambda xs, p: fn(xs[0]))


def _same(shapes):
    return shapes[0] == shapes[1]


def _broadcastable(shapes):
    a, b = shapes
    return len(a) == len(b) and all(x == y or y == 1 for x, y in zip(a, b))


def _conv_params(rng, shapes):
    c = shapes[0][1]
    groups = c if rng.random() < 0.3 else 1
    out = c if groups > 1 else int(rng.choice([4, 8, 12]))
    k = int(rng.choice([1, 3]))
    return {
        "weight": _t(rng, out, c // groups, k, k, scale=1 / np.sqrt(c // groups * k * k)),
        "bias": _t(rng, out, scale=0.1),
        "stride": int(rng.choice([1, 1, 2])),
        "padding": k // 2,
        "groups": groups,
    }


def _linear_params(rng, shapes):
    n = shapes[0][-1]
    out = int(rng.choice([4, 8, 16]))
    return {"weight": _t(rng, out, n, scale=1 / np.sqrt(n)), "bias": _t(rng, out, scale=0.1)}


def _dims(rng, shapes):
    rank = len(shapes[0])
    count = int(rng.integers(1, rank + 1))
    return {
        "dim": sorted(int(d) for d in rng.choice(rank, size=count, replace=False)),
        "keepdim": bool(rng.random() < 0.5),
    }


def _permutation(rng, shapes):
    return {"dims": [int(d) for d in rng.permutation(len(shapes[0]))]}


def _slice(rng, shapes):
    dim = int(rng.integers(len(shapes[0])))
    size = shapes[0][dim]
    start = int(rng.integers(0, max(size - 1, 1)))
    return {"dim": dim, "start": start, "end": int(rng.integers(start + 1, size + 1))}


def _one_dim(rng, shapes):
    return {"dim": int(rng.integers(len(shapes[0])))}


def _norm_params(rng, shapes):
    return {**_dims(rng, shapes), "ord": float(rng.choice([2.0, 2.0, 1.0, float("inf")]))}


def _cat_with_empty(x, dim: int):
    """x * 1.5 concatenated with torch.tensor([]), a 0-length slice of x and new_zeros with a 0 at
    `dim`: empty operands PyTorch accepts, so the result is x * 1.5."""
    empty = list(x.shape)
    empty[dim] = 0
    return torch.cat([torch.tensor([]), x.narrow(dim, 0, 0), x * 1.5, x.new_zeros(empty)], dim)


def _image(shapes):
    return len(shapes[0]) == 4 and shapes[0][2] >= 2 and shapes[0][3] >= 2


def _pad_params(rng, shapes):
    mode = str(rng.choice(["constant", "reflect", "replicate", "circular"]))
    h, w = shapes[0][2:]
    return {
        "pad": [
            int(rng.integers(0, min(2, w - 1) + 1)),
            int(rng.integers(0, min(2, w - 1) + 1)),
            int(rng.integers(0, min(2, h - 1) + 1)),
            int(rng.integers(0, min(2, h - 1) + 1)),
        ],
        "mode": mode,
    }


def _inplace(name):
    def run(xs, p):
        y = xs[0] * 1.0  # a fresh tensor the in-place op may change
        getattr(y, name)()
        return y

    return Kind(1, _any, _none, run)


def _sequences(shapes):
    """[..., L, E] with L >= 2: attention over the last two dims (query, key and value alike)."""
    return len(shapes[0]) in (3, 4) and shapes[0][-2] >= 2


def _keys_for(shapes):
    """Queries [..., L, E] and keys [..., S, E] with the same batch dims."""
    q, k = shapes
    return _sequences(shapes) and len(q) == len(k) and q[:-2] == k[:-2] and q[-1] == k[-1]


def _keep_mask(rng, shapes):
    """A bool mask [L, L] (as 0/1 floats, a parameter) keeping about 70 % and the diagonal."""
    length = shapes[0][-2]
    keep = (rng.random((length, length)) < 0.7) | np.eye(length, dtype=bool)
    return {"keep": torch.from_numpy(keep.astype(np.float32))}


def _sdpa(**kwargs):
    return lambda xs, p: F.scaled_dot_product_attention(xs[0], xs[-1], xs[-1], **kwargs)


def _causal_softmax(xs, p):
    length = xs[0].shape[-2]
    scores = xs[0] @ xs[0].transpose(-1, -2)
    return scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def _rotary_tables(rng, shapes):
    """cos and sin [L, E] of rotary position embeddings (base 10000) for [..., L, E], E even: the
    angles of the E/2 frequencies, repeated for the halves layout (rotate_half)."""
    length, width = shapes[0][-2:]
    frequencies = 1.0 / 10000 ** (torch.arange(0, width, 2, dtype=torch.float32) / width)
    angles = torch.outer(torch.arange(length, dtype=torch.float32), frequencies)
    angles = torch.cat([angles, angles], -1)
    return {"cos": angles.cos(), "sin": angles.sin()}


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _rotate_pairs(xs, p):
    """Rotary embeddings of interleaved pairs (x[2i], x[2i+1]), as GPT-J and Llama's reference code write them."""
    x = xs[0].unflatten(-1, (-1, 2))
    half = x.shape[-2]
    cos, sin = p["cos"][..., :half], p["sin"][..., :half]
    return torch.stack([x[..., 0] * cos - x[..., 1] * sin, x[..., 0] * sin + x[..., 1] * cos], -1).flatten(-2)


def _rotary_fits(shapes):
    return _sequences(shapes) and shapes[0][-1] % 2 == 0


ATTENTION_STEPS: dict[str, Kind] = {
    # RMSNorm (torch's and the hand-written form) and rotary position embeddings, as decoders write them
    "rms_norm": Kind(
        1,
        _any,
        lambda rng, s: {"w": _t(rng, s[0][-1]) + 1},
        lambda xs, p: F.rms_norm(xs[0], xs[0].shape[-1:], p["w"], 1e-6),
    ),
    "rms_norm_by_hand": Kind(
        1, _any, _none, lambda xs, p: xs[0] * torch.rsqrt(xs[0].pow(2).mean(-1, keepdim=True) + 1e-6)
    ),
    "rotary_halves": Kind(
        1, _rotary_fits, _rotary_tables, lambda xs, p: xs[0] * p["cos"] + _rotate_half(xs[0]) * p["sin"]
    ),
    "rotary_pairs": Kind(1, _rotary_fits, _rotary_tables, _rotate_pairs),
    "sdpa": Kind(1, _sequences, _none, _sdpa()),
    "sdpa_causal": Kind(1, _sequences, _none, _sdpa(is_causal=True)),
    "sdpa_bool_mask": Kind(
        1,
        _sequences,
        _keep_mask,
        lambda xs, p: F.scaled_dot_product_attention(xs[0], xs[0], xs[0], attn_mask=p["keep"] > 0),
    ),
    "sdpa_float_mask": Kind(
        1,
        _sequences,
        lambda rng, s: {"bias": _t(rng, s[0][-2], s[0][-2])},
        lambda xs, p: F.scaled_dot_product_attention(xs[0], xs[0], xs[0], attn_mask=p["bias"]),
    ),
    "sdpa_cross": Kind(2, _keys_for, _none, _sdpa()),
    "causal_softmax": Kind(1, _sequences, _none, _causal_softmax),
}

STEPS: dict[str, Kind] = {
    "relu": _unary(torch.relu),
    "relu6": _unary(F.relu6),
    "sigmoid": _unary(torch.sigmoid),
    "tanh": _unary(torch.tanh),
    "hardswish": _unary(F.hardswish),
    "hardsigmoid": _unary(F.hardsigmoid),
    "gelu": _unary(F.gelu),
    "gelu_tanh": _unary(lambda x: F.gelu(x, approximate="tanh")),
    "silu": _unary(F.silu),
    "elu": _unary(F.elu),
    "leaky_relu": _unary(lambda x: F.leaky_relu(x, 0.1)),
    "abs": _unary(torch.abs),
    "neg": _unary(torch.neg),
    "softplus": _unary(F.softplus),
    "mish": _unary(F.mish),
    "sqrt_of_abs": _unary(lambda x: torch.sqrt(torch.abs(x) + 0.25)),
    "rsqrt_of_abs": _unary(lambda x: torch.rsqrt(torch.abs(x) + 0.25)),
    "sin": _unary(torch.sin),
    "clamp": _unary(lambda x: torch.clamp(x, -0.5, 0.75)),
    "dropout": _unary(lambda x: F.dropout(x, 0.2, training=False)),
    "relu_": _inplace("relu_"),
    "sigmoid_": _inplace("sigmoid_"),
    "add": Kind(2, _broadcastable, _none, lambda xs, p: xs[0] + xs[1]),
    "add_": Kind(2, _broadcastable, _none, lambda xs, p: (xs[0] * 1.0).add_(xs[1])),
    "sub": Kind(2, _broadcastable, _none, lambda xs, p: xs[0] - xs[1]),
    "mul": Kind(2, _broadcastable, _none, lambda xs, p: xs[0] * xs[1]),
    "maximum": Kind(2, _same, _none, lambda xs, p: torch.maximum(xs[0], xs[1])),
    "minimum": Kind(2, _same, _none, lambda xs, p: torch.minimum(xs[0], xs[1])),
    "div": Kind(2, _same, _none, lambda xs, p: xs[0] / (torch.abs(xs[1]) + 1.0)),
    "add_constant": Kind(1, _any, lambda rng, s: {"c": _t(rng, *s[0][1:])}, lambda xs, p: xs[0] + p["c"]),
    "mul_scalar": Kind(
        1, _any, lambda rng, s: {"k": float(rng.choice([-1.5, 0.5, 2.0]))}, lambda xs, p: xs[0] * p["k"]
    ),
    "where": Kind(2, _same, _none, lambda xs, p: torch.where(xs[0] > xs[1], xs[0], xs[1] * 0.5)),
    "conv2d": Kind(
        1,
        _image,
        _conv_params,
        lambda xs, p: F.conv2d(xs[0], p["weight"], p["bias"], p["stride"], p["padding"], 1, p["groups"]),
    ),
    "conv1d": Kind(
        1,
        _rank(3),
        lambda rng, s: {"weight": _t(rng, 8, s[0][1], 3, scale=0.3), "bias": _t(rng, 8)},
        lambda xs, p: F.conv1d(xs[0], p["weight"], p["bias"], padding=1),
    ),
    "linear": Kind(1, _rank(2, 3), _linear_params, lambda xs, p: F.linear(xs[0], p["weight"], p["bias"])),
    "max_pool": Kind(
        1,
        _image,
        lambda rng, s: {"ceil": bool(rng.random() < 0.3)},
        lambda xs, p: F.max_pool2d(xs[0], 2, 2, ceil_mode=p["ceil"]),
    ),
    "avg_pool": Kind(1, _image, _none, lambda xs, p: F.avg_pool2d(xs[0], 2, 2)),
    "global_pool": Kind(1, _rank(4), _none, lambda xs, p: F.adaptive_avg_pool2d(xs[0], 1)),
    "upsample": Kind(1, _rank(4), _none, lambda xs, p: F.interpolate(xs[0], scale_factor=2, mode="nearest")),
    "pad": Kind(1, _image, _pad_params, lambda xs, p: F.pad(xs[0], p["pad"], mode=p["mode"])),
    "batch_norm": Kind(
        1,
        _rank(4),
        lambda rng, s: {
            "mean": _t(rng, s[0][1]),
            "var": _t(rng, s[0][1]).abs() + 0.5,
            "w": _t(rng, s[0][1]) + 1,
            "b": _t(rng, s[0][1]),
        },
        lambda xs, p: F.batch_norm(xs[0], p["mean"], p["var"], p["w"], p["b"], False),
    ),
    "layer_norm": Kind(
        1,
        _any,
        lambda rng, s: {"w": _t(rng, s[0][-1]) + 1, "b": _t(rng, s[0][-1])},
        lambda xs, p: F.layer_norm(xs[0], xs[0].shape[-1:], p["w"], p["b"]),
    ),
    "group_norm": Kind(1, lambda s: len(s[0]) == 4 and s[0][1] % 2 == 0, _none, lambda xs, p: F.group_norm(xs[0], 2)),
    "softmax": Kind(
        1, _any, lambda rng, s: {"dim": int(rng.integers(len(s[0])))}, lambda xs, p: torch.softmax(xs[0], p["dim"])
    ),
    "mean": Kind(1, _any, _dims, lambda xs, p: torch.mean(xs[0], p["dim"], p["keepdim"])),
    "sum": Kind(1, _any, _dims, lambda xs, p: torch.sum(xs[0], p["dim"], p["keepdim"])),
    "amax": Kind(1, _any, _dims, lambda xs, p: torch.amax(xs[0], p["dim"], p["keepdim"])),
    "permute": Kind(1, _any, _permutation, lambda xs, p: xs[0].permute(p["dims"])),
    "transpose": Kind(1, _rank(2, 3, 4), _none, lambda xs, p: xs[0].transpose(-1, -2)),
    "flatten": Kind(1, _rank(3, 4), _none, lambda xs, p: torch.flatten(xs[0], 1)),
    "slice": Kind(1, _any, _slice, lambda xs, p: xs[0].narrow(p["dim"], p["start"], p["end"] - p["start"])),
    "chunk_cat": Kind(
        1,
        lambda s: s[0][-1] % 2 == 0,
        _none,
        lambda xs, p: torch.cat(list(reversed(torch.chunk(xs[0], 2, dim=-1))), dim=-1),
    ),
    "cat": Kind(2, lambda s: s[0][1:] == s[1][1:] and len(s[0]) >= 2, _none, lambda xs, p: torch.cat(xs, dim=0)),
    "cat_last": Kind(2, lambda s: s[0][:-1] == s[1][:-1], _none, lambda xs, p: torch.cat(xs, dim=-1)),
    "stack_sum": Kind(2, _same, _none, lambda xs, p: torch.stack(xs, dim=1).sum(1)),
    # L2 normalisation as retrieval heads and attention variants write it; vector norms of ord 2, 1, inf
    "l2_normalize": Kind(1, _any, _one_dim, lambda xs, p: F.normalize(xs[0], dim=p["dim"])),
    "vector_norm": Kind(
        1, _any, _norm_params, lambda xs, p: torch.linalg.vector_norm(xs[0], p["ord"], p["dim"], p["keepdim"])
    ),
    # a cat with empty operands (a cache of length 0 at a first decode step): an identity
    "cat_empty": Kind(1, _any, _one_dim, lambda xs, p: _cat_with_empty(xs[0], p["dim"])),
    "unsqueeze_expand": Kind(1, _rank(2, 3), _none, lambda xs, p: xs[0].unsqueeze(1).expand(-1, 2, *xs[0].shape[1:])),
    **ATTENTION_STEPS,
}


def _shape_after(kind: Kind, tensors, params) -> tuple[int, ...] | None:
    try:
        with torch.no_grad():
            y = kind.apply(tensors, params)
    except Exception:
        return None
    if not isinstance(y, torch.Tensor) or y.numel() == 0 or y.numel() > MAX_ELEMENTS or y.dim() == 0:
        return None
    return tuple(y.shape)


def generate(seed: int, steps: int | None = None) -> tuple[RandomModel, tuple[torch.Tensor, ...], list[str]]:
    """(model in eval mode, example inputs, the step names) for `seed`."""
    rng = np.random.default_rng(seed)
    rank = int(rng.choice([2, 3, 4, 4]))
    shape = {
        2: lambda: (1, int(rng.choice([8, 16, 32]))),
        3: lambda: (1, int(rng.choice([4, 8])), int(rng.choice([8, 16]))),
        4: lambda: (1, int(rng.choice([3, 4, 8])), int(rng.choice([6, 8, 12])), int(rng.choice([6, 8, 12]))),
    }[rank]()
    inputs = [torch.from_numpy(rng.uniform(-1, 1, shape).astype(np.float32))]
    if rng.random() < 0.3:
        inputs.append(torch.from_numpy(rng.uniform(-1, 1, shape).astype(np.float32)))
    values = list(inputs)  # concrete tensors, to learn each step's shape
    chosen: list[Step] = []
    names = sorted(STEPS)
    for _ in range(steps if steps is not None else int(rng.integers(2, 8))):
        for _attempt in range(20):
            name = str(rng.choice(names))
            kind = STEPS[name]
            # mostly the newest tensor, sometimes an earlier one (a branch)
            first = len(values) - 1 if rng.random() < 0.7 else int(rng.integers(len(values)))
            picks = (first,) if kind.arity == 1 else (first, int(rng.integers(len(values))))
            tensors = [values[i] for i in picks]
            shapes = [tuple(t.shape) for t in tensors]
            if not kind.fits(shapes):
                continue
            params = kind.draw(rng, shapes)
            if _shape_after(kind, tensors, params) is None:
                continue
            with torch.no_grad():
                values.append(kind.apply(tensors, params))
            chosen.append(Step(name, picks, params))
            break
    if not chosen:  # nothing fitted: one step that always does
        chosen.append(Step("relu", (len(values) - 1,)))
        values.append(torch.relu(values[-1]))
    read = {i for step in chosen for i in step.inputs}
    outputs = [i for i in range(len(inputs), len(values)) if i not in read][-3:] or [len(values) - 1]
    model = RandomModel(chosen, outputs).eval()
    return model, tuple(inputs), [s.name for s in chosen]


@dataclass
class Outcome:
    seed: int
    target: str
    steps: list[str]
    error: str | None = None  # the compile's or run's error, one line
    max_steps_off: float = 0.0  # worst |run-host - PT2E| in output quantization steps
    within: float = 1.0  # fraction of output elements within TOLERANCE_STEPS
    npu_ops: int = 0
    cpu_ops: int = 0

    @property
    def failed(self) -> bool:
        return self.error is not None or self.within < TOLERANCE_FRACTION

    def line(self) -> str:
        head = f"seed {self.seed} {self.target} [{' '.join(self.steps)}]"
        if self.error is not None:
            return f"{head}: ERROR {self.error}"
        return (
            f"{head}: {self.npu_ops} NPU / {self.cpu_ops} CPU ops, max {self.max_steps_off:g} steps off PT2E, "
            f"{100 * self.within:.1f} % within {TOLERANCE_STEPS}"
        )


# A fuzz graph matches its PT2E reference when at least this fraction of every output's
# elements is within this many of the output's quantization steps (each NPU op may round
# one step differently from the reference, and a chain of ops can carry that on).
TOLERANCE_STEPS = 2
TOLERANCE_FRACTION = 0.95


def steps_off_pt2e(result, inputs, got) -> tuple[float, float]:
    """(worst steps off, smallest fraction of an output's elements within TOLERANCE_STEPS) of
    run-host's outputs `got` against the PT2E reference of compile result `result`. A step is
    the output's quantization step; a float output (its last op on the CPU in float) counts
    steps of 16 float32 ulps of its largest value; an integer output must be exact. The reference's
    outputs are its returned structure's tensors, depth first (kiln.frontend.export's order)."""
    from kiln.graph import DEQUANTIZE

    with torch.no_grad():
        want = result.quantized_module(*inputs) if result.quantized_module is not None else None
    # what forward returns (a tensor, tuple, dict or dataclass), flattened as the program's outputs are
    want = [w for w in torch.utils._pytree.tree_leaves(want) if isinstance(w, torch.Tensor)]
    worst, within = 0.0, 1.0
    for value, g, w in zip(result.graph.outputs, got, want, strict=True):
        w = w.detach().numpy().astype(np.float64)
        producer = value.producer
        if producer is not None and producer.target in DEQUANTIZE:
            step = float(producer.inputs[0].qparams.scale)
        elif g.dtype.kind == "f":
            step = float(np.finfo(np.float32).eps * max(1.0, np.abs(w).max(initial=0))) * 16
        else:
            step = 1.0
        off = np.rint(np.abs(g.astype(np.float64) - w) / step)
        worst = max(worst, float(off.max(initial=0)))
        within = min(within, float((off <= TOLERANCE_STEPS).mean()) if off.size else 1.0)
    return worst, within


def check(seed: int, target: str, pte_path=None) -> Outcome:
    """Compiles fuzz graph `seed` for `target` and compares `kiln run-host` with the PT2E
    reference on the example inputs; `pte_path` keeps the program for a firmware run."""
    from kiln import compile as kc
    from kiln.errors import KilnError
    from kiln.frontend.export import LoadedModel
    from kiln.reference import run_host as host
    from kiln.spec import CompileSpec

    model, inputs, names = generate(seed)
    outcome = Outcome(seed, target, names)
    try:
        result = kc.compile_model(LoadedModel(f"fuzz{seed}", model, inputs), CompileSpec(target), log=lambda line: None)
        got = host.run(result.pte, [x.numpy() for x in inputs])
    except KilnError as error:
        outcome.error = f"{type(error).__name__}: {error}"
        return outcome
    except Exception as error:  # a crash: what the fuzzer is for
        outcome.error = f"CRASH {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return outcome
    if pte_path is not None:
        pte_path.write_bytes(result.pte)
    places = [p for p in result.report["ops"] if "quantize" not in p["op"]]
    outcome.npu_ops = sum(p["where"] == "npu" for p in places)
    outcome.cpu_ops = len(places) - outcome.npu_ops
    worst, within = steps_off_pt2e(result, inputs, got)
    outcome.max_steps_off, outcome.within = worst, within
    return outcome

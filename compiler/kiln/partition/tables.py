"""What an Ethos-U TABLE computes for a unary function of kiln's graph (the ops of
kiln.vocabulary.TABLE_OPS), shared by the support rule that admits it and the lowering that
emits it.

- int8: 256 entries, one per input, each quantize(f(dequantize(q))) as PT2E's reference
  computes it (float32, PyTorch's own f): exact.
- int16: TOSA's TABLE of 513 int16 entries, entry j the reference at q = 128 j - 32768,
  read as (T[i] << 7) + (T[i + 1] - T[i]) * (q + 32768 & 127) with i = (q + 32768) >> 7, then
  requantized by 2^-7 (RESCALE rounds half up). Between entries it interpolates, so it is
  exact only where f is linear over 128 inputs; `int16_steps` is its largest distance from
  the reference over every input of the op's range, in output steps.
- rsqrt from int16 to int16 is no table of the op's range but of rsqrt over [0.25, 1), read at
  the input normalised by CLZ (kiln.lower.elementwise._rsqrt16): smooth there, so within a step.
"""

from __future__ import annotations

import numpy as np
import torch

from kiln.graph import Op

qd = torch.ops.quantized_decomposed
INT16_ENTRIES = 513
INT16_STEP_BITS = 7  # 128 inputs per entry


def reference(op: Op, q: torch.Tensor) -> np.ndarray:
    """quantize(f(dequantize(q))) for the integers `q` of op's input, in op's output type."""
    x, out = op.inputs[0], op.output
    real = (q.to(torch.int64) - x.qparams.zero_point).to(torch.float32) * torch.tensor(
        x.qparams.scale, dtype=torch.float32
    )
    y = op.target(real, *op.args[1:], **op.kwargs)
    return qd.quantize_per_tensor.default(
        y, out.qparams.scale, out.qparams.zero_point, out.qparams.qmin, out.qparams.qmax, getattr(torch, out.dtype)
    ).numpy()


def int8_table(op: Op) -> np.ndarray:
    return reference(op, torch.arange(-128, 128, dtype=torch.int32)).astype(np.int8)


def int16_table(op: Op) -> np.ndarray:
    """The 513 entries; the last stands for q = 32768, one past int16, which only the
    interpolation towards it from q = 32640..32767 reads."""
    return reference(op, torch.arange(INT16_ENTRIES, dtype=torch.int32) * 128 - 32768).astype(np.int16)


def int16_lookup(table: np.ndarray, q: np.ndarray) -> np.ndarray:
    """TOSA TABLE (int16) of `q` and the RESCALE by 2^-7 after it, as integers."""
    value = q.astype(np.int64) + 32768
    index, fraction = value >> INT16_STEP_BITS, value & ((1 << INT16_STEP_BITS) - 1)
    base, following = table[index].astype(np.int64), table[np.minimum(index + 1, INT16_ENTRIES - 1)].astype(np.int64)
    interpolated = (base << INT16_STEP_BITS) + (following - base) * fraction
    return np.clip((interpolated + (1 << (INT16_STEP_BITS - 1))) >> INT16_STEP_BITS, -32768, 32767)


_STEPS: dict[tuple, int] = {}


def int16_steps(op: Op) -> int:
    """The 16-bit table's largest distance from the reference over op's input range, in steps."""
    x, out = op.inputs[0], op.output
    key = (op.target, repr(op.args[1:]), repr(sorted(op.kwargs.items())), repr(x.qparams), repr(out.qparams))
    if key not in _STEPS:
        q = torch.arange(x.qparams.qmin, x.qparams.qmax + 1, dtype=torch.int32)
        got = int16_lookup(int16_table(op), q.numpy())
        _STEPS[key] = int(np.abs(got - reference(op, q).astype(np.int64)).max())
    return _STEPS[key]


def normalised_rsqrt(op: Op) -> bool:
    """Whether `op` is an rsqrt from int16 to int16, which kiln computes by normalisation."""
    return op.target is torch.ops.aten.rsqrt.default and op.inputs[0].dtype == op.output.dtype == "int16"


def rsqrt16_table() -> tuple[np.ndarray, float]:
    """(entries, unit): entry j, read at t = 128 j - 32768, is rsqrt(m) for m = j / 512 in units
    of `unit` (rsqrt(0.25) = 2 is 32767); entries below m = 0.25, which no input reads, repeat it."""
    unit = 2.0 / 32767
    m = np.maximum(np.arange(INT16_ENTRIES, dtype=np.float64) / 512, 0.25)
    return np.round(m**-0.5 / unit).astype(np.int16), unit

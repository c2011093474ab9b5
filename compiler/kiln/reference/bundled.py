"""`kiln bundle`: a .pte with test cases whose expected outputs are `kiln run-host`'s, as an
ExecuTorch BundledProgram (kiln.pte.bundle), so the firmware can check itself bit for bit.

Cases. Every method whose inputs and outputs are all tensors gets `cases` test cases: the first
from `first` when given (a list of arrays per method name), the rest seeded inputs
(numpy's default_rng(seed)): float32 standard normal; int8, uint8, int16 and bool over their
whole range; int32 and int64 from 0 to INDEX_HIGH - 1 (such inputs are indices or positions:
token ids, cache positions, which a model takes only within its sizes).

Order and state. The firmware runs the suites in the bundle's order, each suite's cases in
order, on one set of memory: a program's state (kiln/runtime/program.h) carries from one case
to the next and from one method to the next. The expected outputs are run-host's over the same
sequence with its state carried alike, so they hold for the firmware's run only in that order.

The program bundled is the .pte without run-host's reference data (kiln.pte.writer.
without_reference_data: the firmware's program); the expected outputs come from the whole file.
"""

from __future__ import annotations

import numpy as np

from kiln.errors import UsageError
from kiln.pte.bundle import Bundle, BundleTensor, MethodCase, MethodSuite, serialize_bundle
from kiln.pte.reader import deserialize
from kiln.pte.schema import NUMPY_DTYPES, Tensor
from kiln.pte.writer import without_reference_data
from kiln.reference import run_host

INDEX_HIGH = 8  # int32/int64 inputs are drawn from 0..INDEX_HIGH - 1


def seeded_input(t: Tensor, rng: np.random.Generator) -> np.ndarray:
    """A seeded value for input tensor `t` (the module docstring's distributions)."""
    dtype = np.dtype(NUMPY_DTYPES[t.scalar_type])
    if dtype == np.float32:
        return rng.standard_normal(t.sizes).astype(np.float32)
    if dtype == np.bool_:
        return rng.integers(0, 2, t.sizes).astype(np.bool_)
    if dtype.itemsize >= 4:
        return rng.integers(0, INDEX_HIGH, t.sizes).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, t.sizes).astype(dtype)


def make_bundle(pte: bytes, cases: int, seed: int = 0, first: dict[str, list[np.ndarray]] | None = None) -> bytes:
    """The .bpte of program `pte` with `cases` cases per method (the module docstring)."""
    if cases < 1:
        raise UsageError(f"a bundle needs at least one case per method, not {cases}")
    f = deserialize(pte)
    rng = np.random.default_rng(seed)
    state: dict[str, np.ndarray] = {}
    suites = []
    for name in f.methods():
        plan = f.method(name)
        ios = [plan.values[i] for i in (*plan.inputs, *plan.outputs)]
        if not all(isinstance(v, Tensor) for v in ios):
            continue  # a constant method: no tensors to check
        inputs = [plan.values[i] for i in plan.inputs]
        suite = []
        for k in range(cases):
            given = (first or {}).get(name) if k == 0 else None
            arrays = _checked(given, inputs, name) if given is not None else [seeded_input(t, rng) for t in inputs]
            expected = run_host.run(pte, arrays, name, state)
            suite.append(
                MethodCase([BundleTensor.of(a) for a in arrays], [BundleTensor.of(np.asarray(a)) for a in expected])
            )
        suites.append(MethodSuite(name, suite))
    return serialize_bundle(Bundle(without_reference_data(f), suites))


def example_case(pte: bytes, arrays: list[np.ndarray]) -> dict[str, list[np.ndarray]] | None:
    """The model's example inputs as the first case of the program's first method, when they are
    of its inputs' types and shapes (a program compiled with --io int8 takes other types): None
    otherwise."""
    plan = deserialize(pte).forward()
    inputs = [plan.values[i] for i in plan.inputs]
    try:
        return {plan.name: _checked(arrays, inputs, plan.name)}
    except UsageError:
        return None


def _checked(arrays: list[np.ndarray], inputs: list[Tensor], method: str) -> list[np.ndarray]:
    """`arrays` as the method's inputs; UsageError naming the first that is not of its type and shape."""
    if len(arrays) != len(inputs):
        raise UsageError(f"method {method} takes {len(inputs)} inputs; {len(arrays)} given for its first case")
    out = []
    for n, (a, t) in enumerate(zip(arrays, inputs)):
        a = np.asarray(a)
        dtype = np.dtype(NUMPY_DTYPES[t.scalar_type])
        if a.dtype != dtype or tuple(a.shape) != tuple(t.sizes):
            raise UsageError(
                f"method {method}'s input {n} is {dtype.name} {list(t.sizes)}; the first case gives "
                f"{a.dtype.name} {list(a.shape)}"
            )
        out.append(a)
    return out

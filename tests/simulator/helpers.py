"""Shared by the NPU model tests: run a Vela-compiled TOSA graph on kiln's NPU model and on
tosa_reference_model, and compare; the zoo models compiled by kiln once per process."""

from __future__ import annotations

import functools

import numpy as np
import tosa_reference_model

from kiln import boards
from kiln.isolation import quiet_native_output
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.standalone import run_compiled

_DTYPES = {1: np.int8, 2: np.int16, 4: np.int32}


def reference(tosa: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    with quiet_native_output():
        outputs, status = tosa_reference_model.run(tosa, inputs)
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID, status
    return outputs


def run_on_model(vela, inputs: list[np.ndarray], target: str, dtypes=None):
    """(outputs, ExecResult) of a kiln.lower.vela.VelaResult run on the NPU model."""
    raw, result = run_compiled(vela, inputs, config_for(target))
    outputs = [
        np.frombuffer(r, (dtypes[i] if dtypes else None) or _DTYPES[t.elem_size])
        for i, (r, t) in enumerate(zip(raw, vela.outputs))
    ]
    return outputs, result


def compare(tosa: bytes, vela, inputs: list[np.ndarray], target: str):
    """(max absolute difference per output, ExecResult); raises on a fault."""
    want = reference(tosa, inputs)
    got, result = run_on_model(vela, inputs, target, [w.dtype for w in want])
    assert result.fault is None, result.fault
    diffs = []
    for g, w in zip(got, want):
        assert g.size == w.size, (g.shape, w.shape)
        diffs.append(int(np.max(np.abs(_integers(g) - _integers(w.reshape(-1))))) if w.size else 0)
    return diffs, result


def int8_inputs(shapes, seed: int) -> list[np.ndarray]:
    """One uniformly random int8 array per shape, from numpy.random.default_rng(seed)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, size=shape, dtype=np.int8) for shape in shapes]


def assert_bit_exact(tosa: bytes, vela, shapes, target: str):
    """The delegate on kiln's NPU model equals tosa_reference_model on int8_inputs(shapes, 0);
    returns the model's ExecResult."""
    diffs, result = compare(tosa, vela, int8_inputs(shapes, 0), target)
    assert diffs == [0] * len(diffs)
    assert result.ops > 0
    return result


def _integers(values: np.ndarray) -> np.ndarray:
    """int64 copy of `values`; a bool array by its bytes (a true stored as 0xFF is not 1)."""
    return (values.view(np.uint8) if values.dtype == bool else values).astype(np.int64)


# ---- batched random differential cases -------------------------------------------------

SYSTEM_CONFIGS = {
    "ethos-u55": "Ethos_U55_High_End_Embedded",
    "ethos-u65": "Ethos_U65_High_End",
    "ethos-u85": "Ethos_U85_SYS_DRAM_Mid",
}


def system_config(target: str) -> str:
    return SYSTEM_CONFIGS[target.rsplit("-", 1)[0]]


def memory_mode(target: str) -> str:
    """The corstone boards' Vela memory mode for `target`'s family (U65: Dedicated_Sram)."""
    return "Dedicated_Sram" if target.startswith("ethos-u65") else "Shared_Sram"


# ---- the zoo models compiled by kiln ----------------------------------------------------

ZOO = ["tiny_cnn", "ds_cnn", "resnet8", "mobilenet_v1_025", "fc_autoencoder", "mobilenet_v2_035", "digits"]


@functools.cache
def compiled_zoo(model: str, target: str = "ethos-u55-128"):
    """(kiln's compile result for `target`, each NPU partition's input shapes) of a zoo or
    architecture model, compiled once per process."""
    from kiln.compile import compile_model
    from kiln.spec import CompileSpec

    result = compile_model(model, CompileSpec(target=target))
    shapes = [[tuple(v.shape) for v in part.inputs] for part in result.partitioning.partitions]
    return result, shapes


def build_batch(seed: int, indices, kinds=None, generators=None):
    """A Graph holding the random subgraphs `indices` of batch `seed`; case i draws from
    numpy.random.default_rng([seed, i]) (its kind too), so (seed, i) reproduces it.
    `generators`: kind -> generator (default npu_cases.GENERATORS)."""
    from tests.simulator import npu_cases

    generators = generators or npu_cases.GENERATORS
    kinds = sorted(kinds or generators)
    graph = npu_cases.Graph()
    for i in indices:
        rng = np.random.default_rng([seed, i])
        kind = kinds[int(rng.integers(len(kinds)))]
        generators[kind](graph, rng)
        graph.descriptions[-1] = f"[seed {seed} case {i} {kind}] {graph.descriptions[-1]}"
    return graph


def _compile_and_compare(graph, name: str, target: str, memory_mode: str):
    from kiln.lower.vela import VelaError, compile_tosa

    tosa = graph.serialize()
    try:
        vela = compile_tosa(tosa, name, target, system_config(target), memory_mode)
    except VelaError as error:
        return None, str(error)
    diffs, _ = compare(tosa, vela, graph.inputs, target)
    return list(zip(graph.descriptions, diffs)), None


def run_batch(seed: int, cases: int, target: str, memory_mode: str, kinds=None, generators=None):
    """Compiles `cases` random cases of batch `seed` in one Vela call and compares every
    output. If Vela rejects the batch, each case is compiled alone. Returns (results,
    rejected): results = [(description, max abs diff)], rejected = [(description, error)]."""
    graph = build_batch(seed, range(cases), kinds, generators)
    results, error = _compile_and_compare(graph, f"batch{seed}", target, memory_mode)
    if results is not None:
        return results, []
    results, rejected = [], []
    for i in range(cases):
        single = build_batch(seed, [i], kinds, generators)
        got, error = _compile_and_compare(single, f"case{seed}_{i}", target, memory_mode)
        if got is None:
            rejected.append((single.descriptions[0], error))
        else:
            results.extend(got)
    return results, rejected


# ---- a PyTorch module through kiln's lowering ---------------------------------------------


def module_on_the_model(
    module,
    shape,
    name: str,
    target: str = "ethos-u55-128",
    bits: int = 8,
    spread: float = 1.0,
    seed: int = 7,
    flipped: frozenset[str] = frozenset(),
):
    """Quantizes `module` (calibrated on two random inputs of `shape`, times `spread`), lowers
    its one NPU partition (nothing but the quantize/dequantize edges may stay on the CPU; the
    lowering choices `flipped` taken against the target's default),
    compiles it with Vela for `target` and runs one random integer input on kiln's NPU model
    and on tosa_reference_model; returns compare()'s (differences, ExecResult)."""
    import torch

    from kiln.lower import tosa as tosa_lowering
    from kiln.lower.vela import compile_tosa
    from tests.compiler.helpers import lower_module

    g = torch.Generator().manual_seed(seed)
    calibration = [(torch.randn(*shape, generator=g) * spread,) for _ in range(2)]
    _, _, parts = lower_module(module, calibration[0], calibration, target, bits=bits)
    (part,) = parts.partitions
    assert not [p for p in parts.placements if p.partition is None and "quantize" not in p.op.op_type]
    tosa = tosa_lowering.lower(part, boards.target(target).npu, flipped)
    vela = compile_tosa(tosa, name, target, system_config(target), "Shared_Sram")
    dtype = np.int8 if bits == 8 else np.int16
    bounds = np.iinfo(dtype)
    inputs = [np.random.default_rng(seed).integers(bounds.min + (bits == 16), bounds.max + 1, shape, dtype=dtype)]
    return compare(tosa, vela, inputs, target)

"""A command stream run again takes kiln.simulator.npu.executor's shorter way (its recorded
operations with frozen registers, the cycle model of its first run) and its operations' weights
kept from before (kiln.simulator.npu.weights.kept); it must compute what the first way
computes: outputs bit for bit equal to tosa_reference_model on new inputs, and the same
outputs, cycles, counters and faults as a first run (every cache cleared) of the same stream
on the same memory, weights changed since included."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kiln.simulator.npu import executor, weights
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.executor import run_stream
from kiln.simulator.npu.memory import FlatMemory
from kiln.simulator.npu.standalone import run_compiled
from tests.simulator import helpers

CASES = [("ethos-u55-128", "ds_cnn"), ("ethos-u85-256", "kwt")]
BASES = (0x1000_0000, 0x2000_0000, 0x3000_0000, 0, 0, 0, 0, 0)


@pytest.mark.parametrize("target, model", CASES)
def test_a_stream_run_again_is_bit_exact_on_new_inputs(target, model):
    result, shapes = helpers.compiled_zoo(model, target)
    executor._recordings.clear()
    for tosa, vela, part_shapes in zip(result.tosa, result.vela, shapes):
        runs = []
        for seed in range(3):
            diffs, run = helpers.compare(tosa, vela, helpers.int8_inputs(part_shapes, seed), target)
            assert diffs == [0] * len(diffs), (seed, diffs)
            runs.append(run)
        assert len({(r.cycles, tuple(sorted(r.counters.items())), r.ops) for r in runs}) == 1
    streams = {(parse_cop1(v.cmd_data).stream.tobytes(), config_for(target)) for v in result.vela}
    assert streams <= set(executor._recordings), "the runs after the first did not take the recorded way"


@pytest.mark.parametrize("target, model", CASES)
def test_a_stream_run_again_at_other_region_bases_is_bit_exact(target, model):
    """The same stream run at one more place than the model keeps prepared operations for (its
    regions moved each time): every run's outputs equal tosa_reference_model's, with the same
    cycles and counters, and the recording keeps operations prepared for the last
    PREPARED_PLACES places only."""
    result, shapes = helpers.compiled_zoo(model, target)
    tosa, vela, part_shapes = result.tosa[0], result.vela[0], shapes[0]
    inputs = helpers.int8_inputs(part_shapes, 1)
    want = [w.astype(w.dtype.newbyteorder("<")).tobytes() for w in helpers.reference(tosa, inputs)]
    executor._recordings.clear()
    runs = []
    for place in range(executor.PREPARED_PLACES + 1):
        bases = tuple(b + place * 0x0100_0000 if b else 0 for b in BASES)
        outputs, run = run_compiled(vela, inputs, config_for(target), bases=bases)
        assert run.fault is None and outputs == want, place
        runs.append((run.cycles, run.counters, run.ops))
    assert all(r == runs[0] for r in runs)
    (recording,) = executor._recordings.values()
    assert len(recording.prepared) == executor.PREPARED_PLACES


def _run_ds_cnn(limits):
    """ds_cnn's delegate on ethos-u55-128 in memory mapped past its buffers, `limits` its
    region limits: (ExecResult, the scratch after the run)."""
    result, _ = helpers.compiled_zoo("ds_cnn", "ethos-u55-128")
    (vela,) = result.vela
    weights = bytearray(vela.weight_data) + bytearray(1 << 20)
    scratch = bytearray(vela.scratch_size + (1 << 20))
    (tensor,) = vela.inputs
    n = int(np.prod(tensor.shape)) * tensor.elem_size
    scratch[tensor.offset : tensor.offset + n] = np.random.default_rng(5).integers(0, 256, n, np.uint8).tobytes()
    memory = FlatMemory({BASES[0]: weights, BASES[1]: scratch})
    run = run_stream(parse_cop1(vela.cmd_data).stream, BASES, memory, config_for("ethos-u55-128"), limits=limits)
    return run, bytes(scratch)


def test_a_stream_that_faults_when_run_again_reports_what_a_first_run_does():
    """Limits that cut the scratch short fault an operation in the middle of the stream: run
    again after a whole run, it leaves the outputs, cycles, counters and fault a first run
    under the same limits leaves."""
    result, _ = helpers.compiled_zoo("ds_cnn", "ethos-u55-128")
    (vela,) = result.vela
    limits = (len(vela.weight_data), vela.scratch_size // 2, 0, 0, 0, 0, 0, 0)
    executor._recordings.clear()
    first, first_scratch = _run_ds_cnn(limits)
    assert first.fault is not None and first.fault.kind == "bus_error" and 0 < first.fault.command_index
    whole, _ = _run_ds_cnn(None)
    assert whole.fault is None
    again, again_scratch = _run_ds_cnn(limits)
    assert again.fault == first.fault
    assert (again.cycles, again.counters, again.ops) == (first.cycles, first.counters, first.ops)
    assert again_scratch == first_scratch
    assert first.cycles < whole.cycles


def _clear_caches():
    executor._recordings.clear()
    weights._kept.clear()
    weights._decoded.cache.clear()


@pytest.mark.parametrize("target, model", CASES)
def test_weights_changed_since_the_last_run_are_decoded_again(target, model):
    """Every 61st byte of the weights changed after a run: the run again equals a first run on
    the changed weights (caches cleared), and differs from the run before the change."""
    result, shapes = helpers.compiled_zoo(model, target)
    vela, part_shapes = result.vela[0], shapes[0]
    inputs = helpers.int8_inputs(part_shapes, 0)
    _clear_caches()
    before, _ = helpers.run_on_model(vela, inputs, target)
    data = np.frombuffer(vela.weight_data, np.uint8).copy()
    data[::61] ^= 0x5A
    changed = dataclasses.replace(vela, weight_data=data.tobytes())
    again, again_run = helpers.run_on_model(changed, inputs, target)
    _clear_caches()
    first, first_run = helpers.run_on_model(changed, inputs, target)
    assert again_run.fault == first_run.fault
    assert (again_run.cycles, again_run.counters) == (first_run.cycles, first_run.counters)
    assert all(np.array_equal(a, f) for a, f in zip(again, first))
    assert first_run.fault is not None or not all(np.array_equal(a, b) for a, b in zip(again, before))

"""`kiln profile digits --etdump FILE --output DIR`: the runner that records an ETDump
(executor_runner_etdump) runs digits on the virtual platform, the host writes what it printed to
FILE, and ExecuTorch 1.5.1's devtools Inspector (run in ExecuTorch's own environment) reads it: one
row per NPU layer and one for the delegate call, named by the layer's module path and op, lasting
the NPU cycles the same command's profile.json gives each layer; the delegate call's, measured by
the firmware's PMU, equals the host profile's count for the stream and the PMU total the firmware
printed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kiln import flow
from kiln.errors import RunnerError
from kiln.firmware import runner_build
from kiln.pte.reader import deserialize
from kiln.pte.schema import NUMPY_DTYPES, DelegateCall
from kiln.reference import etdump
from tests.compiler.test_pte import et_tool, needs_executorch

pytestmark = [pytest.mark.fvp, needs_executorch]


def _inspected(path) -> dict:
    return et_tool("et_etdump.py", path, "--inspector")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """profile.json's layers and totals, and the folder (ETDump, the runner's files in runner/)."""
    from kiln import cli

    out = tmp_path_factory.mktemp("etdump")
    status = cli.main(
        ["profile", "digits", "--target=ethos-u55-128", f"--output={out}", f"--etdump={out / 'digits.etdp'}"]
    )
    assert status == 0
    return json.loads((out / "profile.json").read_text()), out


def test_the_inspector_shows_a_row_per_npu_layer_and_the_delegate_call(profiled):
    p, out = profiled
    read = _inspected(out / "digits.etdp")
    # digits' NPU layers as kiln profile reports them, in run order: "MODULE OP", its NPU cycles
    npu = sorted((x for x in p["layers"] if x["where"] == "npu" and x["commands"]), key=lambda x: x["start_cycle"])
    assert [x["module"] for x in npu] == ["conv1", "conv2", "flatten", "fc1", "fc2"]
    expected = [(f"{x['module']} {x['op']}", [float(x["npu_cycles"])]) for x in npu]
    rows = read["inspector"]
    assert all(r["event_block_name"] == "Execute" for r in rows)
    total = p["total_npu_cycles"]
    assert [(r["event_name"], r["raw"]) for r in rows] == [*expected, ("DELEGATE_CALL", [float(total)])]
    assert [r["is_delegated_op"] for r in rows] == [True] * len(npu) + [False]
    # the delegate call's cycles are the firmware's PMU count: its own NPU PMU line's total
    assert p["platform_pmu_cycles"] == p["delegates"][0]["pmu_cycles"] == total


def test_the_events_carry_the_delegate_calls_instruction(profiled):
    p, out = profiled
    (run,) = _inspected(out / "digits.etdp")["etdump"]["run_data"]
    events = [e["profile_event"] for e in run["events"]]
    instructions = deserialize((out / "runner" / "digits.pte").read_bytes()).forward().chains[0].instructions
    call = next(i for i, instruction in enumerate(instructions) if isinstance(instruction, DelegateCall))
    assert {(e["instruction_id"], e["chain_index"]) for e in events} == {(call, 0)}
    layers, delegate_call = events[:-1], events[-1]
    assert delegate_call["name"] == "DELEGATE_CALL" and delegate_call["delegate_debug_id_str"] is None
    assert all(e["name"] is None and e["delegate_debug_id_int"] == -1 for e in layers)
    # the layers tile the call's span, one after another
    assert layers[0]["start_time"] == delegate_call["start_time"] == 0
    assert all(a["end_time"] == b["start_time"] for a, b in zip(layers, layers[1:]))
    assert layers[-1]["end_time"] == delegate_call["end_time"] == p["total_npu_cycles"]


def test_one_run_data_per_inference(profiled, tmp_path):
    _, out = profiled
    work = out / "runner"
    elf = work / "runner" / "cmake" / f"{runner_build.ETDUMP_APP}.elf"
    inputs, _ = flow.program_io(work / "digits.pte")
    rng = np.random.default_rng(3)
    samples = [[rng.integers(-128, 128, t.sizes).astype(NUMPY_DTYPES[t.scalar_type]) for t in inputs] for _ in range(3)]
    done = flow.infer(elf, "ethos-u55-128", work / "digits.pte", samples, tmp_path, platform="virtual")
    assert done.complete, done.log
    (tmp_path / "three.etdp").write_bytes(etdump.collect(done.run.uart))
    read = _inspected(tmp_path / "three.etdp")
    assert [r["name"] for r in read["etdump"]["run_data"]] == ["Execute"] * 3
    # the Inspector groups the three runs into one block: each row holds one duration per run
    rows = read["inspector"]
    assert rows[-1]["event_name"] == "DELEGATE_CALL"
    assert rows[-1]["raw"] == [float(c) for c in done.npu_cycles]
    assert all(len(r["raw"]) == 3 for r in rows)


def test_a_record_beyond_the_runners_storage_is_refused(profiled, tmp_path):
    """22 inferences of digits' 6 events: 132, more than the runner keeps (128, etdump_profiling.cpp);
    the inferences still succeed, the runner says the record is incomplete and kiln refuses it."""
    _, out = profiled
    work = out / "runner"
    elf = work / "runner" / "cmake" / f"{runner_build.ETDUMP_APP}.elf"
    inputs, _ = flow.program_io(work / "digits.pte")
    samples = [[np.zeros(t.sizes, NUMPY_DTYPES[t.scalar_type]) for t in inputs] for _ in range(22)]
    done = flow.infer(elf, "ethos-u55-128", work / "digits.pte", samples, tmp_path, platform="virtual")
    assert done.complete, done.log
    assert "runner: ETDump: more than 32 inferences or 128 events; the rest were not recorded" in done.run.uart
    with pytest.raises(RunnerError, match="incomplete"):
        etdump.collect(done.run.uart)

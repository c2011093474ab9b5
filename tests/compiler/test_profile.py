"""`kiln profile` (kiln.reference.profile): per-layer NPU cycles that add up to the run's PMU
count (checked against an independent run of each delegate's stream, run_compiled), per-layer
agreement with Vela's own per-layer estimate, the profile.json fields and the pictures."""

from __future__ import annotations

import json

import pytest

from kiln import compile as kc
from kiln.reference import profile
from kiln.simulator.npu.config import config_for
from kiln.simulator.npu.pmu import beat_bytes as pmu_beat_bytes
from kiln.simulator.npu.standalone import run_compiled
from kiln.spec import CompileSpec

CASES = [
    ("tiny_cnn", "ethos-u55-128"),
    ("tiny_cnn", "ethos-u85-256"),
    ("digits", "ethos-u55-128"),
    ("digits", "ethos-u85-256"),
]
_cache: dict = {}


def profiled(model: str, target: str):
    if (model, target) not in _cache:
        result = kc.compile_model(model, CompileSpec(target), log=lambda line: None)
        _cache[(model, target)] = result, profile.profile(result)
    return _cache[(model, target)]


@pytest.mark.parametrize("model, target", CASES)
def test_layers_add_up_to_the_runs_pmu_cycles(model, target):
    result, p = profiled(model, target)
    report = result.report
    config = config_for(target, report["system_config"], report["memory_mode"])
    pmu, beats = 0, {}
    for compiled in result.vela:  # the compiled program's own streams, run as run-host runs them
        _, run = run_compiled(compiled, profile._inputs(compiled), config)
        assert run.fault is None
        pmu += run.cycles
        for name, count in run.counters.items():
            if name.startswith("axi"):
                beats[name] = beats.get(name, 0) + count
    assert sum(layer.npu_cycles or 0 for layer in p.layers) == p.total_npu_cycles == pmu
    # the layers' bytes per AXI port are the run's data beats (one delegate in these models)
    beat = pmu_beat_bytes(config)
    for port in ("axi0", "axi1"):
        for direction, counter in (
            ("read", f"{port}_rd_data_beat_received"),
            ("write", f"{port}_wr_data_beat_written"),
        ):
            moved = sum(layer.axi_bytes.get(port, {}).get(direction, 0) for layer in p.layers)
            assert -(-moved // beat) == beats[counter], (port, direction)
    npu = [layer for layer in p.layers if layer.where == "npu" and layer.commands]
    assert npu and all(layer.module for layer in npu), [(x.name, x.module) for x in npu]
    assert all(
        layer.npu_cycles is None and layer.cpu_instructions is None for layer in p.layers if layer.where == "cpu"
    )


@pytest.mark.parametrize("model, target", CASES)
def test_layers_agree_with_velas_per_layer_estimate(model, target):
    _, p = profiled(model, target)
    compared = [layer for layer in p.layers if layer.agreement is not None]
    assert len(compared) >= 4
    off = [(x.name, x.npu_cycles, x.vela_npu_cycles) for x in compared if abs(x.agreement - 1) > profile.TOLERANCE]
    assert not off, off
    assert sum(x.vela_npu_cycles for x in compared) == sum(d.vela_npu_cycles for d in p.delegates)


def test_every_command_goes_to_the_op_it_came_from():
    """tiny_cnn's four NPU layers are its conv1, conv2, pool and fc; the flatten runs no command."""
    result, p = profiled("tiny_cnn", "ethos-u55-128")
    ran = {layer.module: layer for layer in p.layers if layer.commands}
    assert set(ran) == {"conv1", "conv2", "pool", "fc"}
    pooled = "pooled_means" in result.flipped[0]  # the global mean's form compile_model kept
    assert ("AvgPool" if pooled else "ReduceSum") in " ".join(ran["pool"].vela_operations)
    assert ran["conv1"].bytes["weights"]["read"] > 0 and ran["conv1"].bytes["scratch"]["write"] == 8 * 8 * 8


def test_profile_json_pictures_and_html(tmp_path):
    _, p = profiled("tiny_cnn", "ethos-u85-256")
    written = profile.write(p, tmp_path)
    assert {path.name for path in written} == {"profile.json", "timeline.png", "memory.png", "profile.html"}
    data = json.loads((tmp_path / "profile.json").read_text())
    assert data["total_npu_cycles"] == sum(layer["npu_cycles"] or 0 for layer in data["layers"])
    for layer in data["layers"]:
        assert {
            "name",
            "module",
            "where",
            "npu_cycles",
            "vela_npu_cycles",
            "bytes",
            "axi_bytes",
            "cpu_instructions",
        } <= set(layer)
    assert data["cpu_instructions_measured"] is False
    for name in ("timeline.png", "memory.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "profile.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "conv2d_1" in page


def test_a_pte_is_profiled_by_its_tosa_operators(tmp_path):
    """A .pte with its report: the same commands and cycles, its layers named after the TOSA
    operators Vela's operations came from."""
    result, p = profiled("tiny_cnn", "ethos-u55-128")
    kc.write(result, tmp_path / "tiny_cnn.pte")
    from_pte = profile.profile_pte(tmp_path / "tiny_cnn.pte")
    assert from_pte.total_npu_cycles == p.total_npu_cycles == sum(x.npu_cycles or 0 for x in from_pte.layers)
    npu = [x for x in from_pte.layers if x.where == "npu"]
    mean = "AVG_POOL2D" if "pooled_means" in result.flipped[0] else "REDUCE_SUM"  # the form compile_model kept
    assert [x.name.split()[0] for x in npu] == ["CONV2D", "CONV2D", mean, "CONV2D"]
    assert [x.npu_cycles for x in npu] == [x.npu_cycles for x in p.layers if x.where == "npu" and x.commands]
    assert [x.name for x in from_pte.layers if x.where == "cpu"] == [x.name for x in p.layers if x.where == "cpu"]

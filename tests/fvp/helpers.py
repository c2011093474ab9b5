"""What the end-to-end tests share: programs compiled as `kiln compile` writes them, random
samples of a program's inputs, the firmware's outputs compared with `kiln run-host`'s bit for bit,
and the runner's NPU PMU lines checked against the NPU model's own counts. Firmware runs through
kiln.flow, as every kiln command runs it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kiln import flow
from kiln.pte.schema import NUMPY_DTYPES, Tensor
from kiln.simulator.protocol import PMU_EVENTS
from kiln.simulator.run import RunResult
from kiln.spec import CompileSpec
from tests.helpers import locked


def compiled(work: Path, model: str, target="ethos-u55-128", **spec) -> Path:
    """kiln compile's .pte and report (as the CLI writes them) for `model` (a zoo name or a model
    file), once per test run in its `work` folder (tests/fvp/conftest.py). Shared with other tests:
    read it, never change it."""
    name = "-".join([Path(model).stem, target, *(f"{k}={v}" for k, v in sorted(spec.items()))])
    path = work / f"{name}.pte"
    with locked(path):
        if not path.exists():
            flow.compile_pte(model, CompileSpec(target=target, **spec), path, log=lambda line: None)
    return path


def random_samples(pte_path: Path, count: int, seed: int) -> list[list[np.ndarray]]:
    """Float inputs uniform in [-1, 1]; integer inputs (--io int8) over their type's whole range."""
    inputs, _ = flow.program_io(pte_path)
    rng = np.random.default_rng(seed)

    def sample(t: Tensor) -> np.ndarray:
        dtype = np.dtype(NUMPY_DTYPES[t.scalar_type])
        if dtype.kind == "f":
            return rng.uniform(-1.0, 1.0, size=t.sizes).astype(dtype)
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=t.sizes, dtype=dtype, endpoint=True)

    return [[sample(t) for t in inputs] for _ in range(count)]


def assert_matches_host(pte_path: Path, elf: Path, target: str, samples, work: Path | None = None) -> flow.Inferences:
    """The runner `elf` built for `pte_path`, run on the virtual platform over `samples` (its files
    in `work`), finishes every inference with outputs equal to run-host's bit for bit."""
    result = flow.infer(elf, target, pte_path, samples, work, platform="virtual", timeout=300)
    assert result.status == 0, result.log
    assert len(result.npu_cycles) == len(samples), result.log
    assert flow.compare(pte_path, samples, result.outputs) == []
    return result


def assert_pmu_lines_are_the_models(run: RunResult, inferences: int, u85: bool):
    """One PMU line per inference, whose counts summed over the run are what the NPU model
    counted independently (its totals: the cycle estimate of every stream, its AXI beats):
    total = active = the estimate, idle 0 (the model runs a stream in no virtual time); the
    U55/U65 count no AXI1 write beats (4 event counters), the U85 does."""
    pmu = [i.pmu for i in run.transcript.inferences]
    assert len(pmu) == inferences and all(pmu), "\n".join(run.uart)
    printed = sum(1 for line in run.uart if line.startswith("NPU PMU: "))
    assert printed == inferences, "\n".join(run.uart)  # each such line read as one inference's
    model = run.npu
    assert model is not None and model.streams >= inferences, run.npu_summary
    assert sum(p.total for p in pmu) == sum(p.active for p in pmu) == model.cycles > 0
    assert sum(p.idle for p in pmu) == 0
    beats = [sum(p.beats[event] or 0 for p in pmu) for event in PMU_EVENTS]
    assert beats[:3] == list(model.beats[:3])
    if u85:
        assert all(p.beats["axi1_wr"] is not None for p in pmu) and beats[3] == model.beats[3]
    else:
        assert all(p.beats["axi1_wr"] is None for p in pmu)

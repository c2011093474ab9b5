"""One point's figures: the pure function a sweep runs on each point, in any process.

evaluate(point) compiles the point's model (kiln.flow.compile_pte, into a temporary folder it
removes) and returns a record, a dict of JSON values:

    point      the point's fields
    status     "ok"; "does-not-fit" (it compiled, the board's memory cannot hold it);
               "refused" (kiln refused it: an unknown mode for the target, an op no rule lowers,
               ...); "error" (anything else: a bug, reported, not raised)
    reason     why, for any status but "ok" (the error's one-line message)
    stage      the compile stage it failed in, where known
    figures    (ok and does-not-fit) the system config and memory mode (resolved), Vela's
               estimates and the memory the program needs:
               npu_cycles, npu_total_cycles (Vela's cycles with the memory accesses it waits for),
               npu_clock_hz, latency_ms (Vela's inference time of the NPU's work: ops on the CPU
               are not in it), sram_bytes (the run-time RAM: the CPU's planned buffer and the
               NPU's scratch and fast scratch), flash_bytes (the .pte the firmware keeps), regions
               (each board region's need and room), cpu_ops (each op left on the CPU with its
               reason), npu_macs_share, pte_sha256 (ok only: the .pte's SHA-256)
    layers     (profile points) each layer's Vela cycle estimate and kiln's NPU model's cycles
               (kiln.reference.profile); the NPU model's cycles follow Vela's performance model
    platform   (run points) the firmware on kiln's virtual platform (run_firmware): exit status,
               NPU PMU cycles per inference (the NPU model follows Vela's performance model),
               whether its outputs equal `kiln run-host`'s bit for bit
    seconds    how long the point took; with `worker` (the process's host and pid, and the wall-clock
               times the point started and ended there, seconds since the epoch) the only fields
               that vary between equal runs
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import socket
import tempfile
import time
from pathlib import Path

from kiln.errors import KilnError, RunnerBuildError
from kiln.sweep.points import Point

STATUSES = ("ok", "does-not-fit", "refused", "error")
PTE_ENTRY = "the .pte"  # kiln.firmware.runner_build.fit's name for the program in a one-model image


def _quiet(*_args, **_kwargs) -> None:
    """A compile's log, dropped: a sweep prints its own progress."""


def figures(report: dict) -> dict:
    """The sweep's figures of a compile report (kiln.compile.make_report, with memory.regions)."""
    memory = report["memory"]
    regions = memory.get("regions", [])
    flash = sum(r["placed"].get(PTE_ENTRY, 0) for r in regions)
    return {
        "system_config": report["system_config"],
        "memory_mode": report["memory_mode"],
        "npu_cycles": report["npu_cycles"],
        "npu_total_cycles": report["npu_total_cycles"],
        "npu_clock_hz": report["npu_clock_hz"],
        "latency_ms": report["npu_inference_ms"],
        "sram_bytes": memory["planned_bytes"] + memory["scratch_bytes"] + memory["fast_scratch_bytes"],
        "flash_bytes": flash,
        "pte_bytes": memory["pte_bytes"],
        "regions": {r["region"]: {"need": r["need"], "room": r["room"], "fits": r["fits"]} for r in regions},
        "delegates": len(report["delegates"]),
        "npu_macs_share": report["macs"]["npu_share"],
        "cpu_ops": [
            {"node": o["node"], "op": o["op"], "reason": o["reason"]} for o in report["ops"] if o["where"] == "cpu"
        ],
    }


def _layers(result, point: Point) -> list[dict]:
    from kiln import boards
    from kiln.reference import profile

    p = profile.profile(result, boards.resolve(point.target, point.board))
    keep = ("name", "op", "module", "where", "delegate", "npu_cycles", "vela_npu_cycles")
    return [{k: getattr(layer, k) for k in keep} for layer in p.layers]


SAMPLES = 2  # inferences per run on the virtual platform
SEED = 0  # of their inputs


def samples(pte: Path) -> list[list]:
    """SAMPLES inputs of the program's types and shapes, drawn from a generator seeded SEED: floats
    standard normal, integers uniform over their type's range."""
    import numpy as np

    from kiln import flow
    from kiln.pte.schema import NUMPY_DTYPES

    rng = np.random.default_rng(SEED)
    inputs, _ = flow.program_io(pte)
    out = []
    for _ in range(SAMPLES):
        sample = []
        for tensor in inputs:
            dtype = np.dtype(NUMPY_DTYPES[tensor.scalar_type])
            if dtype.kind == "f":
                sample.append(rng.standard_normal(tensor.sizes).astype(dtype))
            else:
                info = np.iinfo(dtype)
                sample.append(rng.integers(info.min, info.max, tensor.sizes, endpoint=True, dtype=dtype))
        out.append(sample)
    return out


def run_firmware(point: Point, pte: Path) -> dict:
    """kiln's executor runner for `pte`, built and run on kiln's virtual platform over samples():
    its exit status, each inference's NPU PMU cycles (the NPU model's, which follows Vela's
    performance model), and where its outputs differ from `kiln run-host`'s (none: equal, bit
    for bit)."""
    from kiln import boards, flow

    target = boards.resolve(point.target, point.board)
    elf = flow.build_runner(pte, target, memory_mode=point.memory_mode, output=pte.parent / "build", echo=_quiet)
    inputs = samples(pte)
    done = flow.infer(elf, target, pte, inputs, work=pte.parent / "run", platform="virtual")
    differ = flow.compare(pte, inputs, done.outputs) if done.complete else ["the runner did not finish"]
    return {
        "status": done.status,
        "pmu_cycles": done.npu_cycles,
        "output_equal_host": not differ,
        "differences": differ,
    }


def _failure(record: dict, status: str, error: BaseException, output: Path) -> None:
    record.update(status=status, reason=str(error).splitlines()[0] if str(error) else type(error).__name__)
    failed = getattr(error, "report", {}).get("failed")
    if failed:
        record["stage"] = failed["stage"]
    report = output.with_suffix(".json")
    if status == "does-not-fit" and report.is_file():  # compiled: the figures say by how much it does not fit
        record["figures"] = figures(json.loads(report.read_text()))


def evaluate(point: Point) -> dict:
    """The record of `point` (see the module's docstring). Never raises for a point's own failure."""
    from kiln import flow

    record: dict = {"point": dataclasses.asdict(point), "status": "ok"}
    start, started = time.perf_counter(), time.time()
    logging.getLogger("kiln").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="kiln-sweep-") as work:
        output = Path(work) / "model.pte"
        try:
            result, report = flow.compile_pte(point.model, point.spec(), output, log=_quiet)
            record["figures"] = figures(json.loads(report.read_text()))
            record["figures"]["pte_sha256"] = hashlib.sha256(output.read_bytes()).hexdigest()
            if point.profile:
                record["layers"] = _layers(result, point)
            if point.run:
                record["platform"] = run_firmware(point, output)
        except RunnerBuildError as error:
            _failure(record, "does-not-fit", error, output)
        except KilnError as error:
            _failure(record, "refused", error, output)
        except Exception as error:  # a bug in one point is that point's result, not the sweep's end
            _failure(record, "error", error, output)
            record["reason"] = f"{type(error).__name__}: {record['reason']}"
    record["seconds"] = round(time.perf_counter() - start, 3)
    record["worker"] = {"pid": os.getpid(), "host": socket.gethostname(), "start": started, "end": time.time()}
    return record

"""What kiln's NPU attachment to QEMU costs, and whole NPU inferences on the virtual platform.

    .venv/bin/python bench/virtual_platform.py [--runs N] [--mib N] [--models tiny_cnn,mobilenet_v2,...]
    .venv/bin/python bench/virtual_platform.py --per-inference MODEL[,MODEL...] [--target ethos-u85-256]
        [--samples 1,11] [--memory-mode MODE]

Prints: start-up overhead (hello with and without the NPU attachment), the wall time
per intercepted NPU register access (an app that reads the ID register 1000 times),
the time to move N MiB of SRAM through gdb each way, and per zoo model (compiled for
ethos-u55-128 with its board defaults) the wall time of one whole inference through
kiln's driver on the virtual platform (QEMU start to exit), the share spent running
the stream in the NPU model, the data moved through gdb, NPU cycles (model vs Vela) and
whether the output equals tosa_reference_model's bit for bit.

--per-inference: each MODEL (a zoo name or a .py file) compiled for --target, built into
kiln's executor runner and run on the virtual platform twice, over the two --samples counts
of inputs (the model's example inputs, rolled by one along their last axis per sample); per
inference, what the second run took more than the first divided by the extra samples: the
wall time, split as the NPU attachment clocks it (kiln.simulator.attach.HostTimes) into QEMU
(the CPU running between NPU register accesses: the runtime, the kernels, the driver, and each
stop's round trip), the NPU model (running command streams) and the attachment (the rest of
serving the accesses: gdb traffic, registers); then the first run's wall time (QEMU's start,
the first inference with its one-time work: imports, weight decoding) and whether the outputs
equal `kiln run-host`'s bit for bit. Beside the wall time, the CPU time per inference (on a loaded
machine wall time also counts the waits for a core): the NPU model's and the attachment's (the
attachment thread's clock, HostTimes.streams_cpu and accesses_cpu), the simulator's process in
all, and QEMU's (the child's user and system time).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from kiln import boards
from kiln.firmware import build as firmware
from kiln.simulator import run
from kiln.simulator.attach import NpuAttachment
from kiln.simulator.gdb import GdbClient
from kiln.simulator.npu_job import APP, OUTPUT, write_job

TARGET = "ethos-u55-128"
MODELS = (
    "tiny_cnn",
    "digits",
    "ds_cnn",
    "resnet8",
    "mobilenet_v1_025",
    "fc_autoencoder",
    "mobilenet_v2_035",
    "mobilenet_v2",
)


def timed_runs(elf: Path, runs: int, **options) -> list[float]:
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        result = run.run(elf, TARGET, platform="virtual", **options)
        walls.append(time.perf_counter() - start)
        if result.status != 0:
            sys.exit(f"{elf.name} failed with status {result.status}: {result.uart[-3:]} {result.npu_error or ''}")
    return walls


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1e3:.0f} ms (min {min(values) * 1e3:.0f}, max {max(values) * 1e3:.0f})"


def startup_and_access_cost(build: Path, runs: int):
    hello = build / "hello.elf"
    bare = timed_runs(hello, runs, npu_model=False)
    attached = timed_runs(hello, runs)
    print(f"hello without the NPU attachment: {ms(bare)}")
    print(f"hello with the NPU attachment:    {ms(attached)}")
    print(f"  start-up overhead: {(statistics.median(attached) - statistics.median(bare)) * 1e3:.0f} ms")
    poke = timed_runs(firmware.elf(build, "kiln_test_npu_poke"), runs)
    per_access = (statistics.median(poke) - statistics.median(attached)) / 1001
    print(f"1001 intercepted NPU register reads: {ms(poke)}; {per_access * 1e3:.2f} ms per access")


def gdb_transfer(build: Path, mib: int):
    """Times reading and writing `mib` MiB of the board's SRAM through the gdbstub."""
    target = boards.target(TARGET)
    sram = target.board.region_for("npu")
    size = min(mib << 20, sram.size)
    attachment = NpuAttachment(target)
    command = [
        "qemu-system-arm",
        *attachment.qemu_args(),
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        "null",
        "-kernel",
        str(build / "hello.elf"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        gdb = GdbClient(attachment.connect(lambda: process.poll() is None))
        gdb.read_target_description()
        data = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes()
        start = time.perf_counter()
        gdb.write_memory(sram.base, data)
        wrote = time.perf_counter() - start
        start = time.perf_counter()
        back = gdb.read_memory(sram.base, size)
        read = time.perf_counter() - start
        assert back == data, "SRAM read back through gdb differs from what was written"
    finally:
        process.kill()
        process.wait()
        attachment.close()
    mib_moved = size / (1 << 20)
    print(
        f"{mib_moved:g} MiB of SRAM through gdb: write {wrote:.2f} s ({mib_moved / wrote:.1f} MiB/s), "
        f"read {read:.2f} s ({mib_moved / read:.1f} MiB/s)"
    )


def inference(build: Path, name: str, work: Path) -> str:
    from kiln.compile import compile_model
    from kiln.spec import CompileSpec
    from tests.compiler.helpers import run_tosa  # tests/ helper: tosa_reference_model in-process

    compiled = compile_model(name, CompileSpec(target=TARGET))
    if len(compiled.vela) != 1:
        return f"{name:18} skipped: {len(compiled.vela)} NPU delegates (the test app runs one)"
    vela = compiled.vela[0]
    if len(vela.inputs) != 1 or len(vela.outputs) != 1:
        return f"{name:18} skipped: {len(vela.inputs)} inputs, {len(vela.outputs)} outputs (the test app runs one each)"
    directory = work / name
    directory.mkdir()
    x = np.random.default_rng(0).integers(-128, 128, size=vela.inputs[0].shape[-4:], dtype=np.int8)
    write_job(directory, vela, x.tobytes())
    start = time.perf_counter()
    result = run.run(firmware.elf(build, APP), TARGET, timeout=600, platform="virtual", cwd=directory)
    wall = time.perf_counter() - start
    if result.status != 0:
        return f"{name:18} failed: status {result.status}: {' | '.join(result.uart[-2:])} {result.npu_error or ''}"
    cycles = next(int(line.split(": ")[1]) for line in result.uart if line.startswith("NPU cycles: "))
    (expected,) = run_tosa(compiled.tosa[0], [x])
    exact = (directory / OUTPUT).read_bytes() == expected.astype(np.int8).tobytes()
    stream_s = _stream_seconds(result.npu_summary)
    return (
        f"{name:18} {wall:6.2f} s wall, {stream_s:5.2f} s in the NPU model, "
        f"{wall - stream_s:5.2f} s the rest; cycles {cycles:>9} (Vela {vela.npu_cycles:>9}); "
        f"bit-exact: {'yes' if exact else 'NO'}\n{'':19}{result.npu_summary}"
    )


def _stream_seconds(summary: str | None) -> float:
    for part in (summary or "").split(", "):
        if part.endswith(" s running streams"):
            return float(part.split()[0])
    return 0.0


def two_runs(command: list[str], counts: tuple[int, int]) -> tuple[dict, dict] | str:
    """`command` run with each of `counts` as its last argument, a process each: the JSON
    objects of their last lines, or the end of what the one that failed printed."""
    runs = []
    for count in counts:
        done = subprocess.run([*command, str(count)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return (done.stdout + done.stderr)[-600:]
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    return runs[0], runs[1]


def per_extra(runs: tuple[dict, dict], counts: tuple[int, int], name: str) -> float:
    """What the second of `runs` took more than the first in figure `name`, per extra count."""
    return (runs[1][name] - runs[0][name]) / (counts[1] - counts[0])


def host_figures(host, seconds: float) -> dict:
    """A run's figures for time_split and cpu_split: its wall `seconds`, HostTimes `host`'s wall
    and CPU clocks, and the CPU time of this process and of its children (QEMU) by the run's end."""
    qemu = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "seconds": seconds,
        "running": host.running,
        "accesses": host.accesses,
        "streams": host.streams,
        "accesses_cpu": host.accesses_cpu,
        "streams_cpu": host.streams_cpu,
        "process_cpu": time.process_time(),
        "qemu_cpu": qemu.ru_utime + qemu.ru_stime,
    }


def cpu_split(runs: tuple[dict, dict], counts: tuple[int, int]) -> str:
    """The extra CPU time of the second of `runs` per extra count (host_figures'): the NPU model
    and the attachment (the attachment thread's clock), this process in all, QEMU."""
    npu, accesses, process, qemu = (
        1e3 * per_extra(runs, counts, n) for n in ("streams_cpu", "accesses_cpu", "process_cpu", "qemu_cpu")
    )
    return (
        f"CPU: NPU model {npu:.1f}, attachment {accesses - npu:.1f}, the simulator's process {process:.1f}, "
        f"QEMU {qemu:.1f} ms"
    )


def time_split(runs: tuple[dict, dict], counts: tuple[int, int]) -> str:
    """Where the extra wall time of the second of `runs` went per extra count (HostTimes' figures
    "running", "accesses", "streams" beside "seconds"): QEMU, NPU model, attachment, other."""
    wall, qemu, npu, accesses = (
        1e3 * per_extra(runs, counts, n) for n in ("seconds", "running", "streams", "accesses")
    )
    return (
        f"QEMU {qemu:6.1f}, NPU model {npu:7.1f}, attachment {accesses - npu:5.1f}, "
        f"other {wall - qemu - accesses:5.1f} ms"
    )


def per_inference(model: str, target: str, counts: tuple[int, int], memory_mode: str | None, work: Path) -> str:
    """The --per-inference figures of `model` (module docstring). Each run is a process of its
    own (_samples_run), so the second does not find what the first kept (decoded weights,
    recorded streams)."""
    from kiln import flow
    from kiln.spec import CompileSpec

    directory = work / Path(model).stem
    directory.mkdir()
    pte = directory / "model.pte"
    flow.compile_pte(model, CompileSpec(target=target, memory_mode=memory_mode), pte, log=lambda line: None)
    elf = flow.build_runner(pte, target, output=directory / "runner", echo=lambda *text, **options: None)
    runs = two_runs([sys.executable, __file__, "--samples-run", model, str(pte), str(elf), target], counts)
    if isinstance(runs, str):
        return f"{model:18} failed: {runs}"
    first, second = runs
    wall = 1e3 * per_extra(runs, counts, "seconds")
    return (
        f"{model:18} per inference {wall:7.1f} ms wall: {time_split(runs, counts)}; {cpu_split(runs, counts)}; "
        f"first run ({counts[0]} inference(s)) {first['seconds']:6.2f} s; "
        f"{second['streams_each']} stream(s) per inference; "
        f"bit-exact with run-host: {'yes' if first['exact'] and second['exact'] else 'NO'}"
    )


def _samples_run(model: str, pte: Path, elf: Path, target: str, count: int) -> dict:
    """One run of the runner `elf` over `count` samples (the model's example inputs, rolled by one
    along their last axis per sample): its wall time, HostTimes and bit-exactness with run-host."""
    from kiln import flow
    from kiln.frontend.export import load_model
    from kiln.pte.schema import NUMPY_DTYPES

    inputs, _ = flow.program_io(pte)
    example = [
        np.asarray(value.numpy(), NUMPY_DTYPES[tensor.scalar_type]).reshape(tensor.sizes)
        for value, tensor in zip(load_model(model).inputs, inputs)
    ]
    samples = [[np.roll(x, n, axis=-1) for x in example] for n in range(count)]
    done = flow.infer(elf, target, pte, samples, platform="virtual", timeout=3600)
    if not done.complete:
        sys.exit(done.log[-600:])
    return {
        **host_figures(done.run.host, done.seconds),
        "streams_each": done.inferences[-1].streams,
        "exact": flow.compare(pte, samples, done.outputs) == [],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=4)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--per-inference", metavar="MODELS", help="comma-separated zoo names or .py files")
    parser.add_argument("--target", default="ethos-u85-256", help="with --per-inference")
    parser.add_argument("--samples", default="1,11", help="with --per-inference: the two runs' inference counts")
    parser.add_argument("--memory-mode", default=None, help="with --per-inference (default: the board's)")
    parser.add_argument(
        "--samples-run", nargs=5, metavar=("MODEL", "PTE", "ELF", "TARGET", "COUNT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.samples_run:
        model, pte, elf, target, count = args.samples_run
        print(json.dumps(_samples_run(model, Path(pte), Path(elf), target, int(count))))
        return
    if args.per_inference:
        counts = tuple(int(n) for n in args.samples.split(","))
        if len(counts) != 2 or not 0 < counts[0] < counts[1]:
            sys.exit("--samples takes two counts, the first smaller, e.g. 1,11")
        with tempfile.TemporaryDirectory() as tmp:
            print(
                f"per inference on {args.target}'s virtual platform (runs of {counts[0]} and {counts[1]} inferences):"
            )
            for model in filter(None, args.per_inference.split(",")):
                print(per_inference(model, args.target, counts, args.memory_mode, Path(tmp)), flush=True)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.compiler
    with tempfile.TemporaryDirectory() as tmp:
        build = firmware.build("corstone-300", Path(tmp) / "fw", test_apps=True)
        startup_and_access_cost(build, args.runs)
        gdb_transfer(build, args.mib)
        print(f"\nwhole inferences on {TARGET} (QEMU start to exit, one run each):")
        work = Path(tmp) / "jobs"
        work.mkdir()
        for name in filter(None, args.models.split(",")):
            print(inference(build, name, work), flush=True)


if __name__ == "__main__":
    main()

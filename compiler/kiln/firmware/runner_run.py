"""Runs kiln's executor runner ELF on samples and reads back what it wrote.

The runner (firmware/apps/executor_runner) takes one file per program input holding
one or more samples back to back, runs one inference per sample and writes
output_<i>.bin with every sample's output i back to back; per inference it prints
"inference <k>: NPU cycles <n> (<s> stream(s)), CPU cycles <c>" (or "... CPU cycles
not counted ..."). This module runs it through ./scripts/run_fvp.sh (the FVP if
installed, else kiln's virtual platform) and splits the outputs per sample.
With count_instructions it runs on the virtual platform with kiln's instruction
counter and returns the CPU instructions of each inference (see RunnerResult).

digits_demo prints the predicted digit beside the true label for held-out images
(`kiln deploy digits`, ./scripts/run.sh's last step). When the run fails, its exit status
is `kiln run`'s and its one error line is kiln run's own, named after the script a person
ran (`--as`).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln.errors import RunnerError, UsageError
from kiln.pte.reader import deserialize
from kiln.pte.schema import NUMPY_DTYPES, Tensor

_INFERENCE = re.compile(r"^inference (\d+): NPU cycles (\d+) \((\d+) stream\(s\)\), CPU cycles (\d+|not counted)")
# The runner's one call per inference (firmware/apps/executor_runner/main.cpp):
# kiln::runtime::Method::execute(), by its symbol.
INFERENCE_CALL = "_ZN4kiln7runtime6Method7executeEv"
_CALL_COUNTS = re.compile(r"^kiln: instructions per call of .*: ((?:\d+ ?)+)$")
# How long the `kiln run` child may take beyond its own --timeout (starting and stopping the
# platform, writing the outputs) before it is stopped.
GRACE_S = 60


@dataclass
class RunnerResult:
    status: int
    stdout: str
    stderr: str
    outputs: list[list[np.ndarray]]  # [sample][output]
    npu_cycles: list[int]  # per inference
    cpu_cycles: list[int | None]  # per inference; None where the platform has no cycle counter
    seconds: float  # wall time of the whole run, platform start-up included
    # With count_instructions: per inference, the instructions the CPU executed in
    # Method::execute() (executor, kernels, delegate, driver, the NPU's interrupt
    # handler; not the runner's semihosting input/output or UART lines), less the one
    # instruction per NPU stream the virtual platform itself executes to pend the
    # NPU's interrupt (kiln.simulator.attach).
    cpu_instructions: list[int] | None = None


def program_io(pte_path: Path) -> tuple[list[Tensor], list[Tensor]]:
    f = deserialize(Path(pte_path).read_bytes())
    plan = f.forward()
    return [plan.values[i] for i in plan.inputs], [plan.values[i] for i in plan.outputs]


def run(
    elf: Path,
    target: str,
    pte_path: Path,
    samples: list[list[np.ndarray]] | None,
    work: Path,
    platform: str = "auto",
    timeout: float = 600,
    env=None,
    count_instructions: bool = False,
    profile_instructions: bool = False,
    prog: str = "kiln",
    board: str | None = None,
) -> RunnerResult:
    """Runs `elf` (built for `pte_path`) on `samples` ([sample][input] arrays of the program's
    input types and shapes; None: the runner's built-in inputs, one inference).
    `count_instructions`: on the virtual platform, CPU instructions per inference;
    `profile_instructions` also leaves their breakdown by function in the stderr.
    `prog`: the name `kiln run`'s error line goes by (kiln's --as); `board`: the board the ELF
    was built for (default: the target's reference board). A run that outlives
    `timeout` and GRACE_S more is stopped: a RunnerError."""
    inputs, outputs = program_io(pte_path)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "kiln.cli",
        f"--as={prog}",
        "run",
        f"--elf={elf}",
        f"--target={target}",
        f"--platform={platform}",
        f"--timeout={timeout}",
        f"--output-dir={work / 'out'}",
    ]
    command += [f"--board={board}"] if board else []
    if count_instructions or profile_instructions:
        command.append(f"--count-instructions={INFERENCE_CALL}")
        command += ["--profile-instructions"] if profile_instructions else []
    count = 1
    if samples is not None:
        count = len(samples)
        for i, tensor in enumerate(inputs):
            dtype = NUMPY_DTYPES[tensor.scalar_type]
            raw = b"".join(
                np.ascontiguousarray(np.asarray(s[i], dtype).reshape(tensor.sizes)).tobytes() for s in samples
            )
            (work / f"input_{i}.bin").write_bytes(raw)
            command.append(f"--input={work / f'input_{i}.bin'}")
    start = time.monotonic()
    done = _call(command, timeout + GRACE_S, env)
    seconds = time.monotonic() - start
    npu, streams, cpu = [], [], []
    for line in done.stdout.splitlines():
        m = _INFERENCE.match(line)
        if m:
            npu.append(int(m.group(2)))
            streams.append(int(m.group(3)))
            cpu.append(None if m.group(4) == "not counted" else int(m.group(4)))
    instructions = None
    if count_instructions or profile_instructions:
        calls = next((m.group(1).split() for m in map(_CALL_COUNTS.match, done.stderr.splitlines()) if m), [])
        if len(calls) == len(streams):
            instructions = [int(n) - s for n, s in zip(calls, streams)]
    results: list[list[np.ndarray]] = [[] for _ in range(count)]
    if done.returncode == 0 and len(npu) == count:  # else the runner wrote no (or not every) output
        for i, tensor in enumerate(outputs):
            dtype = NUMPY_DTYPES[tensor.scalar_type]
            data = np.fromfile(work / "out" / f"output_{i}.bin", dtype=dtype)
            per_sample = data.reshape(count, *tensor.sizes)
            for k in range(count):
                results[k].append(per_sample[k])
    return RunnerResult(done.returncode, done.stdout, done.stderr, results, npu, cpu, seconds, instructions)


def _call(command: list[str], timeout: float, env=None) -> subprocess.CompletedProcess:
    """Runs `command` (a `kiln run`) and returns what it did. One still running after `timeout`
    seconds is interrupted as by Ctrl-C (kiln run then stops its platform, which runs in a
    session of its own and would outlive a killed parent), killed if it does not end, and a
    RunnerError says so."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
            raise RunnerError(
                f"`kiln run` had not ended after {timeout:g} s (its --timeout and {GRACE_S} s more "
                "to start and stop the platform); stopped it"
            ) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def digits_demo(
    elf: Path,
    target: str,
    pte_path: Path,
    count: int,
    platform: str = "auto",
    timeout: float = 600,
    prog: str = "kiln",
    board: str | None = None,
) -> int:
    """Classifies `count` held-out images on the runner and prints each prediction beside its
    label; returns 0, or `kiln run`'s status when the run failed (its own error line, if any,
    names `prog`). A run that exits 0 before every inference is a RunnerError."""
    from kiln.models import digits

    images, labels = digits.test_split()
    if not 0 < count <= len(labels):
        raise UsageError(f"--count must be 1..{len(labels)}")
    with tempfile.TemporaryDirectory(prefix="kiln-run-") as tmp:
        result = run(
            elf,
            target,
            pte_path,
            [[images[k].numpy()] for k in range(count)],
            Path(tmp),
            platform,
            timeout,
            prog=prog,
            board=board,
        )
    if result.status != 0 or len(result.npu_cycles) != count:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        if result.status != 0:
            return result.status  # kiln run has said why, as `kiln run` would
        raise RunnerError(f"the runner exited with status 0 after {len(result.npu_cycles)} of {count} inferences")
    print(f"{'image':>5}  {'label':>5}  {'predicted':>9}  {'NPU cycles':>10}  {'CPU cycles':>10}")
    right = 0
    for k in range(count):
        predicted = int(np.argmax(result.outputs[k][0]))
        right += predicted == int(labels[k])
        cpu = result.cpu_cycles[k]
        print(
            f"{k:>5}  {int(labels[k]):>5}  {predicted:>9}  {result.npu_cycles[k]:>10,}  "
            f"{cpu if cpu is not None else 'n/a':>10}"
        )
    print(f"{right} of {count} right; per inference: {np.mean(result.npu_cycles):,.0f} NPU cycles", end="")
    counted = [c for c in result.cpu_cycles if c is not None]
    if counted:
        print(f", {np.mean(counted):,.0f} CPU cycles", end="")
    print(f"; {result.seconds / count:.2f} s of wall time each on the platform (start-up included)")
    return 0

"""The zoo models compiled for a CPU alone, built into kiln's executor runner without the Ethos-U
driver and delegate and run on the QEMU machine of each CPU: here cortex-m85 (on the AN547's
Cortex-M55, as corstone-320's NPU targets) and cortex-m33, two random samples each, whose outputs
must be `kiln run-host`'s bit for bit (run-host: numpy kernels, independent of the firmware);
test_mlperf_tiny_cpus.py runs cortex-m55, -m7 and -m4 with the same checks (check_cpu_run). And a
program with an NPU delegate baked into such a runner all the same is refused by the firmware when
it binds it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kiln import boards, flow

from .helpers import compiled, random_samples

pytestmark = pytest.mark.fvp
ROOT = Path(__file__).resolve().parents[2]

CPUS = ["cortex-m85", "cortex-m33"]  # and test_mlperf_tiny_cpus.py's
# What only an image with kiln's Ethos-U driver or delegate defines: their namespaces
# (kiln::ethosu, kiln::delegates::ethosu). An image for a CPU alone has none of them. (On a board
# with an NPU, the vector table still names kiln_npu_irq_handler: the platform's weak default,
# which reports the interrupt as a fault.)
NPU_SYMBOLS = ("ethosu",)


def symbols(elf) -> str:
    return subprocess.run(["arm-none-eabi-nm", "-C", str(elf)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("target", CPUS)
@pytest.mark.parametrize("model", ["digits", "ds_cnn"])
def test_a_cpu_target_runs_the_model_as_run_host_bit_for_bit(work, builder, tmp_path, model, target):
    pte_path = compiled(work, model, target)
    samples = random_samples(pte_path, 2, seed=11)
    check_cpu_run(builder(pte_path, target), target, pte_path, samples, tmp_path)


def check_cpu_run(elf: Path, target: str, pte_path: Path, samples, tmp_path) -> flow.Inferences:
    """Runs `samples` on `elf`, a runner for the CPU alone, on the CPU's QEMU machine: its outputs
    equal run-host's bit for bit, the ELF links no NPU code, the run counts each inference's
    instructions and no NPU cycle. Returns the run."""
    found = [s for s in NPU_SYMBOLS if s in symbols(elf)]
    assert found == [], f"{elf.name} links the NPU's code: {found}"
    result = flow.infer(elf, target, pte_path, samples, tmp_path, "virtual", timeout=900, count_instructions=True)
    assert result.status == 0, result.log
    assert result.npu_cycles == [0] * len(samples) and result.run.npu is None, result.log
    assert flow.compare(pte_path, samples, result.outputs) == []
    # Counted per inference (float kernels branch on the data, so the counts may differ).
    assert result.cpu_instructions is not None and len(result.cpu_instructions) == len(samples), result.log
    assert min(result.cpu_instructions) > 0
    machine = boards.target(target).board.qemu_machine
    assert machine == {"cortex-m4": "mps2-an386", "cortex-m7": "mps2-an500", "cortex-m33": "mps2-an505"}.get(
        target, "mps3-an547"
    )
    return result


def test_the_firmware_of_a_cpu_refuses_a_program_with_an_npu_delegate(work, tmp_path):
    """kiln build refuses to bake such a program (tests/compiler/test_cpu_targets.py); baked in
    all the same, it fails to bind (the image has room for no delegate, and no backend) and the
    runner exits 5."""
    cpu_pte, npu_pte = compiled(work, "digits", "cortex-m4"), compiled(work, "digits")
    elf = flow.build_runner(cpu_pte, "cortex-m4", output=tmp_path / "build", bake=npu_pte, echo=lambda *a, **k: None)
    run = flow.run(flow.firmware(elf, "cortex-m4"), timeout=120)
    assert run.status == 5, "\n".join(run.uart)
    assert any(line.startswith("binding the program failed: ") for line in run.uart), "\n".join(run.uart)


@pytest.mark.parametrize("target", ["cortex-m4"])
def test_hello_starts_each_mps2_board_on_its_qemu_machine(target):
    """kiln build --app hello on a board without an NPU: startup, the UART at the board's address
    and the FPU work on QEMU's machine; the core has no Helium and hello says so. One board: the
    runner's runs above start every CPU board (the M7's and M33's MPS2 boards too)."""
    board = boards.target(target).board.name
    build = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "kiln"), "build", "--app", "hello", "--target", target],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stderr
    run = flow.run(flow.firmware(Path(build.stdout.strip().splitlines()[-1]), target), timeout=120)
    assert run.status == 0, "\n".join(run.uart)
    assert run.uart[:4] == [
        f"Hello from kiln on {board} ({target})",
        "startup: .data 42, .bss 0, static constructor 43",
        f"Helium: none on {target}",
        "FPU: 1.5 * 1.5 * 100 = 225",
    ]

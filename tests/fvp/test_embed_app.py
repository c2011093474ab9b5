"""kiln in an application's own firmware (docs/embedding.md): kiln's CMake package installed from
the corstone-300 firmware build (`cmake --install`), firmware/examples/embed_app built against it
with the board's toolchain (find_package(kiln), kiln_add_pte, kiln_kernel_table, kiln/kiln.h
only), run on kiln's virtual platform; the outputs it prints equal `kiln run-host`'s bit for bit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kiln import boards, flow
from kiln.firmware import runner_build
from kiln.pte.schema import NUMPY_DTYPES
from tests.firmware.test_firmware_build import check_no_heap
from tests.fvp.helpers import compiled, random_samples

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "firmware" / "examples" / "embed_app"
TARGET = "ethos-u55-128"  # on corstone-300, the board the package is installed for
OUTPUT_LINE = re.compile(r"output (\d+): (\d+) bytes: ([0-9a-f]*)$")


def first_line(inputs: int, outputs: int, fast_scratch: int) -> re.Pattern:
    """embed_app's first line (its main.cpp states it)."""
    return re.compile(
        rf"embed_app: {inputs} inputs, {outputs} outputs, arena \d+ of \d+ bytes, "
        rf"fast scratch {fast_scratch} of \d+ bytes$"
    )


@pytest.fixture(scope="module")
def package(firmware_build, tmp_path_factory) -> Path:
    """kiln's CMake package installed from the shared corstone-300 firmware build (no rebuild)."""
    prefix = tmp_path_factory.mktemp("kiln-package")
    result = subprocess.run(["cmake", "--install", str(firmware_build), "--prefix", str(prefix)], capture_output=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return prefix


def build_app(package: Path, pte: Path, sample: list[np.ndarray], out: Path, *options: str) -> Path:
    """embed_app for `pte` with `sample` baked in, built by CMake as its CMakeLists.txt says, with
    its cache `options` (-D...)."""
    out.mkdir(parents=True, exist_ok=True)
    inputs = out / "input.bin"
    inputs.write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for a in sample))
    toolchain = boards.load("corstone-300").cpu.toolchain_file
    for command in (
        ["cmake", "-S", str(EXAMPLE), "-B", str(out / "build"), "-G", "Ninja", f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
         f"-Dkiln_DIR={package / 'lib' / 'cmake' / 'kiln'}", f"-DAPP_PTE={pte}", f"-DAPP_INPUT={inputs}",
         f"-DKILN_PYTHON={sys.executable}", *options],
        ["cmake", "--build", str(out / "build")],
    ):  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
    return out / "build" / "embed_app.elf"


def printed_outputs(uart: list[str], pte: Path) -> list[np.ndarray]:
    """The outputs embed_app printed, as arrays of the program's output types and shapes."""
    _, outputs = flow.program_io(pte)
    found = {int(m[1]): (int(m[2]), bytes.fromhex(m[3])) for m in map(OUTPUT_LINE.match, uart) if m}
    assert sorted(found) == list(range(len(outputs))), "\n".join(uart)
    arrays = []
    for i, tensor in enumerate(outputs):
        nbytes, data = found[i]
        assert nbytes == len(data), uart
        arrays.append(np.frombuffer(data, dtype=NUMPY_DTYPES[tensor.scalar_type]).reshape(tensor.sizes))
    return arrays


@pytest.mark.parametrize(
    "model, target, spec",
    [
        ("digits", TARGET, {}),
        ("tiny_cnn", TARGET, {"io": "int8"}),
        ("digits", "ethos-u65-256", {}),  # Dedicated_Sram: a fast scratch, from the app's fast arena
    ],
)
def test_the_example_app_on_the_installed_package_equals_run_host(work, package, tmp_path, model, target, spec):
    pte = compiled(work, model, target, **spec)
    samples = random_samples(pte, 1, seed=30)
    elf = build_app(package, pte, samples[0], tmp_path / "app")
    heap = check_no_heap(elf)
    assert heap.returncode == 0, heap.stderr

    run = flow.run(flow.firmware(elf, target), platform="virtual", timeout=300)
    assert run.status == 0, "\n".join(run.uart)
    inputs, outputs = flow.program_io(pte)
    # method_needs' fast scratch is what kiln's runner build plans from the same .pte (whole lines)
    fast = runner_build.plan(pte, target).fast_scratch
    line = first_line(len(inputs), len(outputs), -(-fast.size // 32) * 32 if fast else 0)
    assert any(line.match(printed) for printed in run.uart), (line.pattern, run.uart)
    assert run.npu is not None and run.npu.streams == 1, run.npu_summary  # the delegate ran on the NPU model
    assert flow.compare(pte, samples, [printed_outputs(run.uart, pte)]) == []


def test_an_arena_too_small_is_one_error_line_and_status_1(work, package, tmp_path):
    """The app's failure path: carve's Status reaches main, which prints the error (kTooLarge: the
    bytes the method needs, then the arena's 1,024)."""
    pte = compiled(work, "digits", TARGET)
    elf = build_app(package, pte, random_samples(pte, 1, seed=1)[0], tmp_path / "app", "-DAPP_ARENA_BYTES=1024")
    run = flow.run(flow.firmware(elf, TARGET), platform="virtual", timeout=300)
    assert run.status == 1, "\n".join(run.uart)
    failed = [line for line in run.uart if line.startswith("embed_app: failed: ")]
    assert len(failed) == 1 and "too large" in failed[0] and "1024" in failed[0], run.uart

"""The integer linear kernel's dot product (firmware/runtime/kernels/dot.h) in each of its code
paths, bare-metal on QEMU: Helium on the Cortex-M55 (mps3-an547), DSP on the Cortex-M4
(mps2-an386), plain C on the Cortex-M3 (mps2-an385). Each path's three sums equal Python's
exact sums mod 2^32 on vectors of every length from 0 to 67 and longer, tails of each kind, the
int8 extremes, and a sum of products past 2^31 that wraps."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent / "dot_paths"
KERNELS = Path(__file__).resolve().parents[3] / "firmware" / "runtime" / "kernels"
PATHS = {  # code path: (-mcpu, float ABI, QEMU machine)
    "helium": ("cortex-m55", "hard", "mps3-an547"),
    "dsp": ("cortex-m4", "soft", "mps2-an386"),
    "plain": ("cortex-m3", "soft", "mps2-an385"),
}
RNG = np.random.default_rng(33)
CASES = [RNG.integers(-128, 128, (2, n), dtype=np.int8) for n in [*range(68), 100, 255, 1000]]
CASES += [np.full((2, 64), -128, np.int8), np.stack([np.full(33, 127, np.int8), np.full(33, -128, np.int8)])]
CASES.append(np.full((2, 131_073), -128, np.int8))  # 131,073 * 16,384 > 2^31: the sum of products wraps

needs_tools = pytest.mark.skipif(
    shutil.which("arm-none-eabi-g++") is None or shutil.which("qemu-system-arm") is None,
    reason="needs arm-none-eabi-g++ and qemu-system-arm",
)


def _vectors_header(path: Path) -> None:
    lines = ["#pragma once", "#include <cstdint>", "struct Case { const int8_t* x; const int8_t* w; int32_t n; };"]
    for k, (x, w) in enumerate(CASES):
        for name, v in (("X", x), ("W", w)):
            lines.append(f"static const int8_t k{name}{k}[] = {{{', '.join(map(str, v.tolist())) or '0'}}};")
    lines.append("static const Case kCases[] = {")
    lines += [f"    {{kX{k}, kW{k}, {len(x)}}}," for k, (x, _) in enumerate(CASES)]
    lines.append("};")
    path.write_text("\n".join(lines) + "\n")


def _expected() -> list[str]:
    def hex32(v: int) -> str:
        return f"{v % 2**32:08x}"

    rows = []
    for x, w in CASES:
        x64, w64 = x.astype(np.int64), w.astype(np.int64)
        rows.append(" ".join(map(hex32, (len(x), int(x64 @ w64), int(x64.sum()), int(w64.sum())))))
    return rows


@needs_tools
@pytest.mark.parametrize("path", PATHS)
def test_dot_product_path_sums_exactly_mod_2_32(tmp_path, path):
    cpu, abi, machine = PATHS[path]
    _vectors_header(tmp_path / "vectors.h")
    elf = tmp_path / "dot.elf"
    compile_flags = ["-std=c++17", "-mthumb", f"-mcpu={cpu}", f"-mfloat-abi={abi}", "-Os", "-ffreestanding"]
    compile_flags += ["-fno-exceptions", "-fno-rtti", "-nostdlib", "-nostartfiles", "-Wall", "-Wextra", "-Werror"]
    built = subprocess.run(
        ["arm-none-eabi-g++", *compile_flags, f"-I{KERNELS}", f"-I{tmp_path}", "-T", HERE / "link.ld"]
        + [HERE / "main.cpp", "-lgcc", "-o", elf],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    run = subprocess.run(
        ["qemu-system-arm", "-M", machine, "-nographic", "-semihosting-config", "enable=on,target=native"]
        + ["-kernel", elf],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stderr.splitlines()  # QEMU writes semihosting's console to stderr
    assert f"path={path}" in lines, run.stderr[-2000:]
    assert lines[lines.index(f"path={path}") + 1 :] == _expected()

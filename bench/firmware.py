"""Figures for kiln's platform layer: firmware size per app and the virtual
platform's wall time from QEMU start to the firmware's exit.

    .venv/bin/python bench/firmware.py [--runs N]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from elftools.elf.elffile import ELFFile

from kiln.firmware import build as firmware
from kiln.simulator import run


def sizes(elf: Path) -> tuple[int, int, int]:
    """(code+rodata, initialised data, zeroed data + stack) in bytes."""
    text = data = bss = 0
    with open(elf, "rb") as stream:
        for section in ELFFile(stream).iter_sections():
            if not section["sh_flags"] & 0x2:  # SHF_ALLOC
                continue
            if section["sh_type"] == "SHT_NOBITS":
                bss += section["sh_size"]
            elif section["sh_flags"] & 0x1:  # SHF_WRITE
                data += section["sh_size"]
            else:
                text += section["sh_size"]
    return text, data, bss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        build = firmware.build("corstone-300", Path(tmp), test_apps=True)
        elves = [build / "hello.elf", *sorted((build / "test-apps").glob("*.elf"))]
        print(f"{'app':28} {'code B':>8} {'data B':>8} {'bss+stack B':>12}")
        for elf in elves:
            print(f"{elf.stem:28} {sizes(elf)[0]:8} {sizes(elf)[1]:8} {sizes(elf)[2]:12}")
        walls = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = run.run(build / "hello.elf", "ethos-u55-128", platform="virtual")
            walls.append(time.perf_counter() - start)
            assert result.status == 0, result.uart
        print(f"\nhello on the virtual platform, start to exit: median {statistics.median(walls) * 1000:.0f} ms "
              f"over {args.runs} runs (min {min(walls) * 1000:.0f}, max {max(walls) * 1000:.0f})")


if __name__ == "__main__":
    main()

"""Build-time guarantees of the firmware: no heap, and set-up that is idempotent."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "cmake" / "check_no_heap.cmake"


def check_no_heap(elf: Path):
    return subprocess.run(
        ["cmake", "-DNM=arm-none-eabi-nm", f"-DELF={elf}", "-P", str(CHECK)], capture_output=True, text=True
    )


def test_firmware_links_no_heap(firmware_build):
    for elf in [firmware_build / "hello.elf", *sorted((firmware_build / "test-apps").glob("*.elf"))]:
        result = check_no_heap(elf)
        assert result.returncode == 0, (elf, result.stderr)


def test_an_elf_with_malloc_is_refused(tmp_path):
    source = tmp_path / "uses_malloc.c"
    source.write_text("#include <stdlib.h>\nint main(void) { return malloc(16) != 0; }\n")
    elf = tmp_path / "uses_malloc.elf"
    subprocess.run(
        ["arm-none-eabi-gcc", "-mcpu=cortex-m55", "-mfloat-abi=hard", "--specs=nano.specs",
         "--specs=nosys.specs", str(source), "-o", str(elf)],
        check=True, capture_output=True,
    )  # fmt: skip
    result = check_no_heap(elf)
    assert result.returncode != 0
    assert "links the heap allocator (malloc)" in result.stderr


def test_setup_is_idempotent():
    result = subprocess.run([str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["setup: Debian packages present", "setup: Python environment .venv up to date"]

"""Board descriptions: validation, target mapping, and what the generated files do."""

import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from kiln import boards, paths
from kiln.boards import catalogue
from kiln.errors import BoardError, InternalError, UsageError

ROOT = Path(__file__).resolve().parents[2]
CORSTONE_300 = ROOT / "boards" / "corstone-300" / "board.toml"


def test_every_board_validates():
    assert boards.board_names() == [
        "alif-e7-he",
        "alif-e7-hp",
        "alif-e8",
        "corstone-300",
        "corstone-320",
        "mps2-an386",
        "mps2-an500",
        "mps2-an505",
        "mps3-an552",
        "mps4-corstone320",
    ]
    for name in boards.board_names():
        assert boards.load(name).name == name


def test_targets_map_to_boards_with_vela_defaults():
    # Facts from the issue and shared/notes/platforms.md, written out by hand.
    t = boards.target("ethos-u55-128")
    assert (t.board.name, t.family.name, t.macs) == ("corstone-300", "ethos-u55", 128)
    assert (t.system_config, t.memory_mode) == ("Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert boards.target("ethos-u65-512").board.name == "corstone-300"
    assert boards.target("ethos-u85-2048").board.name == "corstone-320"
    assert set(boards.targets()) == {
        "ethos-u55-32", "ethos-u55-64", "ethos-u55-128", "ethos-u55-256",
        "ethos-u65-256", "ethos-u65-512",
        "ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048",
        "cortex-m55", "cortex-m85", "cortex-m4", "cortex-m7", "cortex-m33",
    }  # fmt: skip
    with pytest.raises(UsageError, match="unknown target 'ethos-u55-100'"):
        boards.target("ethos-u55-100")


def test_corstone_300_facts():
    b = boards.load("corstone-300")
    assert (b.npu.base, b.npu.irq, b.uart.base) == (0x5810_2000, 56, 0x5930_3000)
    assert b.region_for("code").name == "itcm" and b.region_for("stack").name == "dtcm"
    assert b.qemu_machine == "mps3-an547"


def _write(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "corstone-300"
    folder.mkdir(exist_ok=True)
    path = folder / "board.toml"
    path.write_text(text)
    return path


# Each edit of the real description breaks one thing; the error must name the field.
BREAKAGES = [
    ("base = 0x5930_3000\n", 'base = "0x5930_3000"\n', r"uart\.base: expected an integer"),
    ("irq = 56", "irq = 56\nirqs = 3", r"npu\.irqs: unknown field"),
    ("clock_hz = 25_000_000\ndcache", "dcache", r"cpu\.clock_hz: missing"),
    ('purposes = ["npu"]', 'purposes = ["npu", "cache"]', r"memory\[3\]\.purposes: unknown value 'cache'"),
    # sram at 0x3100_0000 + 0x4000_0000 ends at 0x7100_0000, past ddr's base 0x7000_0000
    ("size = 0x0040_0000", "size = 0x4000_0000", r"memory\[4\]: region ddr overlaps region sram"),
    (
        'memory_mode = "Shared_Sram"',
        'memory_mode = "Dedicated_Sram"',
        r"npu\.family\[0\]\.memory_mode: 'Dedicated_Sram' is not one of",
    ),
    ("macs = [32, 64, 128, 256]", "macs = [32, 100]", r"npu\.family\[0\]\.macs: expected a list of MAC counts"),
    ('name = "ethos-u55"', 'name = "ethos-u99"', r"npu\.family\[0\]\.name: unknown NPU family"),
    ('"ethosu.num_macs={macs}"', '"ethosu.num_macs={cores}"', r"fvp\.params\[0\]: unknown placeholder \{cores\}"),
    ('purposes = ["data", "stack"]', 'purposes = ["stack"]', r"memory: exactly one region must have purpose 'data'"),
    ("base = 0x5810_2000", "base = 0x3100_1000", r"npu\.base: 0x31001000 lies inside memory region sram"),
    ('name = "corstone-300"', 'name = "corstone-301"', r"name: 'corstone-301' differs from its folder name"),
    ('"-mcpu=cortex-m55", ', "", r"cpu\.compile_flags: must contain -mcpu=cortex-m55"),
    ("schema = 1", "schema = 2", r"schema: version 2 is not supported"),
    ('core = "cortex-m55"', 'core = "cortex-m55"\ntoolchain = "icc"', r"cpu\.toolchain: unknown toolchain 'icc'"),
    (
        'core = "cortex-m55"',
        'core = "cortex-m55"\nlink_flags = ["-mcpu=cortex-m55", "-mfloat-abi=soft"]',
        r"cpu\.link_flags: must choose the float ABI of compile_flags \(-mfloat-abi=hard\)",
    ),
    ("[uart]", "[uart", r"not valid TOML"),
    ("stack_size = 0x8000", "stack_size = 0x8004", r"stack_size: stack size 0x8004 is not a positive multiple of 8 "),
    ("stack_size = 0x8000", "stack_size = 0", r"stack_size: stack size 0x0 is not a positive multiple of 8 "),
    # dtcm, the stack's region, has 512 KiB
    (
        "stack_size = 0x8000",
        "stack_size = 0x8_0008",
        r"stack_size: stack size 0x80008 does not fit in corstone-300's stack region dtcm \(0x80000 bytes\)",
    ),
]


@pytest.mark.parametrize("old,new,message", BREAKAGES)
def test_malformed_description_names_the_field(tmp_path, old, new, message):
    text = CORSTONE_300.read_text()
    assert old in text, "the test's edit no longer applies to the description"
    path = _write(tmp_path, text.replace(old, new, 1))
    with pytest.raises(BoardError, match=message) as error:
        boards.load_board(path)
    assert str(path) in str(error.value)


def test_a_description_is_read_once_and_an_edit_is_seen(tmp_path):
    """load_board keeps the Board it made of a file; an edit, even one that keeps the file's
    size and modification time, is read again."""
    text = CORSTONE_300.read_text()
    path = _write(tmp_path, text)
    first = boards.load_board(path)
    assert boards.load_board(path) is first and first.uart.baud == 115_200
    before = path.stat()
    path.write_text(text.replace("baud = 115_200", "baud = 115_201", 1))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert boards.load_board(path).uart.baud == 115_201


def test_an_edit_of_what_a_description_extends_is_seen(tmp_path, monkeypatch):
    folder = _boards_dir(tmp_path, monkeypatch, {"child": CHILD})
    assert boards.load("child").uart.baud == 115_200
    parent = folder / "corstone-300" / "board.toml"
    parent.write_text(parent.read_text().replace("baud = 115_200", "baud = 57_600", 1))
    assert boards.load("child").uart.baud == 57_600


def test_check_command_rejects_a_malformed_file_in_one_line(tmp_path):
    path = _write(tmp_path, CORSTONE_300.read_text().replace("baud = 115_200", "baud = 0"))
    result = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-m", "kiln.boards", "check", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "uart.baud" in result.stderr and "Traceback" not in result.stderr


def test_linked_firmware_lands_where_the_description_says(firmware_build):
    """The ELF's sections sit in the regions named in board.toml, read here with tomllib."""
    data = tomllib.loads(CORSTONE_300.read_text())
    region = {r["name"]: (r["base"], r["base"] + r["size"]) for r in data["memory"]}
    with open(firmware_build / "hello.elf", "rb") as stream:
        elf = ELFFile(stream)
        sections = {s.name: s for s in elf.iter_sections()}
        symbols = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()}
        text, stack = sections[".text"], sections[".stack"]
        assert text["sh_addr"] == region["itcm"][0]  # vectors first, at the base of the code region
        assert region["dtcm"][0] <= stack["sh_addr"] and stack["sh_addr"] + stack["sh_size"] <= region["dtcm"][1]
        initial_sp, reset = (int.from_bytes(text.data()[i : i + 4], "little") for i in (0, 4))
        assert initial_sp == symbols["__stack_top"] == stack["sh_addr"] + stack["sh_size"]
        assert reset == symbols["kiln_reset_handler"] | 1  # Thumb bit set
        # The .data load image is in the code region, its run address in the data region.
        data_section = sections[".data"]
        assert region["dtcm"][0] <= data_section["sh_addr"] < region["dtcm"][1]


def test_header_gives_the_descriptions_addresses(firmware_build):
    header = (firmware_build / "kiln-board" / "kiln_board.h").read_text()
    assert "#define KILN_NPU_BASE 0x58102000u" in header
    assert "#define KILN_NPU_IRQ 56" in header
    assert "#define KILN_REGION_SRAM_SIZE 0x00400000u" in header


def test_stack_override_is_checked_like_the_boards_own(tmp_path):
    """A build's stack size (kiln build's plan, KILN_STACK_SIZE through the linker script)
    passes the check board.toml's stack_size does: a positive multiple of 8 bytes that fits
    in the stack's region (corstone-300's dtcm: 512 KiB)."""
    from kiln.firmware import runner_build

    board = boards.load("corstone-300")
    assert boards.check_stack_size(board, 0x8_0000) == 0x8_0000
    for size, message in (
        (0x8_0008, "stack size 0x80008 does not fit in corstone-300's stack region dtcm"),
        (0x9_0000, "stack size 0x90000 does not fit in corstone-300's stack region dtcm"),
        (12, "stack size 0xc is not a positive multiple of 8 bytes"),
        (-8, "stack size -0x8 is not a positive multiple of 8 bytes"),
    ):
        with pytest.raises(UsageError, match=message):
            boards.check_stack_size(board, size)
        with pytest.raises(UsageError, match=message):
            boards.linker_script(board, size)
        with pytest.raises(UsageError, match=message):  # before the .pte is even read
            runner_build.plan(tmp_path / "no_such.pte", "ethos-u55-128", stack_size=size)
    result = subprocess.run(
        [
            str(ROOT / ".venv/bin/python"),
            "-m",
            "kiln.boards",
            "generate",
            "--board",
            "corstone-300",
            "--out",
            str(tmp_path / "gen"),
            "--stack-size",
            "0x90000",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "kiln: error: stack size 0x90000 does not fit in corstone-300's stack region dtcm (0x80000 bytes)"
    ]


def test_region_overflow_fails_the_link_naming_the_region(tmp_path):
    """A stack as large as DTCM (512 KiB) fits the region by itself, but not beside .data and
    .bss, which DTCM holds too: the link must fail, naming the region."""
    build = tmp_path / "fw"
    result = subprocess.run(
        ["cmake", "-S", str(paths.FIRMWARE_DIR), "-B", str(build), "-G", "Ninja",
         f"-DCMAKE_TOOLCHAIN_FILE={paths.TOOLCHAIN_FILE}", "-DKILN_STACK_SIZE=0x80000"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    result = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "region `dtcm' overflowed" in result.stdout + result.stderr


def test_a_toolchain_other_than_the_boards_fails_the_configure_clearly(tmp_path):
    """corstone-320 names clang (board.toml's cpu.toolchain); GCC 12 cannot build its Cortex-M85."""
    result = subprocess.run(
        ["cmake", "-S", str(paths.FIRMWARE_DIR), "-B", str(tmp_path / "fw"), "-G", "Ninja",
         f"-DCMAKE_TOOLCHAIN_FILE={ROOT / 'cmake' / 'arm-none-eabi-gcc.cmake'}", "-DKILN_BOARD=corstone-320"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "kiln: board corstone-320 is built with toolchain clang-arm-none-eabi" in " ".join(result.stderr.split())


# --- Boards a user can buy (issue 16): inheritance, references, unverified facts -------------


def test_an_fpga_image_inherits_its_subsystems_map_and_states_what_differs():
    an552, c300 = boards.load("mps3-an552"), boards.load("corstone-300")
    assert an552.extends == "corstone-300" and not an552.reference
    assert [(r.name, r.base, r.purposes) for r in an552.memory] == [(r.name, r.base, r.purposes) for r in c300.memory]
    assert an552.memory[1].size == 0x20_0000  # bram: 2 MiB on the FPGA, 1 MiB on the FVP
    assert (an552.uart, an552.npu.base, an552.npu.irq) == (c300.uart, c300.npu.base, c300.npu.irq)
    assert an552.configurations() == ["ethos-u55-128"] and an552.cpu.clock_hz == 32_000_000
    assert (an552.fvp_params, an552.npu.families[0].fvp, an552.qemu_machine) == ((), None, "mps3-an547")
    mps4 = boards.load("mps4-corstone320")
    assert mps4.configurations() == ["ethos-u85-1024"] and mps4.qemu_machine is None
    assert {"npu.base", "npu.irq", "uart.base"} <= {field for field, _ in mps4.unverified}


def test_alif_facts():
    """Alif's evaluation kit (linker scripts, platform CMake), global_map.h and TF-A: see the files."""
    hp, he, e8 = boards.load("alif-e7-hp"), boards.load("alif-e7-he"), boards.load("alif-e8")
    assert (hp.uart.kind, hp.uart.base, hp.uart.clock_hz) == ("dw-apb-uart", 0x4901_A000, 100_000_000)
    assert (hp.npu.base, hp.npu.irq, hp.configurations()) == (0x400E_1000, 55, ["ethos-u55-256"])
    assert (he.npu.base, he.npu.irq, he.configurations()) == (0x400E_1000, 55, ["ethos-u55-128"])
    assert (e8.npu.base, e8.npu.irq, e8.configurations()) == (0x4904_2000, 366, ["ethos-u85-256"])
    assert (hp.cpu.clock_hz, he.cpu.clock_hz, e8.cpu.clock_hz) == (400_000_000, 160_000_000, 400_000_000)
    assert (hp.region_for("stack").size, he.region_for("stack").size) == (0x10_0000, 0x4_0000)
    for board in (hp, he, e8):
        assert (board.region_for("code").base, board.region_for("model").name) == (0x8000_8000, "mram")
        assert board.npu.families[0].memory_modes == ("Shared_Sram",)  # the .pte stays in MRAM
        assert board.qemu_machine is None and board.fvp_params == ()
    assert [r.name for r in e8.memory] == ["itcm", "dtcm", "mram", "sram"]  # E7's sram0/sram1 dropped
    assert e8.region_for("npu") == e8.region_for("bulk")


def test_a_target_is_built_for_its_reference_board_unless_another_is_asked_for():
    assert boards.target("ethos-u55-128").board.name == "corstone-300"
    on_an552 = boards.target("ethos-u55-128", "mps3-an552")
    assert (on_an552.board.name, on_an552.macs, on_an552.memory_mode) == ("mps3-an552", 128, "Shared_Sram")
    assert boards.target("ethos-u85-256", "alif-e8").memory_mode == "Shared_Sram"
    assert [b.name for b in boards.boards_with("ethos-u55-128")] == ["corstone-300", "alif-e7-he", "mps3-an552"]
    with pytest.raises(UsageError) as error:
        boards.target("ethos-u85-256", "alif-e7-hp")
    assert str(error.value) == (
        "board alif-e7-hp has no ethos-u85-256 NPU: it has ethos-u55-256; build for one of "
        "those, or for ethos-u85-256 on corstone-320, alif-e8"
    )
    with pytest.raises(UsageError, match="unknown board 'alif-e9'"):
        boards.target("ethos-u85-256", "alif-e9")


def test_resolve_takes_a_name_or_the_target_already_resolved():
    on_an552 = boards.target("ethos-u55-128", "mps3-an552")
    assert boards.resolve(on_an552) is on_an552 and boards.resolve(on_an552, "mps3-an552") is on_an552
    assert boards.resolve("ethos-u55-128", "mps3-an552") == on_an552
    assert boards.resolve("ethos-u55-128").board.name == "corstone-300"
    with pytest.raises(InternalError, match="ethos-u55-128 on mps3-an552 was passed with board corstone-300"):
        boards.resolve(on_an552, "corstone-300")


def _boards_dir(tmp_path: Path, monkeypatch, files: dict[str, str]) -> Path:
    """A boards folder holding corstone-300 and `files` (name -> board.toml text)."""
    for name, text in {"corstone-300": CORSTONE_300.read_text(), **files}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "board.toml").write_text(text)
    monkeypatch.setattr(catalogue, "BOARDS_DIR", tmp_path)
    return tmp_path


CHILD = """schema = 1
name = "child"
summary = "an FPGA image of corstone-300"
extends = "corstone-300"
"""


def test_extends_merges_tables_and_named_entries_and_drops_what_it_names(tmp_path, monkeypatch):
    _boards_dir(
        tmp_path,
        monkeypatch,
        {
            "child": CHILD
            + """drop = ["fvp", "npu.family.ethos-u55.fvp", "npu.family.ethos-u65", "memory.bram"]
[uart]
baud = 9600
[[memory]]
name = "ddr"
size = 0x0100_0000
[[memory]]
name = "qspi"
base = 0x3800_0000
size = 0x0080_0000
purposes = []
[[npu.family]]
name = "ethos-u55"
macs = [64]
[unverified]
"memory.qspi" = "a guess"
"""
        },
    )
    child = boards.load("child")
    assert (child.uart.baud, child.uart.base) == (9600, 0x5930_3000)
    assert [(r.name, r.size) for r in child.memory] == [
        ("itcm", 0x8_0000),
        ("dtcm", 0x8_0000),
        ("sram", 0x40_0000),
        ("ddr", 0x100_0000),
        ("qspi", 0x80_0000),
    ]
    assert (
        child.configurations() == ["ethos-u55-64"]
        and child.npu.families[0].system_config == "Ethos_U55_High_End_Embedded"
    )
    assert (child.fvp_params, child.reference, child.unverified) == ((), False, (("memory.qspi", "a guess"),))
    assert boards.target("ethos-u55-64", "child").board.name == "child"


@pytest.mark.parametrize(
    "extra,message",
    [
        ('drop = ["npu.family.ethos-u75"]\n', r"drop: 'npu.family.ethos-u75' names nothing corstone-300 describes"),
        ('drop = ["npu.family.ethos-u55.fvp"]\n', r"npu\.family\[0\]\.fvp: an FVP needs both the binary"),
        ('[unverified]\n"uart.speed" = "x"\n"memory.flash" = "y"\n', r"unverified\.memory\.flash: names no field"),
        ('[unverified]\n"board" = "x"\n', r"unverified\.board: names no field"),
    ],
)
def test_a_bad_inheritance_or_unverified_entry_names_the_field(tmp_path, monkeypatch, extra, message):
    _boards_dir(tmp_path, monkeypatch, {"child": CHILD + extra})
    with pytest.raises(BoardError, match=message):
        boards.load("child")


def test_extends_an_unknown_board_or_itself_is_refused(tmp_path, monkeypatch):
    _boards_dir(
        tmp_path,
        monkeypatch,
        {
            "child": CHILD.replace('"corstone-300"', '"corstone-301"'),
            "loop": CHILD.replace('"child"', '"loop"').replace('"corstone-300"', '"loop"'),
        },
    )
    with pytest.raises(BoardError, match=r"extends: no board 'corstone-301'"):
        boards.load("child")
    with pytest.raises(BoardError, match=r"extends: loop -> loop extends itself"):
        boards.load("loop")


def test_every_target_has_exactly_one_reference_board(tmp_path, monkeypatch):
    _boards_dir(tmp_path, monkeypatch, {"child": CHILD + "reference = true\n"})
    with pytest.raises(BoardError, match=r"reference: target ethos-u55-32 already has reference board"):
        boards.targets()
    text = CORSTONE_300.read_text().replace('name = "corstone-300"', 'name = "other"').replace("reference = true", "")
    (tmp_path / "child" / "board.toml").write_text(text.replace("macs = [32, 64, 128, 256]", "macs = [512]"))
    (tmp_path / "child").rename(tmp_path / "other")
    with pytest.raises(BoardError, match=r"target ethos-u55-512 has no reference board"):
        boards.targets()


def test_kiln_targets_lists_boards_and_their_unverified_facts():
    result = subprocess.run([str(ROOT / ".venv/bin/kiln"), "targets"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["target", "board", "system", "config", "memory", "mode", "also", "on", "(--board)"]
    assert next(line for line in lines if line.startswith("ethos-u55-128 ")).endswith("alif-e7-he, mps3-an552")
    assert next(line for line in lines if line.startswith("alif-e8 ")).split()[:6] == [
        "alif-e8",
        "cortex-m55",
        "400",
        "MHz",
        "the",
        "board",
    ]
    assert next(line for line in lines if line.startswith("mps3-an552 ")).split()[4:6] == ["QEMU", "mps3-an547"]
    start = lines.index("unverified facts (board.toml's [unverified]):")
    listed = {(line.split()[0], line.split()[1].removesuffix(":")) for line in lines[start + 1 :]}
    assert listed == {(b, field) for b in boards.board_names() for field, _ in boards.load(b).unverified}
    assert ("mps4-corstone320", "npu.base") in listed

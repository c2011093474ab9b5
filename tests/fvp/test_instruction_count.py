"""kiln's instruction counter on the virtual platform (kiln.simulator.qemu_plugin):
exact counts checked against a function whose instruction count is known by hand
(tests/fvp/apps/insn_count/loop.s), its call sites checked against objdump's
disassembly, and the executor runner's per-inference count."""

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kiln import flow
from kiln.errors import ToolMissingError
from kiln.firmware import build as firmware
from kiln.simulator import qemu_plugin
from kiln.spec import CompileSpec

ROOT = Path(__file__).resolve().parents[2]
RUN_FVP = ROOT / "scripts" / "run_fvp.sh"
pytestmark = pytest.mark.fvp


def loop_instructions(n: int) -> int:
    """kiln_insn_loop(n) in loop.s: `movs` once, `adds; subs; bne` n times, `mov; bx lr` once."""
    return 1 + 3 * n + 2


@pytest.fixture(scope="module")
def loop_elf(firmware_build) -> Path:
    return firmware.elf(firmware_build, "kiln_test_insn_count")


def objdump_call_sites(elf: Path, function: str) -> list[int]:
    """Addresses after each `bl <function>` in arm-none-eabi-objdump's disassembly."""
    text = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True, check=True).stdout
    sites = []
    for m in re.finditer(
        rf"^\s*([0-9a-f]+):\s+([0-9a-f]{{4}}) ([0-9a-f]{{4}})\s+bl\s+[0-9a-f]+ <{function}>$", text, re.MULTILINE
    ):
        sites.append(int(m.group(1), 16) + 4)
    return sites


def test_the_loop_is_what_the_formula_assumes(loop_elf):
    """objdump shows kiln_insn_loop as the six instructions loop_instructions counts."""
    text = subprocess.run(
        ["arm-none-eabi-objdump", "-d", "--disassemble=kiln_insn_loop", str(loop_elf)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    body = [line.split("\t")[2].split()[0] for line in text.splitlines() if re.match(r"^\s*[0-9a-f]+:\t", line)]
    assert body == ["movs", "adds", "subs", "bne.n", "mov", "bx"]


def test_return_sites_match_objdump(loop_elf):
    function = qemu_plugin.find_function(loop_elf, "kiln_insn_loop")
    sites = objdump_call_sites(loop_elf, "kiln_insn_loop")
    assert sites, "objdump found no call of kiln_insn_loop"
    assert qemu_plugin.return_sites(loop_elf, function) == sites


def test_branch_destinations_match_objdump(firmware_build):
    """Every B (16-bit T1/T2, 32-bit T3/T4) and BL in a firmware image decodes to the
    destination objdump prints: a tail call to the counted function must be recognised."""
    elf = firmware.elf(firmware_build, "kiln_test_npu_run")
    text = subprocess.run(["arm-none-eabi-objdump", "-d", str(elf)], capture_output=True, text=True, check=True).stdout
    pattern = (
        r"^\s*([0-9a-f]+):\s+([0-9a-f]{4})(?: ([0-9a-f]{4}))?\s+"
        r"(b|bl|b(?:eq|ne|cs|cc|hs|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le))(?:\.[nw])?\s+([0-9a-f]+) <"
    )
    seen = {"16": 0, "32": 0}
    for m in re.finditer(pattern, text, re.MULTILINE):
        address, hw1, want = int(m.group(1), 16), int(m.group(2), 16), int(m.group(5), 16)
        if m.group(3) is None:
            assert qemu_plugin._short_branch(address, hw1) == want, m.group(0)
            seen["16"] += 1
        else:
            kind, got = qemu_plugin._branch(address, hw1, int(m.group(3), 16))
            assert (kind, got) == ("bl" if m.group(4) == "bl" else "b", want), m.group(0)
            seen["32"] += 1
    assert seen["16"] > 20 and seen["32"] > 20, seen


def test_each_call_counts_exactly(loop_elf):
    ns = [1, 2, 7, 1000, 12345]
    fw = flow.firmware(loop_elf, "ethos-u55-128", arguments=[str(n) for n in ns])
    result = flow.run(fw, timeout=60, count_instructions=qemu_plugin.Request("kiln_insn_loop", profile=True))
    assert result.status == 0, result.uart
    assert [f"kiln_insn_loop({n}) = {3 * n}" for n in ns] == [line for line in result.uart if "=" in line]
    counts = result.instructions
    assert counts.calls == [loop_instructions(n) for n in ns]
    assert counts.unfinished is None
    # The profile: every instruction of the loop, and nothing else inside the calls.
    function = qemu_plugin.find_function(loop_elf, "kiln_insn_loop")
    assert set(counts.by_address) == set(range(function.start, function.start + function.size, 2))
    assert counts.by_address[function.start] == len(ns)
    assert sum(counts.by_address.values()) == sum(loop_instructions(n) for n in ns)
    assert counts.by_function(loop_elf) == [("kiln_insn_loop", sum(loop_instructions(n) for n in ns))]


def test_whole_run_grows_by_the_extra_iterations(loop_elf):
    """Without a window the total counts too: 200 more iterations are 600 more instructions
    (n and 3n have as many digits in both runs, so parsing and printing run the same path)."""
    totals = []
    for n in (100, 300):
        fw = flow.firmware(loop_elf, "ethos-u55-128", arguments=[str(n)])
        result = flow.run(fw, timeout=60, count_instructions=qemu_plugin.Request())
        assert result.status == 0, result.uart
        totals.append(result.instructions.total)
    assert totals[1] - totals[0] == 3 * 200


def test_run_fvp_prints_the_counts(loop_elf):
    done = subprocess.run(
        [str(RUN_FVP), f"--elf={loop_elf}", "--target=ethos-u55-128", "--count-instructions=kiln_insn_loop"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    expected = " ".join(str(loop_instructions(n)) for n in (1, 7, 1000))  # the app's default calls
    assert f"kiln: instructions per call of kiln_insn_loop: {expected}" in done.stderr.splitlines()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--count-instructions=no_such_function"], "has no function 'no_such_function'"),
        (["--count-instructions=kiln_reset_handler"], "nothing in kiln_test_insn_count.elf calls kiln_reset_handler"),
        (["--profile-instructions"], "--profile-instructions needs --count-instructions=FUNCTION"),
        (["--count-instructions=kiln_insn_loop", "--platform=fvp"], "counted on kiln's virtual platform only"),
    ],
)
def test_bad_requests_are_usage_errors(loop_elf, args, message):
    done = subprocess.run(
        [str(RUN_FVP), f"--elf={loop_elf}", "--target=ethos-u55-128", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_missing_host_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "kiln-no-such-cc")
    with pytest.raises(ToolMissingError, match="no host C compiler .*kiln-no-such-cc.*setup.sh"):
        qemu_plugin.build(tmp_path)


def test_plugin_is_rebuilt_only_when_its_source_changes(tmp_path, monkeypatch):
    first = qemu_plugin.build(tmp_path)
    assert qemu_plugin.build(tmp_path) == first
    changed = tmp_path / "src"
    changed.mkdir()
    for name in qemu_plugin.SOURCES:
        shutil.copy(qemu_plugin.SOURCE_DIR / name, changed / name)
    (changed / "insn_count.c").write_text((changed / "insn_count.c").read_text() + "\n/* changed */\n")
    monkeypatch.setattr(qemu_plugin, "SOURCE_DIR", changed)
    second = qemu_plugin.build(tmp_path)
    assert second != first and second.is_file()


def test_plugin_refuses_bad_arguments(tmp_path, loop_elf):
    plugin = qemu_plugin.build(tmp_path)
    done = subprocess.run(
        [
            "qemu-system-arm",
            "-M",
            "mps3-an547",
            "-display",
            "none",
            "-monitor",
            "none",
            "-kernel",
            str(loop_elf),
            "-plugin",
            f"{plugin},out={tmp_path / 'r'},start=0x10",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "kiln insn_count: needs out=FILE, and start=ADDR with stop=ADDR or neither" in done.stderr


def test_malformed_report_is_an_error(tmp_path):
    report = tmp_path / "r.txt"
    report.write_text("kiln-insn-count 1\ntotal 12\nwindow x\n")
    with pytest.raises(qemu_plugin.PluginError, match="malformed line 'window x'"):
        qemu_plugin.read_report(report)
    with pytest.raises(qemu_plugin.PluginError, match="wrote no report"):
        qemu_plugin.read_report(tmp_path / "missing.txt")


def test_executor_runner_counts_each_inference(tmp_path):
    """tiny_cnn with int8 I/O, fully delegated: every inference runs the same code on
    the same sizes, so each counts the same number of instructions."""
    pte_path = tmp_path / "tiny_cnn.pte"
    compiled, _ = flow.compile_pte("tiny_cnn", CompileSpec(target="ethos-u55-128", io="int8"), pte_path)
    assert not [op for op in compiled.report["ops"] if op["where"] == "cpu"]
    elf = flow.build_runner(pte_path, "ethos-u55-128", output=tmp_path / "build", echo=lambda *a, **k: None)
    rng = np.random.default_rng(1)
    samples = [[rng.integers(-128, 127, size=(1, 1, 8, 8), endpoint=True).astype(np.int8)] for _ in range(3)]
    result = flow.infer(
        elf, "ethos-u55-128", pte_path, samples, tmp_path / "run", "virtual", timeout=600, count_instructions=True
    )
    assert result.status == 0, result.log
    assert result.cpu_instructions is not None and len(result.cpu_instructions) == 3
    assert len(set(result.cpu_instructions)) == 1
    assert 0 < result.cpu_instructions[0] < 100_000

"""kiln's Ethos-U driver on the virtual platform: a Vela-compiled stream runs through
the real driver code on QEMU with the NPU model attached; its output must equal
tosa_reference_model's for the same TOSA graph, bit for bit. Also: a stream compiled
for another configuration is refused, faulting streams are reported, and an NPU that
never finishes times out."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kiln import flow
from kiln.compile import compile_model
from kiln.firmware import build as firmware
from kiln.lower.vela import compile_tosa
from kiln.simulator.npu_job import APP, OUTPUT, write_job
from kiln.simulator.run import HANG_VARIABLE
from kiln.spec import CompileSpec
from tests.compiler.helpers import run_tosa

from .helpers import assert_pmu_lines_are_the_models, compiled

pytestmark = pytest.mark.fvp

EXIT_REFUSED, EXIT_RUN_FAILED = 12, 13
# Command words (Ethos-U55 register map): opcode in bits 9..0, bit 14 = a payload word follows.
OPCODE_MASK, PAYLOAD_FLAG = 0x3FF, 0x4000
NPU_SET_IFM_BASE0 = 0x000  # a cmd1 opcode
COP1_ACTION_CMD_STREAM, COP1_ACTION_CONFIG = 0x02, 0x01


@pytest.fixture(scope="module")
def tiny_cnn():
    result = compile_model("tiny_cnn", CompileSpec(target="ethos-u55-128"))
    assert len(result.vela) == 1
    return result


def run(elf: Path, target="ethos-u55-128", directory: Path | None = None) -> tuple[flow.RunResult, list[str]]:
    """`elf` on the virtual platform (as `kiln run --platform=virtual` runs it, in `directory`):
    the run, and kiln's notes on it."""
    notes: list[str] = []
    return flow.run(flow.firmware(elf, target), "virtual", 60, note=notes.append, cwd=directory), notes


def run_app(build: Path, directory: Path, target="ethos-u55-128") -> tuple[flow.RunResult, list[str]]:
    """The npu_run app on the job in `directory`."""
    return run(firmware.elf(build, APP), target, directory)


def random_input(vela, seed=1) -> np.ndarray:
    shape = vela.inputs[0].shape[-4:]  # NHWC: Vela pads shapes to 6-D with leading ones
    return np.random.default_rng(seed).integers(-128, 128, size=shape, dtype=np.int8)


def stream_start(cmd: bytes) -> int:
    """Word index of the first command word in a COP1 payload (driver_actions.py layout)."""
    words = np.frombuffer(cmd, dtype="<u4")
    i = 1
    while True:
        action = int(words[i]) & 0xFF
        if action == COP1_ACTION_CMD_STREAM:
            return i + 1
        i += 3 if action == COP1_ACTION_CONFIG else 1


def test_tiny_cnn_matches_the_reference_bit_for_bit(firmware_build, tmp_path, tiny_cnn):
    vela = tiny_cnn.vela[0]
    x = random_input(vela)
    write_job(tmp_path, vela, x.tobytes())
    result, notes = run_app(firmware_build, tmp_path)
    assert result.status == 0, result.uart + notes
    # CONFIG for ethos-u55-128: 2^7 MACs/cycle, 24 KiB SHRAM, product 0.
    assert "NPU: ID=0x10066001 CONFIG=0x00001807 (128 MACs/cycle, 24 KiB SHRAM)" in result.uart
    cycles = [line for line in result.uart if line.startswith("NPU cycles: ")]
    assert len(cycles) == 1 and int(cycles[0].split(": ")[1]) > 0
    (expected,) = run_tosa(tiny_cnn.tosa[0], [x])
    got = (tmp_path / OUTPUT).read_bytes()
    assert got == expected.astype(np.int8).tobytes()
    assert result.npu.streams == 1 and any(n.startswith("NPU model: 1 stream(s)") for n in notes)


def test_a_stream_for_another_mac_count_is_refused(firmware_build, tmp_path, tiny_cnn):
    target = "ethos-u55-256"
    vela = compile_tosa(tiny_cnn.tosa[0], "tiny", target, "Ethos_U55_High_End_Embedded", "Shared_Sram")
    write_job(tmp_path, vela, random_input(vela).tobytes())
    result, notes = run_app(firmware_build, tmp_path)
    assert result.status == EXIT_REFUSED, result.uart + notes
    assert (
        "refused: stream compiled for another NPU: the delegate was compiled for Ethos-U55 with 256 MACs; "
        "this NPU is an Ethos-U55 with 128 MACs"
    ) in result.uart
    assert not (tmp_path / OUTPUT).exists()


def test_a_bad_opcode_is_a_reported_parse_error(firmware_build, tmp_path, tiny_cnn):
    vela = tiny_cnn.vela[0]
    words = np.frombuffer(vela.cmd_data, dtype="<u4").copy()
    words[stream_start(vela.cmd_data)] = 0x3FF  # no such opcode, no payload word
    write_job(tmp_path, vela, random_input(vela).tobytes(), cmd=words.tobytes())
    result, notes = run_app(firmware_build, tmp_path)
    assert result.status == EXIT_RUN_FAILED, result.uart + notes
    # STATUS as latched by the interrupt: irq_raised (bit 1) | cmd_parse_error (bit 4).
    assert "run failed: NPU fault: STATUS=0x00000012 (irq_raised, cmd_parse_error), QREAD=0" in result.uart
    assert "STATUS after the failure: 0x00000000" in result.uart


def test_an_ifm_outside_memory_is_a_reported_bus_error(firmware_build, tmp_path, tiny_cnn):
    vela = tiny_cnn.vela[0]
    words = np.frombuffer(vela.cmd_data, dtype="<u4").copy()
    i = stream_start(vela.cmd_data)
    while not (words[i] & PAYLOAD_FLAG and words[i] & OPCODE_MASK == NPU_SET_IFM_BASE0):
        i += 2 if words[i] & PAYLOAD_FLAG else 1
    words[i + 1] = 0x0800_0000  # 128 MiB into region 1 (the 4 MiB SRAM): nothing answers there
    write_job(tmp_path, vela, random_input(vela).tobytes(), cmd=words.tobytes())
    result, notes = run_app(firmware_build, tmp_path)  # the app runs the stream without the bounds check
    assert result.status == EXIT_RUN_FAILED, result.uart + notes
    # irq_raised (bit 1) | bus_status (bit 2)
    assert any(
        line.startswith("run failed: NPU fault: STATUS=0x00000006 (irq_raised, bus_status)") for line in result.uart
    )
    # The model refused it against the scratch size the driver published, before the bus would have.
    assert result.npu.first_fault.startswith("IFM read of "), result.npu
    assert result.npu.first_fault.endswith(
        f"bytes at region 1 offset 0x8000000 is outside the {vela.scratch_size} bytes the firmware registered "
        "for region 1"
    ), result.npu
    assert "first fault: IFM read of " in "\n".join(notes)
    assert "STATUS after the failure: 0x00000000" in result.uart


def test_an_npu_that_never_finishes_times_out_and_is_reset(firmware_build, tmp_path, tiny_cnn, monkeypatch):
    vela = tiny_cnn.vela[0]
    write_job(tmp_path, vela, random_input(vela).tobytes(), timeout_ms=20)
    monkeypatch.setenv(HANG_VARIABLE, "1")
    result, notes = run_app(firmware_build, tmp_path)
    assert result.status == EXIT_RUN_FAILED, result.uart + notes
    # STATUS while hung: state running (bit 0), no interrupt.
    assert "run failed: NPU timeout: no completion interrupt within 20 ms, STATUS=0x00000001 (running)" in result.uart
    assert "STATUS after the failure: 0x00000000" in result.uart  # the driver's reset stopped it
    assert result.npu.streams == 0 and any(n.startswith("NPU model: 0 stream(s)") for n in notes)


@pytest.mark.parametrize(
    "target,system_config,memory_mode,config",
    [
        # product 1 (Ethos-U65), 48 KiB SHRAM, 2^8 MACs/cycle; Dedicated_Sram adds region 2.
        ("ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram_384KB", "0x10003008"),
        ("ethos-u55-32", "Ethos_U55_High_End_Embedded", "Sram_Only", "0x00001005"),
        # two cores: 2^9 MACs/cycle and 96 KiB SHRAM in total
        ("ethos-u65-512", "Ethos_U65_High_End", "Shared_Sram", "0x10006009"),
    ],
)
def test_other_configurations_match_the_reference(
    firmware_build, tmp_path, tiny_cnn, target, system_config, memory_mode, config
):
    vela = compile_tosa(tiny_cnn.tosa[0], "tiny", target, system_config, memory_mode)
    x = random_input(vela, seed=2)
    write_job(tmp_path, vela, x.tobytes())
    result, notes = run_app(firmware_build, tmp_path, target=target)
    assert result.status == 0, result.uart + notes
    assert any(f"CONFIG={config}" in line for line in result.uart)
    (expected,) = run_tosa(tiny_cnn.tosa[0], [x])
    assert (tmp_path / OUTPUT).read_bytes() == expected.astype(np.int8).tobytes()


def test_an_access_the_attachment_cannot_emulate_stops_the_run_loudly(firmware_build):
    result, notes = run(firmware.elf(firmware_build, "kiln_test_npu_ldrd"))
    assert result.status == 125, result.uart + notes  # the platform stopped, no firmware exit
    (stopped,) = [n for n in notes if n.startswith("the NPU model stopped the platform: ")]
    assert stopped.startswith("the NPU model stopped the platform: NPU register access at PC 0x")
    assert "is not a 32-bit LDR/STR (LDRD/STRD" in stopped
    assert not any("read " in line for line in result.uart)


def test_the_non_secure_alias_reaches_the_same_registers(firmware_build):
    from kiln import boards

    board = boards.load("corstone-300")
    assert (board.npu.base, board.npu.ns_alias) == (0x5810_2000, 0x4810_2000)  # shared/notes/platforms.md
    result, notes = run(firmware.elf(firmware_build, "kiln_test_npu_alias"))
    assert result.status == 0, result.uart + notes
    line = next(x for x in result.uart if x.startswith("ID secure"))
    id_secure, id_alias = line.split()[2], line.split()[4].rstrip(";")
    assert id_secure == id_alias != "0x00000000"
    assert line.endswith("QBASE0 written through the alias reads 0x12345670")


def patched_config(cmd: bytes, mask: int, value: int) -> bytes:
    """The payload with the CONFIG word of its config action (word 2) changed in `mask`."""
    words = np.frombuffer(cmd, dtype="<u4").copy()
    assert words[1] & 0xFF == COP1_ACTION_CONFIG
    words[2] = (int(words[2]) & ~mask) | value
    return words.tobytes()


@pytest.mark.parametrize(
    "change,message",
    [
        # "COP2" and "COP1" read as little-endian words
        (lambda cmd: b"COP2" + cmd[4:], lambda cmd: "not a COP1 payload: found 0x32504f43, expected 0x31504f43"),
        # the command stream (the last action) runs to the end: it needs every word of the original
        (
            lambda cmd: cmd[:-16],
            lambda cmd: f"COP1 payload truncated: needs {len(cmd) // 4} words, has {len(cmd) // 4 - 4}",
        ),
        (lambda cmd: cmd[:16], lambda cmd: "COP1 payload has no command stream"),
        (
            lambda cmd: cmd[:4] + (0x77).to_bytes(4, "little") + cmd[8:],
            lambda cmd: "COP1 payload has an unknown driver action: action 0x77 at word 1",
        ),
        # CONFIG fields: shram_size [15:8], cmd_stream_version [7:4], product [31:28].
        (
            lambda cmd: patched_config(cmd, 0xFF00, 48 << 8),
            lambda cmd: "stream compiled for another SHRAM size: stream 48 KiB, NPU 24 KiB",
        ),
        (
            lambda cmd: patched_config(cmd, 0xF0, 1 << 4),
            lambda cmd: "stream compiled for another command stream version: stream version 1, NPU version 0",
        ),
        (
            lambda cmd: patched_config(cmd, 0xF000_0000, 1 << 28),
            lambda cmd: (
                "stream compiled for another NPU: the delegate was compiled for Ethos-U65 with 128 MACs; "
                "this NPU is an Ethos-U55 with 128 MACs"
            ),
        ),
        # product 2 with the U55-128's other fields: an Ethos-U85 of 128 MACs
        (
            lambda cmd: patched_config(cmd, 0xF000_0000, 2 << 28),
            lambda cmd: (
                "stream compiled for another NPU: the delegate was compiled for Ethos-U85 with 128 MACs; "
                "this NPU is an Ethos-U55 with 128 MACs"
            ),
        ),
    ],
)
def test_malformed_or_foreign_payloads_are_refused(firmware_build, tmp_path, tiny_cnn, change, message):
    vela = tiny_cnn.vela[0]
    write_job(tmp_path, vela, random_input(vela).tobytes(), cmd=change(vela.cmd_data))
    result, notes = run_app(firmware_build, tmp_path)
    assert result.status == EXIT_REFUSED, result.uart + notes
    assert "refused: " + message(vela.cmd_data) in result.uart


# --- The driver's Ethos-U85 path: corstone-320's executor runner on the virtual platform ---------
EXIT_USAGE, EXIT_INFERENCE = 2, 6  # firmware/apps/executor_runner/runner.h
NPU_SET_ACTIVATION = 0x125
BLOCK_OPERATIONS = {0x002, 0x003, 0x005, 0x006, 0x007}  # CONV, DEPTHWISE, POOL, ELEMENTWISE, RESIZE (U85)


def test_a_u85_stream_the_npu_cannot_parse_is_a_reported_fault(work, builder, tmp_path):
    """digits for ethos-u85-256 with its first ACTIVATION's function set to 2 (reserved: the U85's
    functions are 0, 1, 4, 5, 7..11; the bounds check has no reason to read it) passes the delegate's
    checks and faults on the NPU: the driver reports the U85 STATUS with cmd_parse_error and QREAD at
    the operation that read it, and exits through the runner's inference failure."""
    from kiln.lower import ethosu_payload as ep
    from kiln.pte.reader import deserialize
    from tests.firmware.runtime import npu_hostile as nh

    good = compiled(work, "digits", "ethos-u85-256")
    data = bytearray(good.read_bytes())
    f = deserialize(bytes(data))
    cmd = ep.decode(f.delegate_payload(f.program.execution_plans[0].delegates[0])).cmd_data
    at = bytes(data).index(cmd)
    words = np.frombuffer(cmd, "<u4")
    start, end = nh.stream_span(cmd)
    activation = op = None
    for i, opcode, payload in nh.commands(words, start, end):
        if not payload and opcode == NPU_SET_ACTIVATION and activation is None:
            activation = i
        elif not payload and opcode in BLOCK_OPERATIONS and activation is not None:
            op = i
            break
    word = (int(words[activation]) & ~(0x1F << 16)) | 2 << 16  # activation_function: bits 4..0 of the parameter
    data[at + 4 * activation : at + 4 * activation + 4] = word.to_bytes(4, "little")
    bad = work / "digits-u85-reserved-activation.bin"
    bad.write_bytes(bytes(data))
    elf = builder(good, "ethos-u85-256", f"--bake={bad}")
    result = flow.infer(elf, "ethos-u85-256", good, None, tmp_path, platform="virtual", timeout=120)
    assert result.status == EXIT_INFERENCE, result.log
    # irq_raised (bit 1) | cmd_parse_error (bit 4); QREAD: bytes of the stream before the operation
    error = f"NPU fault: STATUS=0x00000012 (irq_raised, cmd_parse_error), QREAD={4 * (op - start)}"
    lines = result.run.uart
    assert lines.count("EthosUBackend: delegate 0: " + error) == 1, result.log
    assert lines.count("inference failed: " + error) == 1
    assert "NPU STATUS after the failure: 0x00000000" in lines  # the driver's reset cleared it


@pytest.fixture(scope="module")
def u85_digits(work, builder):
    """digits compiled for ethos-u85-256 and corstone-320's runner built for it, under a name of
    its own (the builder's copy of the ELF is overwritten by the next build of the same .pte)."""
    pte_path = compiled(work, "digits", "ethos-u85-256")
    elf = work / "digits-ethos-u85-256-runner.elf"
    shutil.copyfile(builder(pte_path, "ethos-u85-256"), elf)
    return elf


def run_runner(elf: Path, directory: Path, *firmware_args: str) -> flow.RunResult:
    """The runner on the virtual platform with `firmware_args` as they are (its own checks)."""
    fw = flow.firmware(elf, "ethos-u85-256", arguments=firmware_args)
    return flow.run(fw, "virtual", 60, cwd=directory, note=lambda text: None)


def test_a_u85_npu_that_never_finishes_times_out_and_is_reset(u85_digits, tmp_path, monkeypatch):
    """The runner's --npu-timeout-ms reaches the driver: on a virtual platform whose NPU never
    finishes, the driver waits 20 ms for the completion interrupt, reports the U85's STATUS as it
    reads then, resets the NPU, and the runner exits with its inference failure."""
    monkeypatch.setenv(HANG_VARIABLE, "1")
    result = run_runner(u85_digits, tmp_path, "--npu-timeout-ms=20")
    assert result.status == EXIT_INFERENCE, "\n".join(result.uart)
    assert result.uart[0].endswith(" on corstone-320")  # the runner's banner: the board with the U85
    # The U85's STATUS while hung: state (bit 0) running; no irq_raised (bit 1), no fault bit.
    error = "NPU timeout: no completion interrupt within 20 ms, STATUS=0x00000001 (running)"
    assert result.uart.count("EthosUBackend: delegate 0: " + error) == 1, "\n".join(result.uart)
    assert result.uart.count("inference failed: " + error) == 1
    # After the soft reset: STATUS 0 (the model's reset completes at once: reset_status clear).
    assert "NPU STATUS after the failure: 0x00000000" in result.uart
    assert result.npu_summary.startswith("NPU model: 0 stream(s)")  # the hung stream never ran


def test_kiln_run_passes_npu_timeout_ms_to_the_runner(u85_digits, tmp_path, monkeypatch, capsys):
    """`kiln run --npu-timeout-ms=20` puts the option on the runner's command line: the hung NPU
    times out after 20 ms, not the driver's default 10000."""
    from kiln import cli

    monkeypatch.setenv(HANG_VARIABLE, "1")
    monkeypatch.chdir(tmp_path)
    status = cli.main(
        ["run", f"--elf={u85_digits}", "--target=ethos-u85-256", "--platform=virtual", "--npu-timeout-ms=20"]
    )
    assert status == EXIT_INFERENCE
    error = "NPU timeout: no completion interrupt within 20 ms, STATUS=0x00000001 (running)"
    assert capsys.readouterr().out.splitlines().count("inference failed: " + error) == 1


def test_kiln_run_profile_attributes_the_runs_pmu_cycles_to_layers(u85_digits, work, tmp_path, capsys):
    """`kiln run --profile=PTE` (run_fvp.sh --profile) runs the very ELF and prints kiln profile's
    table: its layers' NPU cycles add up to the PMU total the firmware printed in that run, the
    CPU ops get the run's instruction counts, and --profile-output writes kiln profile's files."""
    from kiln import cli

    pte_path = compiled(work, "digits", "ethos-u85-256")
    status = cli.main(
        [
            "run",
            f"--elf={u85_digits}",
            "--target=ethos-u85-256",
            "--platform=virtual",
            f"--profile={pte_path}",
            f"--profile-output={tmp_path}",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    (pmu,) = [int(line.split()[3]) for line in out.splitlines() if line.startswith("NPU PMU: total ")]
    written = json.loads((tmp_path / "profile.json").read_text())
    assert sum(layer["npu_cycles"] or 0 for layer in written["layers"]) == pmu
    assert f"sum of the layers' NPU cycles: {pmu:,}" in out.splitlines()
    cpu = [layer for layer in written["layers"] if layer["where"] == "cpu"]
    assert cpu and all(layer["cpu_instructions"] > 0 for layer in cpu)
    assert written["platform_pmu_cycles"] == pmu
    assert {p.name for p in tmp_path.iterdir()} == {"profile.json", "timeline.png", "memory.png", "profile.html"}


def test_kiln_run_profile_refuses_a_pte_the_elf_was_not_built_from(u85_digits, work, tmp_path, capsys):
    """One weight byte changed in the .pte: the ELF's baked program is another; refused before
    anything runs."""
    from kiln import cli
    from kiln.pte.reader import deserialize

    good = compiled(work, "digits", "ethos-u85-256")
    data = bytearray(good.read_bytes())
    f = deserialize(bytes(data))
    payload = f.delegate_payload(f.forward().delegates[0])
    data[bytes(data).find(payload) + len(payload) // 2] ^= 0xFF
    bad = tmp_path / "other.pte"
    bad.write_bytes(bytes(data))
    shutil.copyfile(good.with_suffix(".json"), bad.with_suffix(".json"))
    status = cli.main(["run", f"--elf={u85_digits}", "--target=ethos-u85-256", f"--profile={bad}"])
    assert status == 2
    err = capsys.readouterr().err
    assert f"kiln: error: {u85_digits.name} was not built from other.pte: it bakes a " in err, err
    assert "give the .pte the ELF was built from" in err


def test_corstone320s_runner_prints_the_pmu_counts_the_u85_model_made(u85_digits, tmp_path):
    """The runner's NPU PMU line on an Ethos-U85 (corstone-320): its 8 event counters give
    active, idle and all four beat counts, equal to the NPU model's own for the stream."""
    result = run_runner(u85_digits, tmp_path)
    assert result.status == 0, "\n".join(result.uart)
    assert_pmu_lines_are_the_models(result, 1, u85=True)


@pytest.mark.parametrize("value", ["0", "4294967296", "20ms", ""])
def test_an_npu_timeout_that_is_no_whole_number_of_milliseconds_is_refused(u85_digits, tmp_path, value):
    """1 to 2^32 - 1 ms (the driver's RunOptions::timeout_ms); 0 would not wait at all."""
    result = run_runner(u85_digits, tmp_path, f"--npu-timeout-ms={value}")
    assert result.status == EXIT_USAGE, "\n".join(result.uart)
    assert (
        result.uart.count(
            f"runner: --npu-timeout-ms takes a whole number of milliseconds from 1 to 4294967295, not '{value}'"
        )
        == 1
    ), "\n".join(result.uart)

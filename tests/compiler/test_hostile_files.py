"""Damaged files given to kiln's commands (issue 14, item 6): each kind of file a command reads
(a .pte, the compile report beside it, a board description, a calibration .npz, an input file)
cut, bit-flipped, given wrong magic, wrong JSON types, huge numbers, emptied or replaced by a
folder, and the command run in-process: a non-zero status and one line on standard error,
"kiln: error: ...", never a traceback or an internal error. The mutations are seeded, so
every run sees the same files."""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kiln import boards, cli
from kiln.firmware import runner_build
from kiln.pte import writer
from kiln.pte.reader import deserialize
from kiln.pte.schema import AllocationInfo, ExtraTensorInfoSlot, Operator
from tests.compiler.helpers import error_lines
from tests.firmware.runtime import state_program
from tests.firmware.runtime.helpers import In, single_kernel

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "executorch" / "conv_relu_arm_delegate_ethos-u55-128.pte"
TARGET = "ethos-u55-128"
FLIPS = 12  # seeded bit flips per file kind
HUGE = 12  # seeded 32-bit words set to 0xFFFFFFFF or 0x7FFFFFFF


class Planned(BaseException):
    """kiln build got past reading and planning the .pte (the test stops it before CMake)."""


def assert_one_error_line(main, argv: list[str], capsys, accepted: tuple[type, ...] = ()):
    """Runs main(argv); a KilnError must give one "kiln: error:" line and a non-zero status.
    Returns False when the command accepted the file (raised one of `accepted`, or returned 0)."""
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse
        status = stop.code
    except accepted:
        capsys.readouterr()
        return False
    err = capsys.readouterr().err
    if status == 0:
        return False
    assert "Traceback" not in err, err
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("kiln: error: "), err
    return True


def damaged(data: bytes, seed: int) -> dict[str, bytes]:
    """Kinds of damage to `data`, by name: cuts, bit flips, huge words, wrong magic, empty."""
    rng = random.Random(seed)
    out = {"empty": b"", "wrong magic": b"XXXX" + data[4:] if data[4:8] != b"ET12" else data[:4] + b"XT12" + data[8:]}
    for n in sorted({1, 7, 8, 16, 40, len(data) // 2, len(data) - 1}):
        out[f"cut to {n} bytes"] = data[:n]
    for _ in range(FLIPS):
        flipped = bytearray(data)
        at = rng.randrange(len(data))
        flipped[at] ^= 1 << rng.randrange(8)
        out[f"bit flip at {at}"] = bytes(flipped)
    for _ in range(HUGE):
        huge = bytearray(data)
        at = rng.randrange(len(data) // 4) * 4
        struct.pack_into("<I", huge, at, rng.choice((0xFFFFFFFF, 0x7FFFFFFF)))
        out[f"huge word at {at}"] = bytes(huge)
    return out


@pytest.fixture(scope="module")
def programs() -> dict[str, bytes]:
    """A kiln-written program (one CPU kernel: conv2d on a planned input, constant weights)
    and ExecuTorch's Arm flow's delegated one."""
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32)
    conv, _ = single_kernel(
        "aten::convolution", "out", [In(x), w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1], (1, 3, 5, 5)
    )
    return {"kiln conv": conv, "executorch delegate": FIXTURE.read_bytes()}


def _inputs(data: bytes, folder: Path) -> list[str]:
    plan = deserialize(data).forward()
    paths = []
    for n, i in enumerate(plan.inputs):
        paths.append(folder / f"in{n}.bin")
        paths[-1].write_bytes(bytes(plan.values[i].nbytes))
    return [str(p) for p in paths]


@pytest.mark.parametrize("program", ["kiln conv", "executorch delegate"])
def test_a_damaged_pte_is_one_error_line_for_run_host_and_build(program, programs, tmp_path, capsys, monkeypatch):
    data = programs[program]
    inputs = _inputs(data, tmp_path)  # the undamaged program's inputs
    monkeypatch.setattr(runner_build, "generate", lambda *args, **kwargs: (_ for _ in ()).throw(Planned()))
    refused = 0
    cases = damaged(data, seed=len(program))
    for bad in cases.values():
        path = tmp_path / "bad.pte"
        path.write_bytes(bad)
        ran = assert_one_error_line(
            cli.main,
            ["run-host", str(path), *sum((["--input", i] for i in inputs), []), "--output-dir", str(tmp_path / "out")],
            capsys,
        )
        built = assert_one_error_line(
            cli.main,
            ["build", "--pte", str(path), "--target", TARGET, "--output", str(tmp_path / "build")],
            capsys,
            accepted=(Planned,),
        )
        refused += ran + built
    assert refused >= len(cases), f"only {refused} of {2 * len(cases)} runs refused the damage"
    folder = tmp_path / "folder.pte"
    folder.mkdir()
    assert assert_one_error_line(cli.main, ["run-host", str(folder), "--output-dir", str(tmp_path / "o")], capsys)
    assert assert_one_error_line(cli.main, ["build", "--pte", str(folder), "--target", TARGET], capsys)


REPORTS = {
    "not JSON": b'{"target": ',
    "not UTF-8": b"\xff\xfe{}",
    "empty": b"",
    "a list": b"[1, 2, 3]",
    "a number": b"1e999",
    "memory_mode a number": json.dumps({"target": TARGET, "memory_mode": 5}).encode(),
    "target a list": json.dumps({"target": [TARGET], "memory_mode": "Shared_Sram"}).encode(),
    "system_config an object": json.dumps({"target": TARGET, "system_config": {"a": 1}}).encode(),
    "memory mode the target lacks": json.dumps({"target": TARGET, "memory_mode": "Dedicated_Sram"}).encode(),
    "memory mode nobody has": json.dumps({"target": TARGET, "memory_mode": "Nowhere" * 1000}).encode(),
    "deeply nested": b"[" * 100000 + b"]" * 100000,
}


@pytest.mark.parametrize("case", REPORTS)
def test_a_damaged_compile_report_is_one_error_line_for_build(case, programs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner_build, "generate", lambda *args, **kwargs: (_ for _ in ()).throw(Planned()))
    path = tmp_path / "model.pte"
    path.write_bytes(programs["kiln conv"])  # no delegate: the report alone names the memory mode
    path.with_suffix(".json").write_bytes(REPORTS[case])
    assert assert_one_error_line(
        cli.main, ["build", "--pte", str(path), "--target", TARGET], capsys, accepted=(Planned,)
    )


@pytest.mark.parametrize("name", ["aten::relu\0", "aten::relu; rm -rf /", "", "aten::\u00e9"])
def test_an_operator_name_that_is_no_name_is_one_error_line_for_build(name, tmp_path, capsys):
    """The runner build passes operator names to the kernel table generator's command line."""

    def rename(fields):
        return {**fields, "operators": [Operator(name, "out")]}

    data, _ = single_kernel("aten::relu", "out", [In(np.zeros(4, np.float32))], (4,), plan_edit=rename)
    path = tmp_path / "model.pte"
    path.write_bytes(data)
    assert assert_one_error_line(cli.main, ["build", "--pte", str(path), "--target", TARGET], capsys)


@pytest.mark.parametrize("size", [-16, 1 << 40])
def test_a_planned_buffer_no_memory_holds_is_one_error_line_for_build(size, tmp_path, capsys, monkeypatch):
    """A second planned buffer, used by no tensor, of a negative or a terabyte size."""

    def extra_buffer(fields):
        return {**fields, "non_const_buffer_sizes": [*fields["non_const_buffer_sizes"], size]}

    monkeypatch.setattr(runner_build, "generate", lambda *args, **kwargs: (_ for _ in ()).throw(Planned()))
    data, _ = single_kernel("aten::relu", "out", [In(np.zeros(4, np.float32))], (4,), plan_edit=extra_buffer)
    path = tmp_path / "model.pte"
    path.write_bytes(data)
    assert assert_one_error_line(
        cli.main, ["build", "--pte", str(path), "--target", TARGET], capsys, accepted=(Planned,)
    )


def _moved_state(plans):
    """The second method's state tensor acc at another offset than the first's."""
    acc = plans[1].values[0]
    return [plans[0], state_program.with_values(plans[1], v0=replace(acc, allocation_info=AllocationInfo.at(2, 16)))]


# Each an edit of the two plans, or fields written into every state's extra_tensor_info
# (state_program.extra_fields).
STATE_DAMAGE = {
    "arenas of different sizes": (
        lambda plans: [plans[0], replace(plans[1], non_const_buffer_sizes=[0, 48, 64])],
        (),
    ),
    "a state tensor moved": (_moved_state, ()),
    "state data outside the file": (None, [(ExtraTensorInfoSlot.location, "i8", 1)]),  # EXTERNAL
}


@pytest.mark.parametrize("damage", STATE_DAMAGE)
def test_a_state_its_methods_cannot_share_is_one_error_line_for_run_host_and_build(
    damage, tmp_path, capsys, monkeypatch
):
    """A two-method program (tests/firmware/runtime/state_program.py) whose state arena (memory id
    2) the methods could not share, written without the writer's checks."""
    monkeypatch.setattr(runner_build, "generate", lambda *args, **kwargs: (_ for _ in ()).throw(Planned()))
    monkeypatch.setattr(writer, "check_state", lambda *args, **kwargs: None)
    edit, fields = STATE_DAMAGE[damage]
    state_program.extra_fields(monkeypatch, *fields)
    path = tmp_path / "model.pte"
    path.write_bytes(state_program.write(edit))
    np.zeros(4, np.float32).tofile(tmp_path / "x.bin")
    run_host = ["run-host", str(path), "--input", str(tmp_path / "x.bin"), "--output-dir", str(tmp_path / "out")]
    assert assert_one_error_line(cli.main, run_host, capsys)
    build = ["build", "--pte", str(path), "--target", TARGET, "--output", str(tmp_path / "build")]
    assert assert_one_error_line(cli.main, build, capsys, accepted=(Planned,))


def test_a_folder_as_the_compile_report_is_one_error_line(programs, tmp_path, capsys):
    path = tmp_path / "model.pte"
    path.write_bytes(programs["kiln conv"])
    path.with_suffix(".json").mkdir()
    assert assert_one_error_line(cli.main, ["build", "--pte", str(path), "--target", TARGET], capsys)


def test_a_damaged_board_description_is_one_error_line(tmp_path, capsys):
    text = (boards.BOARDS_DIR / "corstone-300" / "board.toml").read_bytes()
    folder = tmp_path / "corstone-300"
    folder.mkdir()
    path = folder / "board.toml"
    cases = damaged(text, seed=300)
    replaced = [
        ("stack_size = 0x8000", "stack_size = 0x7fffffffffffffffffff"),  # beyond TOML's int64
        ("stack_size = 0x8000", 'stack_size = "big"'),
        ("size = 0x0040_0000", "size = -1"),
        ("base = 0x3100_0000", "base = 0xffff_ffff_ffff"),
        ("clock_hz = 25_000_000", "clock_hz = 2.5e7"),
        ("schema = 1", "schema = [1]"),
        ("[cpu]", "[[cpu]]"),
        ('name = "sram"', "name = 7"),
    ]
    for old, new in replaced:
        assert old.encode() in text, old
        cases[f"{old} -> {new}"] = text.replace(old.encode(), new.encode(), 1)
    refused = 0
    for bad in cases.values():
        path.write_bytes(bad)
        refused += assert_one_error_line(boards.main, ["check", str(path)], capsys)
    assert refused >= len(cases) - FLIPS, f"only {refused} of {len(cases)} damaged board descriptions refused"
    path.unlink()
    path.mkdir()
    assert assert_one_error_line(boards.main, ["check", str(path)], capsys)


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_a_damaged_calibration_file_is_one_error_line(tmp_path, capsys):
    from kiln.frontend.export import load_model

    shape = tuple(load_model("tiny_cnn").inputs[0].shape)
    good = _npz(x=np.zeros(shape, np.float32))
    cases = {name: bad for name, bad in damaged(good, seed=7).items() if "cut" in name or name == "empty"}
    cases["wrong magic"] = b"PK\x03\x05" + good[4:]
    cases["strings"] = _npz(x=np.full(shape, "a"))
    cases["complex"] = _npz(x=np.zeros(shape, np.complex64))
    cases["NaN"] = _npz(x=np.full(shape, np.nan, np.float32))
    cases["no samples"] = _npz(x=np.zeros((0, *shape), np.float32))
    cases["wrong shape"] = _npz(x=np.zeros((3, 3), np.float32))
    cases["two arrays"] = _npz(x=np.zeros(shape, np.float32), y=np.zeros(1))
    cases["a pickled object"] = _npz(x=np.array([{"a": 1}], dtype=object))
    header = io.BytesIO()  # an .npy whose header claims 2^40 elements, with none after it
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    claim = io.BytesIO()
    with zipfile.ZipFile(claim, "w") as z:
        z.writestr("x.npy", header.getvalue())
    cases["a huge shape claimed"] = claim.getvalue()
    for name, bad in cases.items():
        path = tmp_path / "calibration.npz"
        path.write_bytes(bad)
        assert assert_one_error_line(
            cli.main,
            [
                "compile",
                "tiny_cnn",
                "--target",
                TARGET,
                "--output",
                str(tmp_path / "o.pte"),
                "--calibration",
                str(path),
            ],
            capsys,
        ), name
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    assert assert_one_error_line(
        cli.main,
        ["compile", "tiny_cnn", "--target", TARGET, "--output", str(tmp_path / "o.pte"), "--calibration", str(empty)],
        capsys,
    )


def test_a_damaged_input_file_is_one_error_line(programs, tmp_path, capsys):
    path = tmp_path / "model.pte"
    path.write_bytes(programs["kiln conv"])
    size = deserialize(programs["kiln conv"]).forward().values[0].nbytes
    folder = tmp_path / "folder.bin"
    folder.mkdir()
    for name, raw in {
        "empty": b"",
        "one byte short": bytes(size - 1),
        "one byte long": bytes(size + 1),
        "huge": None,
        "a folder": None,
    }.items():
        given = tmp_path / "input.bin"
        if name == "huge":
            with open(given, "wb") as f:  # sparse: 16 GiB that take no disk
                f.truncate(16 << 30)
        elif raw is not None:
            given.write_bytes(raw)
        else:
            given = folder
        assert assert_one_error_line(
            cli.main, ["run-host", str(path), "--input", str(given), "--output-dir", str(tmp_path / "out")], capsys
        ), name
        if given.is_file():
            given.unlink()
    assert assert_one_error_line(
        cli.main, ["build", "--pte", str(path), "--target", TARGET, "--default-input", str(folder)], capsys
    )
    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as f:
        f.truncate(16 << 30)
    assert assert_one_error_line(
        cli.main, ["build", "--pte", str(path), "--target", TARGET, "--default-input", str(huge)], capsys
    )
    assert assert_one_error_line(
        cli.main, ["run", "--elf", str(path), "--target", TARGET, "--input", str(folder)], capsys
    )

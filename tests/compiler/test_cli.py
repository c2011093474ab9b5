"""The `kiln` command and its script wrappers: every command, fed bad input, says so in one
line on standard error (no traceback) and exits non-zero; kiln.errors.run_command maps
errors to exit statuses; every error class is a KilnError defined in kiln.errors; no
command prints torchao's import notices."""

from __future__ import annotations

import argparse
import ast
import builtins
import logging
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kiln import cli, errors
from kiln.pte.reader import deserialize
from tests.compiler.helpers import error_lines

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
FIXTURE = ROOT / "tests" / "fixtures" / "executorch" / "conv_relu_arm_delegate_ethos-u55-128.pte"
# What importing torchao 0.18 logs on torch's CPU wheel (kiln/__init__.py drops exactly these).
TORCHAO_NOTICES = ("Failed to load", "is an Enum subclass")


def kiln(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kiln.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def assert_one_line(run: subprocess.CompletedProcess, expected: str, prog: str = "kiln"):
    assert run.returncode != 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    lines = error_lines(run.stderr)
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"{prog}") and ": error: " in lines[0], lines
    assert expected in lines[0], lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Bad inputs of every kind, and a valid .pte to damage."""
    d = tmp_path_factory.mktemp("bad")
    (d / "garbage.bin").write_bytes(b"this is not a program or an ELF\n")
    # A 32-bit Arm ELF header (ELF's e_ident, then e_type EXEC, e_machine 40 = ARM, e_version 1,
    # no entry, program headers or sections): passes kiln run's checks of the file
    (d / "fake.elf").write_bytes(
        b"\x7fELF"
        + bytes([1, 1, 1])
        + bytes(9)
        + struct.pack("<HHIIIIIHHHHHH", 2, 40, 1, 0, 0, 0, 0, 52, 32, 0, 40, 0, 0)
    )
    (d / "zeros.elf").write_bytes(b"\x7fELF" + bytes(60))  # the magic, and no ELF header after it
    (d / "x86.elf").write_bytes(
        b"\x7fELF"
        + bytes([2, 1, 1])
        + bytes(9)
        + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0, 0, 0, 0, 64, 56, 0, 64, 0, 0)
    )
    (d / "folder").mkdir()
    (d / "raises.py").write_text("raise RuntimeError('the model file fails on import')\n")
    (d / "syntax.py").write_text("def broken(:\n")
    (d / "not_npz.npz").write_bytes(b"not a zip\n")
    data = FIXTURE.read_bytes()
    plan = deserialize(data).program.execution_plans[0]
    (d / "in0.bin").write_bytes(bytes(plan.values[plan.inputs[0]].nbytes))
    (d / "short.bin").write_bytes(b"\0")
    # The same ExecuTorch program, its delegate compiled (so its compile specs say) for a
    # system config Vela does not know, or for a target kiln's NPU model does not model (no NPU is an ethos-u99).
    assert data.count(b"Ethos_U55_High_End_Embedded") == 1 and data.count(b"ethos-u55-128") == 2
    (d / "unknown_config.pte").write_bytes(data.replace(b"Ethos_U55_High_End_Embedded", b"Ethos_U55_Nowhere_Embedded_"))
    (d / "unknown_target.pte").write_bytes(data.replace(b"ethos-u55-128", b"ethos-u99-128"))
    (d / "good.pte").write_bytes(data)
    return {p.name: p for p in d.iterdir()}


# command line -> the text its one error line must contain. F(name) is a file of `files`.
CASES = {
    "no command": ([], "the following arguments are required: COMMAND"),
    "unknown command": (["frobnicate"], "invalid choice: 'frobnicate'"),
    "targets: an extra argument": (["targets", "extra"], "unrecognized arguments: extra"),
    # compile
    "compile: missing model file": (
        ["compile", "/no/such/model.py", "--target", "ethos-u55-128", "--output", "O"],
        "'/no/such/model.py' is neither a zoo model",
    ),
    "compile: a folder as the model": (
        ["compile", "F(folder)", "--target", "ethos-u55-128", "--output", "O"],
        "is neither a zoo model",
    ),
    "compile: a model file that raises": (
        ["compile", "F(raises.py)", "--target", "ethos-u55-128", "--output", "O"],
        "the model file fails on import",
    ),
    "compile: a model file that is no Python": (
        ["compile", "F(syntax.py)", "--target", "ethos-u55-128", "--output", "O"],
        "importing it failed: SyntaxError",
    ),
    "compile: unknown target": (
        ["compile", "tiny_cnn", "--target", "ethos-u99-1", "--output", "O"],
        "unknown target 'ethos-u99-1'",
    ),
    "compile: no --output": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128"],
        "the following arguments are required: --output",
    ),
    "compile: bad --io": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", "O", "--io", "int4"],
        "argument --io: invalid choice: 'int4'",
    ),
    "compile: bad --tied-head": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", "O", "--tied-head", "twice"],
        "argument --tied-head: invalid choice: 'twice'",
    ),
    "compile: bad --activation-bits": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", "O", "--activation-bits", "12"],
        "argument --activation-bits: invalid choice",
    ),
    "compile: --int16-sqnr without --int16 auto": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", "O", "--int16-sqnr", "20"],
        "--int16-sqnr and --int16-budget set the rule of --int16 auto; add --int16 auto",
    ),
    "compile: a negative --int16-budget": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", "O", "--int16", "auto", "--int16-budget=-1"],
        "--int16-budget must be 0 or more ops, not -1",
    ),
    "compile: an unknown --int16 policy": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", "O", "--int16", "softmax"],
        "unknown 16-bit policy 'softmax' (known: attention, norms, auto)",
    ),
    "compile: garbage calibration": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", "O", "--calibration", "F(not_npz.npz)"],
        "not a readable .npz",
    ),
    "compile: a folder as --output": (
        ["compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", "F(folder)"],
        "Is a directory",
    ),
    # build
    "build: missing .pte": (
        ["build", "--pte", "/no/such.pte", "--target", "ethos-u55-128"],
        "cannot read /no/such.pte: No such file or directory",
    ),
    "build: garbage .pte": (
        ["build", "--pte", "F(garbage.bin)", "--target", "ethos-u55-128"],
        "is not a valid .pte: not an ExecuTorch program",
    ),
    "build: a folder as the .pte": (["build", "--pte", "F(folder)", "--target", "ethos-u55-128"], "Is a directory"),
    "build: unknown target": (
        ["build", "--pte", "F(good.pte)", "--target", "ethos-u99-1"],
        "unknown target 'ethos-u99-1'",
    ),
    "build: bad --build_type": (
        ["build", "--pte", "F(good.pte)", "--target", "ethos-u55-128", "--build_type", "Fast"],
        "argument --build-type: invalid choice: 'Fast'",
    ),
    "build: another memory mode than compiled for": (
        ["build", "--pte", "F(good.pte)", "--target", "ethos-u55-128", "--memory_mode=Sram_Only"],
        "was compiled for memory mode",
    ),
    "build: missing --default-input": (
        ["build", "--pte", "F(good.pte)", "--target", "ethos-u55-128", "--default-input", "/no/such.bin"],
        "--default-input /no/such.bin: no such",
    ),
    "build: missing --bake": (
        ["build", "--pte", "F(good.pte)", "--target", "ethos-u55-128", "--bake", "/no/such.bin"],
        "--bake /no/such.bin: no such file",
    ),
    "build: neither --pte nor --app": (["build", "--target", "ethos-u55-128"], "one of the arguments --pte --app"),
    "build: --pte with --test-apps": (
        ["build", "--pte", "F(good.pte)", "--target", "ethos-u55-128", "--test-apps"],
        "--test-apps applies to the firmware's plain apps (--app)",
    ),
    "build: --app with a runner's option": (
        ["build", "--app", "hello", "--target", "ethos-u55-128", "--memory-mode", "Sram_Only"],
        "--memory-mode applies to a runner",
    ),
    # run
    "run: missing ELF": (["run", "--elf", "/no/such.elf", "--target", "ethos-u55-128"], "no such ELF file"),
    "run: garbage ELF": (["run", "--elf", "F(garbage.bin)", "--target", "ethos-u55-128"], "is not an ELF file"),
    "run: a damaged ELF": (
        ["run", "--elf", "F(zeros.elf)", "--target", "ethos-u55-128"],
        "is a damaged ELF file (ELFError: Invalid EI_CLASS",
    ),
    "run: an ELF for another machine": (
        ["run", "--elf", "F(x86.elf)", "--target", "ethos-u55-128"],
        "is a 64-bit ELF file for EM_X86_64, not firmware for an Arm Cortex-M",
    ),
    "run: a folder as the ELF": (["run", "--elf", "F(folder)", "--target", "ethos-u55-128"], "is a directory"),
    "run: unknown target": (
        ["run", "--elf", "F(garbage.bin)", "--target", "ethos-u99-1"],
        "unknown target 'ethos-u99-1'",
    ),
    "run: bad --timeout": (
        ["run", "--elf", "F(garbage.bin)", "--target", "ethos-u55-128", "--timeout", "soon"],
        "'soon' is not a number of seconds",
    ),
    "run: --timeout nan": (
        ["run", "--elf", "F(garbage.bin)", "--target", "ethos-u55-128", "--timeout", "nan"],
        "'nan' is not a number of seconds",
    ),
    "run: --timeout 0": (
        ["run", "--elf", "F(garbage.bin)", "--target", "ethos-u55-128", "--timeout", "0"],
        "argument --timeout: the timeout must be more than 0 seconds",
    ),
    "deploy: --count 2.5": (["deploy", "--count", "2.5"], "'2.5' is not a whole number"),
    "run: bad --platform": (
        ["run", "--elf", "F(garbage.bin)", "--target", "ethos-u55-128", "--platform", "hw"],
        "argument --platform: invalid choice: 'hw'",
    ),
    "run: missing --input": (
        ["run", "--elf", "F(fake.elf)", "--target", "ethos-u55-128", "--input", "/no/such.bin"],
        "no such input file: /no/such.bin",
    ),
    "run: --profile-instructions alone": (
        ["run", "--elf", "F(garbage.bin)", "--target", "ethos-u55-128", "--profile-instructions"],
        "needs --count-instructions=FUNCTION",
    ),
    "run: --npu-timeout-ms 0": (
        ["run", "--elf", "F(garbage.bin)", "--target", "ethos-u55-128", "--npu-timeout-ms", "0"],
        "'0' is not a whole number of milliseconds from 1 to 4294967295",
    ),
    "run: --profile-output alone": (
        ["run", "--elf", "F(fake.elf)", "--target", "ethos-u55-128", "--profile-output", "O"],
        "--profile-output needs --profile=PTE",
    ),
    "run: --profile on the FVP": (
        ["run", "--elf", "F(fake.elf)", "--target", "ethos-u55-128", "--profile", "F(good.pte)", "--platform", "fvp"],
        "--profile needs kiln's virtual platform",
    ),
    "run: --profile of an ELF that is no runner": (
        ["run", "--elf", "F(fake.elf)", "--target", "ethos-u55-128", "--profile", "F(good.pte)"],
        "is not kiln's executor runner (no kiln_model_pte in it)",
    ),
    # run-host
    "run-host: missing .pte": (["run-host", "/no/such.pte", "--output-dir", "O"], "cannot read /no/such.pte"),
    "run-host: garbage .pte": (["run-host", "F(garbage.bin)", "--output-dir", "O"], "not an ExecuTorch program"),
    "run-host: a folder as the .pte": (["run-host", "F(folder)", "--output-dir", "O"], "Is a directory"),
    "run-host: no input": (["run-host", "F(good.pte)", "--output-dir", "O"], "takes 1 inputs"),
    "run-host: missing input": (
        ["run-host", "F(good.pte)", "--input", "/no/such.bin", "--output-dir", "O"],
        "/no/such.bin: No such file or directory",
    ),
    "run-host: input of the wrong size": (
        ["run-host", "F(good.pte)", "--input", "F(short.bin)", "--output-dir", "O"],
        "has 1 bytes; the program takes",
    ),
    "run-host: a system config Vela lacks": (
        ["run-host", "F(unknown_config.pte)", "--input", "F(in0.bin)", "--output-dir", "O"],
        "no memory timing for ethos-u55-128 with system config 'Ethos_U55_Nowhere_Embedded_'",
    ),
    "run-host: a target the NPU model lacks": (
        ["run-host", "F(unknown_target.pte)", "--input", "F(in0.bin)", "--output-dir", "O"],
        "names no target kiln's NPU model runs",
    ),
    # deploy
    "deploy: --count 0": (["deploy", "--count", "0"], "argument --count: the count must be 1 or more"),
    "deploy: --count not a number": (["deploy", "--count=many"], "'many' is not a whole number"),
    "deploy: unknown model": (["deploy", "no_such_model", "--output", "O"], "'no_such_model' is neither a zoo model"),
    "deploy: unknown target": (["deploy", "--target", "ethos-u99-1", "--output", "O"], "unknown target 'ethos-u99-1'"),
    "deploy: two models": (
        ["deploy", "digits", "--model", "tiny_cnn"],
        "two models given: digits and --model tiny_cnn",
    ),
}


def kiln_in_process(*args: str, cwd: Path, capsys, monkeypatch) -> subprocess.CompletedProcess:
    """`kiln *args` run by kiln.cli.main, the function the `kiln` script calls, in this process
    (no interpreter start per case); its status and output as kiln() returns them."""
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    try:
        status = cli.main(list(args))
    except SystemExit as stop:  # argparse's usage errors
        status = stop.code if isinstance(stop.code, int) else 1
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["kiln", *args], status, out.out, out.err)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_a_nonzero_status(case, files, tmp_path, capsys, monkeypatch):
    """Each case as kiln.cli.main runs it; the `kiln` process itself (its exit status, no
    traceback, no library notice) is checked by the tests that run it as a subprocess."""
    args, expected = CASES[case]
    args = [str(tmp_path / "out.pte") if a == "O" else a for a in args]
    args = [str(files[a[2:-1]]) if a.startswith("F(") else a for a in args]
    assert_one_line(kiln_in_process(*args, cwd=tmp_path, capsys=capsys, monkeypatch=monkeypatch), expected)


def test_run_checks_the_elf_and_the_target_before_it_creates_the_output_dir(files, tmp_path):
    out = tmp_path / "out"
    for elf, target, expected in (
        (files["garbage.bin"], "ethos-u55-128", "is not an ELF file"),
        (files["folder"], "ethos-u55-128", "is a directory, not an ELF file"),
        (files["fake.elf"], "ethos-u99-1", "unknown target 'ethos-u99-1'"),
    ):
        run = kiln("run", "--elf", str(elf), "--target", target, "--output-dir", str(out))
        assert_one_line(run, expected)
        assert not out.exists()


def test_the_cli_and_the_simulator_share_one_default_timeout():
    from kiln.simulator import run as platform

    assert cli.DEFAULT_TIMEOUT_S is platform.DEFAULT_TIMEOUT_S
    run_options = cli._parser(None).parse_args(["run", "--elf", "E", "--target", "T"])
    assert run_options.timeout == platform.DEFAULT_TIMEOUT_S == 120.0


@pytest.mark.parametrize(
    "script,args,expected",
    [
        ("run_fvp.sh", ["--elf=/no/such.elf", "--target=ethos-u55-128"], "no such ELF file: /no/such.elf"),
        ("build_executor_runner.sh", ["--pte=/no/such.pte", "--target=ethos-u55-128"], "cannot read /no/such.pte"),
        (
            "build_executor_runner.sh",
            ["--pte=/no/such.pte", "--target=ethos-u55-128", "--build_type=Fast"],
            "argument --build-type: invalid choice: 'Fast'",
        ),
        ("run.sh", ["--count=0"], "argument --count: the count must be 1 or more"),
        ("run.sh", ["--model=digits", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        ("flash.sh", ["--board=mps3-an552", "--elf=/no/such.elf"], "--elf /no/such.elf: no such file"),
    ],
)
def test_scripts_name_themselves_in_usage_and_errors(script, args, expected):
    run = subprocess.run([str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=600)
    assert_one_line(run, expected, prog=script)
    assert run.returncode == 2
    assert f"usage: {script} " in run.stderr


@pytest.mark.parametrize("args", [["--help"], ["--model=digits", "-h"]])
def test_run_sh_help_does_not_set_up_first(args):
    """As ./scripts/run_fvp.sh and build_executor_runner.sh: with .venv in place, --help runs
    no ./scripts/setup.sh (which says "setup: ..." for each of its steps) before kiln's help."""
    run = subprocess.run([str(SCRIPTS / "run.sh"), *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: run.sh "), run.stdout
    assert "setup:" not in run.stdout + run.stderr


COMMANDS = (
    "compile",
    "build",
    "run",
    "run-host",
    "bundle",
    "generate",
    "profile",
    "targets",
    "deploy",
    "flash",
    "export",
    "pack",
    "sweep",
)


def test_help_lists_every_command_and_explains_every_option():
    run = kiln("--help")
    assert run.returncode == 0, run.stderr
    for name in COMMANDS:
        assert f"\n    {name} " in run.stdout, run.stdout
    parser = cli._parser(None)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == set(COMMANDS)
    for name, command in commands.items():
        for action in command._actions:
            assert action.help and "\n" not in action.help, (name, action.option_strings or action.dest)
        run = kiln(name, "--help")
        assert run.returncode == 0 and run.stdout.startswith(f"usage: kiln {name}"), run.stderr
        for action in command._actions:
            for option in action.option_strings:
                assert option in run.stdout, (name, option)


def test_options_take_underscores_as_the_executorch_scripts_spell_them():
    parser = cli._parser(None)
    args = parser.parse_args(
        cli._dashed(
            [
                "build",
                "--pte=P",
                "--target",
                "T",
                "--memory_mode=Dedicated_Sram_384KB",
                "--system_config",
                "Sys_Config",
                "--build_type=Debug",
                "--default_input=a_b.bin",
            ]
        )
    )
    assert (args.memory_mode, args.system_config, args.build_type) == ("Dedicated_Sram_384KB", "Sys_Config", "Debug")
    assert args.default_input == [Path("a_b.bin")]  # values keep their underscores
    assert cli._dashed(["run-host", "--", "--a_b"]) == ["run-host", "--", "--a_b"]


# --- kiln.errors ---------------------------------------------------------------------------------


def test_run_command_maps_each_error_to_its_status(capsys, monkeypatch):
    monkeypatch.delenv(errors.TRACEBACK_VARIABLE, raising=False)

    def raising(error):
        def command():
            raise error

        return command

    usage = []
    cases = [
        (errors.UsageError("bad flag"), 2, "prog: error: bad flag"),
        (errors.ToolMissingError("no qemu"), 127, "prog: error: no qemu"),
        (errors.PteError("bad pte"), 1, "prog: error: bad pte"),
        (errors.NpuConfigError("no timing"), 1, "prog: error: no timing"),
        (
            FileNotFoundError(2, "No such file or directory", "/x.bin"),
            2,
            "prog: error: /x.bin: No such file or directory",
        ),
        (KeyboardInterrupt(), 130, "prog: interrupted: stopped"),
        (KeyError("k"), errors.InternalError.exit_code, "prog: internal error: KeyError: 'k' (a bug in kiln"),
    ]
    for error, status, line in cases:
        assert errors.run_command("prog", raising(error), usage=lambda: usage.append(1)) == status
        err = capsys.readouterr().err
        assert err.startswith(line) and err.count("\n") == 1, err
    assert usage == [1]  # the usage line only for a UsageError
    assert errors.run_command("prog", lambda: 7) == 7
    monkeypatch.setenv(errors.TRACEBACK_VARIABLE, "1")
    errors.run_command("prog", raising(ValueError("v")))
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def _classes(path: Path) -> list[ast.ClassDef]:
    return [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)]


def _is_exception(base: str) -> bool:
    """A base class that makes an exception: a builtin exception, or one named as kiln names them."""
    builtin = getattr(builtins, base, None)
    return (isinstance(builtin, type) and issubclass(builtin, BaseException)) or base.endswith(
        ("Error", "Exception", "Fault")
    )


def test_every_exception_class_is_a_kiln_error_defined_in_errors():
    defined_elsewhere = []
    for root in (ROOT / "compiler", ROOT / "simulator", ROOT / "models"):
        for path in root.rglob("*.py"):
            if path == ROOT / "compiler" / "kiln" / "errors.py":
                continue
            for node in _classes(path):
                if any(_is_exception(ast.unparse(base)) for base in node.bases):
                    defined_elsewhere.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert defined_elsewhere == []
    names = [node.name for node in _classes(ROOT / "compiler" / "kiln" / "errors.py")]
    assert len(names) >= 29
    for name in names:
        assert issubclass(getattr(errors, name), errors.KilnError), name
    simulator = [
        "NpuConfigError",
        "NpuModelError",
        "NpuStreamError",
        "CommandError",
        "Cop1Error",
        "RegisterError",
        "WeightStreamError",
        "NotModelled",
        "MemoryFault",
        "AttachmentError",
        "GdbError",
        "UnsupportedAccess",
        "PluginError",
    ]
    assert all(issubclass(getattr(errors, name), errors.SimulatorError) for name in simulator)


# --- torchao's import notices ------------------------------------------------------------------


def test_torchao_notices_are_silenced_at_the_import_of_kiln_and_nothing_else():
    # The premise: torchao itself logs them on this torch.
    bare = subprocess.run(
        [sys.executable, "-c", "import torchao.quantization"], capture_output=True, text=True, timeout=300
    )
    assert all(notice in bare.stderr for notice in TORCHAO_NOTICES), bare.stderr
    code = (
        "import kiln.compile, kiln.reference.run_host, logging\n"
        "logging.getLogger('torchao').warning('Failed to load something else')\n"
        "logging.getLogger('torch.utils._pytree').warning('another pytree warning')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()  # torch's own handler prefixes its records ("W1124 ... <string>:3] ")
    assert len(lines) == 2, run.stderr
    assert lines[0].endswith("Failed to load something else") and lines[1].endswith("another pytree warning")


def test_compile_prints_no_torchao_notices(tmp_path):
    run = kiln("compile", "tiny_cnn", "--target", "ethos-u55-128", "--output", str(tmp_path / "m.pte"))
    assert run.returncode == 0, run.stderr
    assert not any(notice in run.stderr + run.stdout for notice in TORCHAO_NOTICES), run.stderr


def test_the_filter_passes_other_records():
    from kiln import _TorchaoImportNotices

    def record(name, msg, args=()):
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)

    class KernelPreference:  # a stand-in for torchao's enum, named by its module
        __module__ = "torchao.quantization.quantize_.common.kernel_preference"

    class Mine:
        __module__ = "my.module"

    keep = _TorchaoImportNotices()
    message = "%s is an Enum subclass and is now natively supported by torch.compile as an opaque value type."
    assert not keep.filter(record("torchao", "Failed to load /x/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: no"))
    assert not keep.filter(record("torch.utils._pytree", message, (KernelPreference,)))
    assert keep.filter(record("torch.utils._pytree", message, (Mine,)))
    assert keep.filter(record("torchao", "Failed to load /x/elsewhere/lib.so: no"))
    assert keep.filter(record("torchao", "Skipping import of cpp extensions due to incompatible torch version."))


def test_build_app_builds_the_plain_firmware_and_prints_the_apps_elf(firmware_build):
    """`kiln build --app` (what `kiln build-firmware` did) in the session's firmware build:
    CMake finds it configured alike and up to date."""
    from kiln.firmware import build as firmware

    for app in ("hello", "kiln_test_status"):
        run = kiln("build", "--app", app, "--target", "ethos-u55-128", "--output", str(firmware_build), "--test-apps")
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines()[-1] == str(firmware.elf(firmware_build, app))
    run = kiln(
        "build", "--app", "no_such_app", "--target", "ethos-u55-128", "--output", str(firmware_build), "--test-apps"
    )
    assert_one_line(run, f"no ELF for app 'no_such_app' in {firmware_build}")


FAILING_MODEL = """
import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.special.bessel_j0(self.conv(x))


ModelUnderTest = M()
ModelInputs = (torch.randn(1, 3, 8, 8),)
"""


def test_a_failed_compile_writes_its_report(tmp_path):
    """A compile that fails after loading the model (here: an op with neither an NPU lowering nor
    a CPU kernel) writes the report its error points to, where the report would have gone: the
    stage and the error, and where each op was placed and why; no .pte. The error stays one line."""
    import json

    (tmp_path / "bessel.py").write_text(FAILING_MODEL)
    run = kiln("compile", str(tmp_path / "bessel.py"), "--target", "ethos-u55-128", "--output", str(tmp_path / "m.pte"))
    assert_one_line(run, "node special_bessel_j0 (aten.special_bessel_j0) cannot run on the NPU")
    assert "check the report" in run.stderr
    assert not (tmp_path / "m.pte").exists()
    assert f"wrote the report of the failed compile: {tmp_path / 'm.json'}" in run.stdout
    report = json.loads((tmp_path / "m.json").read_text())
    assert report["model"] == "bessel" and report["target"] == "ethos-u55-128"
    assert report["failed"]["stage"] == "program" and report["failed"]["error"] == "ProgramError"
    assert error_lines(run.stderr)[0] == f"kiln: error: {report['failed']['message']}"
    where = {o["node"]: (o["where"], o["reason"]) for o in report["ops"]}
    assert where["conv2d"] == ("npu", None)
    assert (
        where["special_bessel_j0"][0] == "cpu"
        and "does not quantize aten.special_bessel_j0" in (where["special_bessel_j0"][1])
    )


def test_a_compile_stopped_at_its_arguments_writes_no_report(tmp_path):
    """A model that cannot be loaded is a usage error: no report of a compile that never began."""
    run = kiln("compile", str(tmp_path / "none.py"), "--target", "ethos-u55-128", "--output", str(tmp_path / "m.pte"))
    assert_one_line(run, "neither a zoo model")
    assert not (tmp_path / "m.json").exists()

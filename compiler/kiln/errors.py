"""kiln's one exception tree, and the one place where an error becomes an exit status.

Every error kiln reports to a person is a KilnError: ``str(error)`` is a single
line that says what is wrong, naming the file, node, op or register, and, where
there is one, what to do. Every command (``kiln ...``, the ./scripts wrappers of
it, ``python -m kiln.boards``, ``python -m kiln.partition.supported_ops``,
``python -m kiln.simulator.npu.coverage_table``) runs through `run_command`, which prints that line
and exits with the error's ``exit_code``; no traceback.

    KilnError                   exit status 1 unless given
    |-- UsageError              2: bad arguments, unknown target, missing file
    |-- ToolMissingError        127: a toolchain, QEMU or the FVP is not installed
    |-- InternalError           a broken invariant of kiln's own (a bug in kiln)
    |-- BoardError              a malformed board.toml
    |-- ModelError              a model that cannot be loaded, run, exported or quantized
    |-- LoweringError           TOSA lowering of one node
    |-- VelaError               Vela failed (timed out, wrote no output)
    |   `-- VelaRefusal         Vela refused a TOSA graph (the compile moves its ops to the CPU)
    |-- PayloadError            a malformed vela_bin_stream payload
    |-- ProgramError            a graph that is no kiln program
    |-- PteError                a malformed .pte
    |-- HostError               a program run-host cannot run
    |-- BuildError              CMake could not build the firmware
    |-- RunnerBuildError        the executor runner could not be planned or built
    |-- RunnerError             the runner did not finish its inferences
    |-- FlashError              firmware could not be put on a board (drive, probe, pack, vendor tool)
    `-- SimulatorError          the virtual platform and its NPU model
        |-- NpuConfigError      a target, system config or memory mode the NPU model lacks
        |-- NpuModelError       the NPU model failed on a stream for a reason of its own
        |-- NpuStreamError      a stream the NPU cannot execute (also a ValueError):
        |   |                   CommandError, Cop1Error, RegisterError, WeightStreamError, NotModelled
        |-- MemoryFault         the NPU touched unmapped memory (a bus error)
        |-- AttachmentError     the NPU attachment to QEMU cannot go on
        |-- GdbError            QEMU's gdbstub refused a request or the connection broke
        |-- UnsupportedAccess   an NPU register access by an instruction other than LDR/STR
        `-- PluginError         the QEMU instruction-count plugin failed

Only the standard library is imported here: ``python -m kiln.boards`` runs inside a CMake configure.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

# Set to 1, an unexpected exception (a bug in kiln) prints its traceback too.
TRACEBACK_VARIABLE = "KILN_TRACEBACK"
INTERRUPTED_EXIT_STATUS = 130  # as a shell reports SIGINT


class KilnError(Exception):
    """Base of every error kiln reports to a user."""

    exit_code = 1


class UsageError(KilnError):
    """The command was called wrongly: bad arguments, unknown target, missing file."""

    exit_code = 2


class BoardError(KilnError):
    """A board description is malformed; the message names the file and field."""


class ModelError(KilnError):
    """A model could not be loaded, run or exported; the message names the model and what failed."""


class ToolMissingError(KilnError):
    """A tool kiln needs (toolchain, QEMU, FVP) is not installed."""

    exit_code = 127


class InternalError(KilnError):
    """kiln broke one of its own invariants (a bug in kiln, not in the model or the command):
    the message names the compile stage after which the check failed and what broke."""


# --- The compiler and the firmware build ----------------------------------------------------


class LoweringError(KilnError):
    """An op passed the support rules but its TOSA lowering failed (a kiln bug or a missing rule)."""


class VelaError(KilnError):
    """Vela rejected or failed on a TOSA graph."""


class VelaRefusal(VelaError):
    """Vela exited with an error on a TOSA graph; `reason` is its last error line. The compile
    driver treats it as a support rule: the ops Vela refuses run on the CPU instead."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


class PayloadError(KilnError):
    """A vela_bin_stream payload is malformed (or cannot be built); the message says where."""


class ProgramError(KilnError):
    """The partitioned graph cannot be expressed as a kiln program."""


class PteError(KilnError):
    """A .pte file (or a program to be written as one) is malformed; the message says where."""


class HostError(KilnError):
    """The program cannot be run on the host."""


class BuildError(KilnError):
    """CMake could not configure or build the firmware; the message names the failing line and the build log."""


class RunnerBuildError(KilnError):
    """The runner could not be planned or built; the message says what and where."""


class RunnerError(KilnError):
    """The runner did not finish its inferences, or left its outputs unwritten; the message says which."""


class FlashError(KilnError):
    """kiln flash could not put the firmware on the board: the board's drive is read-only, no
    debug probe is attached, no CMSIS pack describes the device, a vendor tool failed; the
    message says which and what to do."""


# --- The virtual platform and the NPU model -------------------------------------------------


class SimulatorError(KilnError):
    """The virtual platform or its NPU model cannot go on. Inside a run most of these are
    caught and reported as the platform's status (kiln.simulator.run); they reach a person
    as themselves only from a command that uses the NPU model directly (run-host)."""


class NpuConfigError(SimulatorError):
    """The NPU model has no configuration for a target, or no memory timing for a system
    config and memory mode; the message names them and what the model knows."""


class NpuModelError(SimulatorError):
    """The model could not run a stream for a reason of its own (not a hardware fault)."""


class NpuStreamError(SimulatorError, ValueError):
    """A command stream, payload or register setting the NPU cannot execute (the hardware
    reports most as cmd_parse_error). Also a ValueError: the NPU model's callers catch them so."""


class CommandError(NpuStreamError):
    """A command word the NPU cannot parse (the hardware's cmd_parse_error)."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


class Cop1Error(NpuStreamError):
    """A payload that is not a well-formed COP1 container."""


class RegisterError(NpuStreamError):
    """Register contents the NPU cannot execute (reported as cmd_parse_error)."""


class WeightStreamError(NpuStreamError):
    """A weight or scale stream that does not match the operation's shape."""


class NotModelled(NpuStreamError):
    """A register setting the model does not implement (reported as a fault, never guessed)."""


class MemoryFault(SimulatorError):
    """A read or write touched an address that the memory does not map."""

    def __init__(self, address: int, size: int, access: str):
        super().__init__(f"{access} of {size} bytes at 0x{address:x} is outside mapped memory")
        self.address = address
        self.size = size
        self.access = access


class RegionFault(MemoryFault):
    """An NPU access outside the buffer the firmware registered for the region it names
    (BASEP<n> plus the size the driver published): the NPU model refuses it as a bus error."""

    def __init__(self, what: str, region: int, offset: int, size: int, limit: int):
        SimulatorError.__init__(
            self,
            f"{what} of {size} bytes at region {region} offset 0x{offset:x} is outside the "
            f"{limit} bytes the firmware registered for region {region}",
        )
        self.address = offset
        self.size = size
        self.access = what
        self.region = region
        self.limit = limit


class AttachmentError(SimulatorError):
    """The attachment cannot go on (unsupported access, model failure, lost connection)."""


class GdbError(SimulatorError):
    """The stub refused a request, or the connection broke."""


class UnsupportedAccess(SimulatorError):
    """The instruction at PC is not a plain 32-bit LDR/STR."""


class PluginError(SimulatorError):
    """The plugin could not be built, or its report is missing or malformed."""


# --- From an error to an exit status --------------------------------------------------------


def run_command(prog: str, command: Callable[[], int], usage: Callable[[], None] | None = None) -> int:
    """Runs `command` and returns its exit status, or the status of what it raised, with one
    line on standard error saying why ("PROG: error: ..."):

        KilnError           its exit_code (a UsageError first prints `usage`, as argparse does)
        OSError             2: a file or folder given to kiln cannot be read or written
        KeyboardInterrupt   130
        anything else       a bug in kiln: "PROG: internal error: ..." and InternalError's
                            exit status; KILN_TRACEBACK=1 prints the traceback too
    """
    try:
        return command()
    except KilnError as error:
        if isinstance(error, UsageError) and usage is not None:
            usage()
        return _fail(prog, "error", str(error), error.exit_code)
    except OSError as error:
        where = f"{error.filename}: " if error.filename else ""
        return _fail(prog, "error", f"{where}{error.strerror or error}", UsageError.exit_code)
    except KeyboardInterrupt:
        return _fail(prog, "interrupted", "stopped", INTERRUPTED_EXIT_STATUS)
    except Exception as error:
        if os.environ.get(TRACEBACK_VARIABLE) == "1":
            traceback.print_exc()
        message = (
            f"{type(error).__name__}: {error} (a bug in kiln: please report it with the command line; "
            f"{TRACEBACK_VARIABLE}=1 prints where it happened)"
        )
        return _fail(prog, "internal error", message, InternalError.exit_code)


def document_command(prog: str, description: str, markdown: Callable[[], str], argv: list[str] | None) -> int:
    """The command of a generated document (OPS.md, SUPPORTED_OPS.md): `markdown()` written to
    --output FILE, or to standard output without it; errors through run_command."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--output", type=Path, help="the file to write (default: standard output)")
    args = parser.parse_args(argv)

    def command() -> int:
        text = markdown()
        if args.output is None:
            print(text, end="")
        else:
            args.output.write_text(text)
        return 0

    return run_command(prog, command)


def _fail(prog: str, kind: str, message: str, status: int) -> int:
    sys.stdout.flush()  # what the command printed before comes first in a shared log
    print(f"{prog}: {kind}: {message}", file=sys.stderr, flush=True)
    return status

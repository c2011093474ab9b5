"""What a compile is asked to do: the frozen compile spec and its validation.

Defaults for the system config and memory mode come from the target's board
description, so the compiler and the firmware build always agree.
"""

from __future__ import annotations

import configparser
import dataclasses
import fnmatch
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kiln import boards
from kiln.errors import UsageError
from kiln.paths import vela_ini

IO_KINDS = ("float", "int8")
# How a linear tied to a gather's table (an LM head tied to its embedding) is stored: "table", the
# table once, quantized at one scale, which the head reads as a MATMUL operand on the Ethos-U85
# (the smaller program); "weights", the head's own copy of it, per channel, as Vela's encoded
# weights (another table's bytes in the program; fewer of Vela's total cycles, as DRAM waits go).
TIED_HEADS = ("table", "weights")


@cache
def vela_system_configs() -> tuple[str, ...]:
    """The System_Config sections of the vela.ini shipped with the pinned Vela."""
    ini = configparser.ConfigParser()
    ini.read(vela_ini())
    prefix = "System_Config."
    return tuple(s[len(prefix) :] for s in ini.sections() if s.startswith(prefix))


@dataclass(frozen=True)
class QuantizationScheme:
    """How the quantizer turns a model into integers: activations of `activation_bits` (8:
    int8, asymmetric; 16: int16, symmetric), per tensor; weights int8, symmetric (-127..127),
    per output channel; bias int32 at the activation scale x the weight scale. The torchao
    specs that carry it out are kiln.frontend.quantizer's."""

    activation_bits: int = 8

    # bits -> (dtype, quant_min, quant_max, symmetric)
    ACTIVATIONS = {
        8: ("int8", -128, 127, False),
        16: ("int16", -32767, 32767, True),
    }

    def __post_init__(self):
        if self.activation_bits not in self.ACTIVATIONS:
            raise UsageError(f"activations can be 8 or 16 bits, not {self.activation_bits}")

    @property
    def activation_dtype(self) -> str:
        """ "int8" or "int16"."""
        return self.ACTIVATIONS[self.activation_bits][0]


@dataclass(frozen=True)
class Exclusions:
    """Keeps operators off the NPU: by op type (e.g. "aten.sigmoid"), by module
    path (e.g. "features.3", which covers its submodules), or by FX node name."""

    op_types: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    node_names: tuple[str, ...] = ()


INT16_POLICIES = {
    "attention": "softmaxes, the matrix products of two activations and the ops between them (scores, masks)",
    "norms": "the steps of layer, RMS, group and instance norms, and every op inside a module whose class is a "
    "*Norm (but not BatchNorm)",
}


AUTO_POLICY = "auto"  # --int16 auto: the ops chosen by measurement (AutoRule)


@dataclass(frozen=True)
class AutoRule:
    """How `--int16 auto` chooses (kiln.frontend.autoprecision): promote the values whose 8 bits
    cost the model's output the most SQNR against the float model on the calibration data, until
    the output reaches `target_db` dB of SQNR, with at most `budget` ops at 16 bits (None: no cap)."""

    target_db: float = 30.0
    budget: int | None = None

    def __post_init__(self):
        if not math.isfinite(self.target_db):
            raise UsageError(f"--int16-sqnr must be a finite number of dB, not {self.target_db}")
        if self.budget is not None and self.budget < 0:
            raise UsageError(f"--int16-budget must be 0 or more ops, not {self.budget}")


@dataclass(frozen=True)
class Int16Regions:
    """The parts of an otherwise 8-bit model whose activations are 16-bit (kiln.frontend.precision
    chooses the ops): `policies` name kinds of ops (INT16_POLICIES), `modules` are module paths or
    glob patterns of them ("blocks.*.attn"), each covering its submodules; `auto` adds the ops
    measurement chooses (AutoRule; None: none). Empty: none."""

    policies: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    auto: AutoRule | None = None

    def __post_init__(self):
        unknown = [p for p in self.policies if p not in INT16_POLICIES]
        if unknown:
            known = ", ".join([*INT16_POLICIES, AUTO_POLICY])
            raise UsageError(f"unknown 16-bit policy {unknown[0]!r} (known: {known})")

    def __bool__(self) -> bool:
        return bool(self.policies or self.modules or self.auto)


def in_module(path: str, pattern: str) -> bool:
    """Whether module `path` ("blocks.0.attn.qkv") is `pattern` or inside it; the pattern may hold
    glob wildcards matched against whole prefixes of the path ("blocks.*.attn")."""
    parts = path.split(".") if path else []
    return any(fnmatch.fnmatchcase(".".join(parts[:n]), pattern) for n in range(1, len(parts) + 1))


@dataclass(frozen=True)
class CompileSpec:
    target: str
    system_config: str | None = None  # None: the board's default for the target
    memory_mode: str | None = None  # None: the board's default for the target
    board: str | None = None  # the board whose defaults and memory modes apply; None: the target's reference board
    quantize: bool = True
    delegate: bool = True
    io: str = "float"  # "float": quantize/dequantize at the program's edges; "int8": none
    # False: every quantized op kept on the CPU runs in float between a dequantize and a quantize
    # (the portable kernels), none as an integer cortex_m kernel (kiln.program.integer_ops)
    integer_kernels: bool = True
    tied_head: str = "table"  # one of TIED_HEADS
    activation_bits: int = 8
    int16: Int16Regions = Int16Regions()  # parts at 16 bits where activation_bits is 8
    exclusions: Exclusions = Exclusions()
    intermediates: Path | None = None  # where to keep TOSA, Vela output and graphs

    @property
    def tie_tables(self) -> bool:
        """Whether a table a linear and a gather both read is quantized once for both (tied_head "table")."""
        return self.tied_head == "table"

    def resolved(self, target: boards.Target | None = None) -> CompileSpec:
        """This spec with defaults filled in and every choice checked against the target: `target`
        when the caller resolved it already (boards.target(spec.target, spec.board)), else resolved here."""
        target = boards.resolve(target or self.target, self.board)
        if not target.has_npu:
            return self._resolved_for_the_cpu(target)
        system_config = self.system_config or target.system_config
        memory_mode = self.memory_mode or target.memory_mode
        if system_config not in vela_system_configs():
            raise UsageError(
                f"unknown Vela system config {system_config!r} (known: {', '.join(vela_system_configs())})"
            )
        if memory_mode not in target.memory_modes:
            raise UsageError(
                f"memory mode {memory_mode!r} is not available on {target.name} on {target.board.name} "
                f"(available: {', '.join(target.memory_modes)})"
            )
        self._check_precision()
        return dataclasses.replace(self, system_config=system_config, memory_mode=memory_mode)

    def _resolved_for_the_cpu(self, target: boards.Target) -> CompileSpec:
        """A spec for a CPU alone (`target` has no NPU): no Vela settings to choose, nothing delegated."""
        target.refuse_vela_settings(self.system_config, self.memory_mode)
        self._check_precision()
        return dataclasses.replace(self, delegate=False)

    def _check_precision(self) -> None:
        """The I/O and precision choices, which apply to any target."""
        if self.io not in IO_KINDS:
            raise UsageError(f"--io must be one of {', '.join(IO_KINDS)}, not {self.io!r}")
        if self.tied_head not in TIED_HEADS:
            raise UsageError(f"--tied-head must be one of {', '.join(TIED_HEADS)}, not {self.tied_head!r}")
        if self.io == "int8" and not self.quantize:
            raise UsageError("--io int8 needs quantization; drop --no-quantize")
        QuantizationScheme(self.activation_bits)  # raises UsageError for an unsupported precision
        if self.int16 and self.activation_bits == 16:
            raise UsageError(
                "--activation-bits 16 makes every activation 16-bit; --int16 chooses parts of an 8-bit model"
            )
        if self.int16 and not self.quantize:
            raise UsageError("--int16 needs quantization; drop --no-quantize")

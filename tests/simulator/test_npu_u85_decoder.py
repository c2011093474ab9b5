"""kiln's Ethos-U85 command decoder and register views against Vela 5.2.0's own listing
(`--verbose-register-command-stream`) of the same streams, and the configurations'
CONFIG and ID words against the ones Vela writes into the COP1 payload."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from kiln.lower.vela import compile_tosa
from kiln.simulator.npu import commands as cmds
from kiln.simulator.npu.config import CONFIGS, config_for
from kiln.simulator.npu.cop1 import parse_cop1
from kiln.simulator.npu.registers import ROUND_NATURAL, ROUND_TFL
from kiln.simulator.npu.u85 import blockops as u85_blockops
from kiln.simulator.npu.u85 import elementwise as u85_elementwise
from kiln.simulator.npu.u85 import output as u85_output
from kiln.simulator.npu.u85 import registers as u85
from kiln.simulator.npu.u85.commands import U85_COMMANDS
from tests.simulator import helpers, npu_u85_listing

U85_TARGETS = [t for t in CONFIGS if t.startswith("ethos-u85")]
SYSTEM_CONFIG = "Ethos_U85_SYS_DRAM_Mid"
# (target, batch seed, cases): streams with convolutions (dense and 2:4 sparse weights),
# pooling, elementwise ops with broadcasts and scalars, LUT DMAs, and two weight streams on -512
STREAMS = [("ethos-u85-256", 0, 10), ("ethos-u85-256", 1, 10), ("ethos-u85-512", 2, 10)]


@functools.cache
def _compiled(target: str, seed: int, cases: int):
    graph = helpers.build_batch(seed, range(cases))
    tosa = graph.serialize()
    vela = compile_tosa(tosa, f"listing{seed}", target, SYSTEM_CONFIG, "Shared_Sram")
    return parse_cop1(vela.cmd_data), npu_u85_listing.listing(tosa, target, SYSTEM_CONFIG, "Shared_Sram")


@pytest.mark.parametrize("target", U85_TARGETS)
def test_config_and_id_words_are_vela_s(target):
    graph = helpers.build_batch(5, range(2))
    vela = compile_tosa(graph.serialize(), "cop1", target, SYSTEM_CONFIG, "Shared_Sram")
    cop1 = parse_cop1(vela.cmd_data)
    config = config_for(target)
    assert (cop1.config_word, cop1.id_word) == (config.config_register, config.id_register)
    assert cop1.config_word >> 28 == 2  # product: Ethos-U85


@pytest.mark.parametrize("target, seed, cases", STREAMS)
def test_commands_match_vela_listing(target, seed, cases):
    cop1, listed = _compiled(target, seed, cases)
    assert sum((item.words for item in listed), []) == [int(w) for w in cop1.stream]  # the same stream
    decoded = list(cmds.decode(cop1.stream, U85_COMMANDS))
    assert len(decoded) == len(listed)
    for command, item in zip(decoded, listed):
        assert 4 * command.index == item.offset
        name = command.name if command.name.startswith("NPU_OP_") else f"NPU_SET_{command.name}"
        assert (name, command.param, command.payload) == (item.name, item.param, item.payload), item


def _precision_fields(dtype: np.dtype, layout: int, storage: int) -> dict[str, str]:
    return {
        "activation_type": "ACTIVATION_TYPE_" + ("SIGNED" if dtype.kind == "i" else "UNSIGNED"),
        "activation_precision": f"ACTIVATION_PRECISION_B{8 * dtype.itemsize}",
        "activation_format": "ACTIVATION_FORMAT_" + ("NHCWB16" if layout else "NHWC"),
        "activation_storage": f"ACTIVATION_STORAGE_{u85.STORAGE_NAMES[storage]}",
    }


_IFM_ROUNDING = {"ROUND_MODE_IFM_NATURAL": ROUND_NATURAL, "ROUND_MODE_IFM_DOUBLE_SYMMETRIC": ROUND_TFL}


def _views(regs: u85.U85Registers, command: cmds.Command) -> dict[str, str]:
    """What kiln's register views read from the register `command` just set, in the
    listing's words (only the fields compared)."""
    name = command.name
    if name in ("IFM_PRECISION", "IFM2_PRECISION"):
        prefix = name.split("_")[0]
        dtype, layout = regs.ifm_dtype(prefix)
        return _precision_fields(dtype, layout, regs.storage(prefix))
    if name == "OFM_PRECISION":
        dtype, layout = regs.ofm_dtype()
        transpose, reverse = regs.transpose()
        return {
            **_precision_fields(dtype, layout, regs.storage("OFM")),
            "scale_mode": "OFM_SCALE_MODE_" + ("GLOBAL" if regs.global_scale() else "PER_CHANNEL"),
            "activation_reverse": f"ACTIVATION_REVERSE_{u85.REVERSE_NAMES[reverse]}",
            "activation_transpose": f"ACTIVATION_TRANSPOSE_{u85.TRANSPOSE_NAMES[transpose]}",
        }
    if name == "OFM_SCALE":
        scale, shift = regs.ofm_scale()
        return {"scale": str(scale), "shift": str(shift), "round_mode": f"ROUND_MODE_OFM_{regs.rounding_name()}"}
    if name == "ACC_FORMAT":
        acc, source, output, (h, w) = regs.acc_format()
        return {
            "acc_format": "ACC_FORMAT_" + ("I32" if acc == u85.ACC_I32 else "I48"),
            "acc_input": f"ACC_INPUT_{u85.ACC_INPUT_NAMES[source]}",
            "acc_output": "ACC_OUTPUT_" + ("ENABLE" if output else "DISABLE"),
            "microblock": f"MICROBLOCK_U{h}X{w}",
        }
    if name == "ACTIVATION":
        function, table, clip, _, _ = regs.activation()
        return {
            "activation_function": f"ACTIVATION_FUNCTION_{u85_output.FUNCTION_NAMES[function]}",
            "table": str(table),
            "activation_clip_range": "ACTIVATION_CLIP_RANGE_" + ("B16" if clip else "NONE"),
        }
    if name in ("IFM_BROADCAST", "IFM2_BROADCAST"):
        return {"broadcast_mode": f"BROADCAST_MODE_{u85.BROADCAST_NAMES[regs.broadcast(name.split('_')[0])]}"}
    if name == "WEIGHT_FORMAT":
        fmt, sparsity = regs.weight_format()
        return {
            "weight_format": "WEIGHT_FORMAT_" + ("FWD" if fmt else "SWD"),
            "weight_sparsity": "WEIGHT_SPARSITY_" + ("SPARSE_2_4" if sparsity else "NONE"),
        }
    if name == "NPU_OP_POOL":
        return {"pooling_mode": f"POOLING_MODE_{u85_blockops.POOL_NAMES[command.param & 7]}"}
    if name == "NPU_OP_ELEMENTWISE":
        return {"elementwise_mode": f"ELEMENTWISE_MODE_{u85_elementwise.MODES[command.param & 0x3F]}"}
    if re.search(r"_BASE\d?$|_STRIDE_[XYC]$|^DMA0_(SRC|DST|LEN)$", name):
        return {"addr": hex(regs.address(name))}
    return {}


@pytest.mark.parametrize("target, seed, cases", STREAMS)
def test_register_views_match_vela_listing(target, seed, cases):
    cop1, listed = _compiled(target, seed, cases)
    regs = u85.U85Registers()
    seen = set()
    for command, item in zip(cmds.decode(cop1.stream, U85_COMMANDS), listed):
        if not command.is_operation:
            regs.set(command)
        views = _views(regs, command)
        for field, value in views.items():
            assert item.fields[field] == value, (item, field, value)
            seen.add((command.name, field))
        if command.name in ("IFM_SCALE", "IFM2_SCALE"):
            scale, shift, rounding = regs.input_scale(command.name.split("_")[0])
            assert (str(scale), str(shift)) == (item.fields["scale"], item.fields["shift"])
            assert rounding == _IFM_ROUNDING[item.fields["round_mode"]]
            seen.add((command.name, "scale"))
        if command.name == "KERNEL_STRIDE":
            k = regs.kernel()
            f = item.fields
            assert k.stride_x == int(f["stride_x_lsb"]) + 2 * int(f["stride_x_msb"]) + 1
            assert k.stride_y == int(f["stride_y_lsb"]) + 2 * int(f["stride_y_msb"]) + 1
            assert k.part_kernel_first == (f["weight_order"] == "WEIGHT_ORDER_PART_KERNEL_FIRST")
            assert k.dilation_x == (2 if f["dilation_x"] == "KERNEL_DILATION_X2" else 1)
            seen.add((command.name, "stride"))
    # the streams exercise the fields that differ from the U55's
    for wanted in [
        ("OFM_PRECISION", "activation_storage"),
        ("OFM_SCALE", "round_mode"),
        ("ACC_FORMAT", "microblock"),
        ("ACTIVATION", "activation_function"),
        ("IFM2_BROADCAST", "broadcast_mode"),
        ("KERNEL_STRIDE", "stride"),
        ("IFM_SCALE", "scale"),
    ]:
        assert wanted in seen or target == "ethos-u85-512", wanted

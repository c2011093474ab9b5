"""The Ethos-U driver's command-stream bounds check (firmware/drivers/ethosu/bounds.cpp)
built for the host under AddressSanitizer and UBSan (`npu_bounds_host`), as the delegate
runs it at init.

References independent of the C++ code: every stream Vela writes for kiln's models must
pass (Vela's own placement is the reference for what a legitimate stream touches), and
each stream of the regression set (tests/firmware/runtime/npu_hostile.py: one register of a real stream
changed so that one access leaves its buffer) must be refused with the error and access
the mutation was made to cause.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kiln.compile import compile_model
from kiln.lower import ethosu_payload as ep
from kiln.lower.ethosu_payload import IoTensor
from kiln.lower.vela import compile_tosa, vela_command
from kiln.spec import CompileSpec
from tests.firmware.runtime import npu_hostile as nh

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
# (model, target, memory mode): a conv/pool/elementwise stream, one with weight DMAs and
# depthwise convolutions, and one with a fast scratch (region 2); the same on the Ethos-U85
# (its own command stream: 2:4 sparse weights, strided DMA), a 4-core U85 (WEIGHT1..3), and two
# transformers whose U85 matmuls are CONVs with their weights in IFM2.
STREAMS = [
    ("tiny_cnn", "ethos-u55-128", None),
    ("ds_cnn", "ethos-u55-128", None),
    ("tiny_cnn", "ethos-u65-256", "Dedicated_Sram_384KB"),
    ("tiny_cnn", "ethos-u85-256", None),
    ("ds_cnn", "ethos-u85-256", None),
    ("tiny_cnn", "ethos-u85-256", "Dedicated_Sram_384KB"),
    ("resnet8", "ethos-u85-2048", None),
    ("vit_tiny", "ethos-u85-256", None),
    ("kwt", "ethos-u85-256", None),
]


@pytest.fixture(scope="session")
def bounds_host(runtime_host) -> Path:
    tool = runtime_host.parent / "npu_bounds_host"
    done = subprocess.run(["ninja", "-C", str(runtime_host.parent), "npu_bounds_host"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return tool


@pytest.fixture(scope="session")
def payloads(tmp_path_factory) -> dict[tuple, tuple[bytes, int]]:  # (model, target, mode, delegate) ->
    """(payload, fast scratch bytes) of each delegate Vela compiled for STREAMS."""
    found = {}
    for model, target, mode in STREAMS:
        spec = CompileSpec(target=target, **({"memory_mode": mode} if mode else {}))
        for i, v in enumerate(compile_model(model, spec).vela):
            data = ep.encode(v.cmd_data, v.weight_data, v.scratch_size, v.inputs, v.outputs)
            found[(model, target, mode, i)] = data, getattr(v, "fast_scratch_size", 0) or 0
    return found


def check(tool: Path, directory: Path, payload: bytes, fast: int = 0) -> subprocess.CompletedProcess:
    path = directory / "payload.bin"
    path.write_bytes(payload)
    done = subprocess.run(
        [str(tool), str(path), *([str(fast)] if fast else [])], capture_output=True, text=True, timeout=60
    )
    assert "runtime error" not in done.stderr and "AddressSanitizer" not in done.stderr, done.stderr
    return done


def test_every_stream_vela_writes_passes(bounds_host, payloads, tmp_path):
    assert len(payloads) >= len(STREAMS)
    for key, (payload, fast) in payloads.items():
        done = check(bounds_host, tmp_path, payload, fast)
        assert (done.returncode, done.stdout) == (0, "ok\n"), (key, done.stdout + done.stderr)


def test_the_executorch_arm_flow_stream_passes(bounds_host, tmp_path):
    from kiln.pte.reader import deserialize

    f = deserialize((FIXTURES / "conv_relu_arm_delegate_ethos-u55-128.pte").read_bytes())
    payload = f.delegate_payload(f.program.execution_plans[0].delegates[0])
    done = check(bounds_host, tmp_path, payload)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stdout + done.stderr


def test_a_stream_without_its_fast_scratch_is_refused(bounds_host, payloads, tmp_path):
    payload, fast = payloads[("tiny_cnn", "ethos-u65-256", "Dedicated_Sram_384KB", 0)]
    assert fast > 0
    done = check(bounds_host, tmp_path, payload)  # no region 2 given
    assert done.returncode == 1
    assert done.stdout.startswith("error 0x532 NPU stream accesses a region with no buffer: ")
    done = check(bounds_host, tmp_path, payload, fast - 16)  # 16 bytes short
    assert done.returncode == 1
    assert done.stdout.startswith("error 0x531 NPU stream accesses memory outside its region's buffer: ")


@pytest.mark.parametrize("hostile", nh.HOSTILE, ids=lambda h: h.name)
def test_a_hostile_stream_is_refused_naming_the_access(bounds_host, payloads, tmp_path, hostile):
    refused = 0
    for key, (payload, fast) in payloads.items():
        p = ep.decode(payload)
        cmd = nh.mutate(p.cmd_data, hostile, nh.sizes(len(p.weight_data), p.scratch_size, fast))
        if cmd is None:
            continue  # no operation of the kind in this stream
        bad = ep.encode(cmd, p.weight_data, p.scratch_size, p.inputs, p.outputs)
        done = check(bounds_host, tmp_path, bad, fast)
        assert done.returncode == 1, (key, done.stdout)
        prefix = f"error 0x{hostile.code:x} {nh.TEXT[hostile.code]}: {hostile.access} of the operation at word "
        assert done.stdout.startswith(prefix), (key, done.stdout)
        refused += 1
    assert refused > 0  # every mutation applies to at least one of the streams


def test_a_stream_without_its_fast_scratch_is_refused_on_the_u85(bounds_host, payloads, tmp_path):
    payload, fast = payloads[("tiny_cnn", "ethos-u85-256", "Dedicated_Sram_384KB", 0)]
    assert fast > 0
    done = check(bounds_host, tmp_path, payload)
    assert done.returncode == 1
    assert done.stdout.startswith("error 0x532 NPU stream accesses a region with no buffer: ")
    done = check(bounds_host, tmp_path, payload, fast - 16)
    assert done.returncode == 1
    assert done.stdout.startswith("error 0x531 NPU stream accesses memory outside its region's buffer: ")


# --- Ethos-U85 streams against Vela's own listing ------------------------------------------
# `vela --verbose-register-command-stream` prints each command of the stream it writes with its
# byte offset, e.g. "0x000124:          0000 0002 - NPU_OP_CONV    0, weights_ifm2 = 0" (a cmd1
# line has its payload word where the blanks are). Parsed here, by hand: the listing is an
# oracle for where each command and operation of a U85 stream lies, independent of bounds.cpp.
LISTED = re.compile(r"^0x([0-9a-f]{6}): (?:([0-9a-f]{8})|\s{8}) ([0-9a-f]{4}) ([0-9a-f]{4}) - (NPU_\w+)")
U85 = ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Shared_Sram")
BLOCK_OPS = {"NPU_OP_CONV", "NPU_OP_DEPTHWISE", "NPU_OP_POOL", "NPU_OP_ELEMENTWISE", "NPU_OP_RESIZE"}


@dataclass(frozen=True)
class Listed:
    word: int  # index in the command stream (byte offset / 4)
    name: str
    header: int
    payload: int | None


def vela_listing(tosa: bytes, target: str, system_config: str, memory_mode: str, directory: Path) -> list[Listed]:
    source = directory / "listed.tosa"
    source.write_bytes(tosa)
    done = subprocess.run(
        vela_command()
        + [
            "--accelerator-config",
            target,
            "--system-config",
            system_config,
            "--memory-mode",
            memory_mode,
            "--output-format",
            "raw",
            "--output-dir",
            str(directory / "listing"),
            "--verbose-register-command-stream",
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = []
    for line in done.stdout.splitlines():
        m = LISTED.match(line.strip())
        if m:
            offset, payload, param, code, name = m.groups()
            listed.append(
                Listed(
                    int(offset, 16) // 4,
                    name,
                    int(param, 16) << 16 | int(code, 16),
                    None if payload is None else int(payload, 16),
                )
            )
    return listed


def listed_delegate(model: str, directory: Path):
    """(payload, COP1 stream start word, Vela's listing) of `model`'s delegate for ethos-u85-256."""
    tosa = compile_model(model, CompileSpec(target=U85[0])).tosa[0]
    vela = compile_tosa(tosa, model, *U85)
    listed = vela_listing(tosa, *U85, directory)
    start, end = nh.stream_span(vela.cmd_data)
    words = np.frombuffer(vela.cmd_data, "<u4")[start:end]
    # The listing is of this very stream: its words, command by command, are the stream's.
    flat = [w for item in listed for w in ([item.header] if item.payload is None else [item.header, item.payload])]
    assert flat == [int(w) for w in words]
    return vela, start, listed


@pytest.fixture(scope="module")
def u85_listed(tmp_path_factory):
    return listed_delegate("ds_cnn", tmp_path_factory.mktemp("listing"))


def with_words(vela, start: int, changes: dict[int, int]) -> bytes:
    """The delegate's payload with stream words changed ({stream word index: new word})."""
    words = np.frombuffer(vela.cmd_data, "<u4").copy()
    for i, w in changes.items():
        words[start + i] = w
    return ep.encode(words.tobytes(), vela.weight_data, vela.scratch_size, vela.inputs, vela.outputs)


def last_before(listed: list[Listed], name: str, before: Listed) -> Listed:
    return [item for item in listed if item.name == name and item.word < before.word][-1]


def register_at(listed: list[Listed], name: str, op: Listed) -> int:
    """The value register `name` holds when `op` runs (0, as after reset, if never set): a cmd0's
    16-bit parameter, a cmd1's 48-bit address (payload | parameter << 32)."""
    try:
        item = last_before(listed, name, op)
    except IndexError:
        return 0
    param = item.header >> 16
    return param if item.payload is None else param << 32 | item.payload


def kernel_at(listed: list[Listed], op: Listed) -> tuple[int, int]:
    """(width, height) of `op`'s kernel."""
    return tuple(register_at(listed, f"NPU_SET_KERNEL_{axis}_M1", op) + 1 for axis in ("WIDTH", "HEIGHT"))


def test_every_u85_operation_is_reached_where_vela_lists_it(bounds_host, u85_listed, tmp_path):
    """For each block operation Vela lists, an OFM moved past the scratch is refused naming that
    operation's word: the walk decodes every command before it as Vela does."""
    vela, start, listed = u85_listed
    assert check(bounds_host, tmp_path, with_words(vela, start, {})).stdout == "ok\n"
    ops = [item for item in listed if item.name in BLOCK_OPS]
    assert len(ops) >= 5 and {"NPU_OP_CONV", "NPU_OP_DEPTHWISE"} <= {op.name for op in ops}
    for op in ops:
        base = last_before(listed, "NPU_SET_OFM_BASE0", op)
        bad = with_words(vela, start, {base.word + 1: vela.scratch_size + (1 << 20)})
        done = check(bounds_host, tmp_path, bad)
        assert done.stdout == (
            "error 0x531 NPU stream accesses memory outside its region's buffer: OFM write of the "
            f"operation at word {op.word}\n"
        ), (op, done.stdout)


def test_u85_accumulators_from_ifm2_are_bounded_as_an_ifm2_read(bounds_host, tmp_path):
    """unet_tiny's U85 stream starts some accumulators from IFM2 (Vela's listing: ACC_FORMAT with
    acc_input = ACC_INPUT_IFM2): it passes, and that IFM2 moved past the scratch is refused
    naming the operation Vela lists next."""
    vela, start, listed = listed_delegate("unet_tiny", tmp_path)
    assert check(bounds_host, tmp_path, with_words(vela, start, {})).stdout == "ok\n"
    acc = [item for item in listed if item.name == "NPU_SET_ACC_FORMAT" and (item.header >> 20) & 3 == 2]
    assert acc, "Vela no longer starts an accumulator from IFM2 here"
    op = next(item for item in listed if item.name in BLOCK_OPS and item.word > acc[0].word)
    base = last_before(listed, "NPU_SET_IFM2_BASE0", op)
    done = check(bounds_host, tmp_path, with_words(vela, start, {base.word + 1: vela.scratch_size + (1 << 20)}))
    assert done.stdout == (
        "error 0x531 NPU stream accesses memory outside its region's buffer: IFM2 read of the "
        f"operation at word {op.word}\n"
    )


# NPU_OP_CONV with weights_ifm2 = 1 (Vela's MATMUL on the U85): a 1x1 convolution whose weight
# [o, i] is IFM2's element at row 0, column o, channel i (the U85 model's _ifm2_weights), so it reads
# one IFM2 row of OFM-depth columns of IFM-depth channels. The bytes that row spans, worked out
# from the register map (ethos_u85_interface.hpp): IFM2_PRECISION's parameter has the element
# size in bits 3..2 (8 << n bits) and the format in bits 7..6 (0 NHWC, 1 NHCWB16). NHWC: columns
# IFM2_STRIDE_X apart, channels contiguous: (cols - 1) * STRIDE_X + channels * size. NHCWB16:
# columns 16 elements apart inside a brick of 16 channels, bricks IFM2_STRIDE_C apart:
# (bricks - 1) * STRIDE_C + (cols - 1) * 16 * size + 16 * size. For vit_tiny's first matmul
# (attention scores, Q @ K^T: 17 tokens of 16 int8 channels in NHCWB16) that is 16 * 16 + 16 =
# 272 bytes, the distance Vela leaves to the next head's K^T.
def ifm2_weight_bytes(listed: list[Listed], op: Listed) -> int:
    precision = register_at(listed, "NPU_SET_IFM2_PRECISION", op)
    size, nhcwb16 = 1 << ((precision >> 2) & 3), (precision >> 6) & 3 == 1
    cols = register_at(listed, "NPU_SET_OFM_DEPTH_M1", op) + 1
    channels = register_at(listed, "NPU_SET_IFM_DEPTH_M1", op) + 1
    # one row of tile 0 (the box would continue in tile 1 past WIDTH0 columns)
    assert register_at(listed, "NPU_SET_IFM2_WIDTH0_M1", op) + 1 >= cols
    if nhcwb16:
        return ((channels + 15) // 16 - 1) * register_at(listed, "NPU_SET_IFM2_STRIDE_C", op) + cols * 16 * size
    return (cols - 1) * register_at(listed, "NPU_SET_IFM2_STRIDE_X", op) + channels * size


@pytest.mark.parametrize("model", ["vit_tiny", "kwt"])
def test_u85_weights_from_ifm2_are_bounded_by_the_bytes_of_ifm2_they_read(bounds_host, tmp_path, model):
    """Each CONV Vela lists with weights_ifm2 = 1: its IFM2 moved so that the bytes it reads end
    exactly at its region's end passes; one byte further is refused naming that operation."""
    vela, start, listed = listed_delegate(model, tmp_path)
    assert check(bounds_host, tmp_path, with_words(vela, start, {})).stdout == "ok\n"
    matmuls = [item for item in listed if item.name == "NPU_OP_CONV" and (item.header >> 16) & 1]
    assert len(matmuls) >= 2, "Vela no longer writes this model's matmuls as CONVs with weights from IFM2"
    sizes = {0: len(vela.weight_data), 1: vela.scratch_size}  # the regions of a Shared_Sram stream
    if model == "vit_tiny":  # the hand-worked count, and Vela's own placement of the next head's K^T
        assert ifm2_weight_bytes(listed, matmuls[0]) == 272
        bases = [register_at(listed, "NPU_SET_IFM2_BASE0", op) for op in matmuls[:2]]
        assert bases[1] - bases[0] == 272
    for op in matmuls:
        assert kernel_at(listed, op) == (1, 1)
        base = last_before(listed, "NPU_SET_IFM2_BASE0", op)
        end = sizes[register_at(listed, "NPU_SET_IFM2_REGION", op) & 7]
        fits = end - ifm2_weight_bytes(listed, op)
        done = check(bounds_host, tmp_path, with_words(vela, start, {base.word + 1: fits}))
        assert done.stdout == "ok\n", (op, done.stdout)
        done = check(bounds_host, tmp_path, with_words(vela, start, {base.word + 1: fits + 1}))
        assert done.stdout == (
            "error 0x531 NPU stream accesses memory outside its region's buffer: IFM2 read of "
            f"the operation at word {op.word}\n"
        ), (op, done.stdout)


def unprovable(word: int, value: int) -> str:
    return f"error 0x530 NPU stream has a command the bounds check cannot follow: word {word} (0x{value:08x})\n"


def test_u85_commands_the_check_does_not_model_are_refused(bounds_host, u85_listed, tmp_path):
    vela, start, listed = u85_listed
    conv = next(item for item in listed if item.name == "NPU_OP_CONV")
    elementwise = next((item for item in listed if item.name == "NPU_OP_ELEMENTWISE"), None)
    cases = []
    # NPU_OP_BRANCH (cmd1 opcode 0x100, a payload word) in place of the first payload-word command
    first_cmd1 = next(item for item in listed if item.payload is not None)
    cases.append(({first_cmd1.word: 0x4100, first_cmd1.word + 1: 0}, unprovable(first_cmd1.word, 0x4100)))
    # the first CONV with its weights in IFM2 (parameter bit 0): its kernel is not 1x1, and what such
    # a CONV reads from IFM2 is not modelled
    assert kernel_at(listed, conv) != (1, 1)
    cases.append(({conv.word: conv.header | 1 << 16}, unprovable(conv.word, conv.header | 1 << 16)))
    # OFM_PRECISION: transpose 4 (reserved: bits 13..11 of the parameter), storage TILE3X1 (15..14 = 1)
    precision = last_before(listed, "NPU_SET_OFM_PRECISION", conv)
    cases.append(({precision.word: (precision.header & ~(7 << 27)) | 4 << 27}, unprovable(conv.word, conv.header)))
    cases.append(({precision.word: (precision.header & ~(3 << 30)) | 1 << 30}, unprovable(conv.word, conv.header)))
    dma = next((item for item in listed if item.name == "NPU_OP_DMA_START"), None)
    if dma is not None:  # both sides indexed: DMA0_SRC_REGION's and DMA0_DST_REGION's idx_mode, bit 11
        src = last_before(listed, "NPU_SET_DMA0_SRC_REGION", dma)
        dst = last_before(listed, "NPU_SET_DMA0_DST_REGION", dma)
        cases.append(
            ({src.word: src.header | 1 << 27, dst.word: dst.header | 1 << 27}, unprovable(dma.word, dma.header))
        )
    if elementwise is not None:  # elementwise_mode 12: none of the U85's 21 modes
        cases.append(
            (
                {elementwise.word: (elementwise.header & 0xFFFF) | 12 << 16},
                unprovable(elementwise.word, (elementwise.header & 0xFFFF) | 12 << 16),
            )
        )
    assert len(cases) >= 5
    for changes, expected in cases:
        done = check(bounds_host, tmp_path, with_words(vela, start, changes))
        assert (done.returncode, done.stdout) == (1, expected), changes


class Embedding(__import__("torch").nn.Module):
    def __init__(self):
        import torch

        super().__init__()
        torch.manual_seed(16)
        self.embed, self.proj = torch.nn.Embedding(40, 16), torch.nn.Linear(16, 8)

    def forward(self, tokens):
        return self.proj(self.embed(tokens))


OUTSIDE = "error 0x531 NPU stream accesses memory outside its region's buffer: {} of the operation at word {}\n"


def indexed_dma(loaded, region: str, directory: Path):
    """(payload, stream start, Vela's listing, the one DMA_START indexed on `region`'s side, "SRC" or
    "DST") of `loaded` (a kiln LoadedModel) compiled for ethos-u85-256."""
    from kiln.compile import compile_model as compile_loaded

    tosa = compile_loaded(loaded, CompileSpec(target=U85[0]), log=lambda line: None).tosa[0]
    vela = compile_tosa(tosa, loaded.name, *U85)
    listed = vela_listing(tosa, *U85, directory)
    start, _ = nh.stream_span(vela.cmd_data)
    indexed = [
        item
        for item in listed
        if item.name == "NPU_OP_DMA_START" and register_at(listed, f"NPU_SET_DMA0_{region}_REGION", item) >> 11 & 1
    ]
    assert len(indexed) == 1
    return vela, start, listed, indexed[0]


def test_a_u85_gather_passes_and_its_reach_is_bounded_by_idx_max(bounds_host, tmp_path):
    """An embedding's GATHER (Vela's indexed DMA: one index per row, rows IDX_MAX at most) passes;
    an IDX_MAX that reaches past the table's buffer, or an index table outside its region, is
    refused as the access it would be."""
    import torch

    from kiln.frontend.export import LoadedModel

    loaded = LoadedModel("embedding", Embedding().eval(), (torch.randint(0, 40, (1, 6)),))
    vela, start, listed, dma = indexed_dma(loaded, "SRC", tmp_path)
    assert register_at(listed, "NPU_SET_DMA0_IDX_MAX", dma) == 39  # the table's last row
    done = check(bounds_host, tmp_path, with_words(vela, start, {}))
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stdout
    idx_max = last_before(listed, "NPU_SET_DMA0_IDX_MAX", dma)
    done = check(bounds_host, tmp_path, with_words(vela, start, {idx_max.word + 1: 1 << 20}))
    assert done.stdout == OUTSIDE.format("DMA source read", dma.word)
    idx = last_before(listed, "NPU_SET_DMA0_IDX", dma)
    done = check(bounds_host, tmp_path, with_words(vela, start, {idx.word + 1: 1 << 28}))
    assert done.stdout == OUTSIDE.format("DMA index read", dma.word)


def test_a_u85_scatter_into_planes_passes_and_its_reach_is_bounded(bounds_host, tmp_path):
    """A KV cache's SCATTER (tests/compiler/cache_updates.py's Decode: Vela's 3-D indexed DMA, a row
    into each of 3 planes of 16 rows, IDX_MAX the cache's last row, IDX_SKIP1 0) passes; a plane
    stride or an IDX_MAX that reaches past the cache's buffer, or an IDX_SKIP1 that takes the index
    table past its region's, is refused as the access it would be."""
    import torch

    from kiln.frontend.export import LoadedModel
    from tests.compiler.cache_updates import Decode, H, T, make

    torch.manual_seed(5)
    vela, start, listed, dma = indexed_dma(
        LoadedModel("decode", Decode().eval(), make("decode", 7, 0)), "DST", tmp_path
    )
    assert register_at(listed, "NPU_SET_DMA0_SRC_REGION", dma) >> 9 & 3 == 2  # 3-D
    assert register_at(listed, "NPU_SET_DMA0_SIZE1", dma) == H
    assert register_at(listed, "NPU_SET_DMA0_IDX_MAX", dma) == T - 1
    assert register_at(listed, "NPU_SET_DMA0_IDX_SKIP1", dma) == 0
    done = check(bounds_host, tmp_path, with_words(vela, start, {}))
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stdout
    for register, access in (
        ("NPU_SET_DMA0_DST_STRIDE1", "DMA destination write"),
        ("NPU_SET_DMA0_IDX_MAX", "DMA destination write"),
        ("NPU_SET_DMA0_IDX_SKIP1", "DMA index read"),
    ):
        item = last_before(listed, register, dma)
        done = check(bounds_host, tmp_path, with_words(vela, start, {item.word + 1: 1 << 20}))
        assert done.stdout == OUTSIDE.format(access, dma.word), register


def test_u55_streams_refuse_the_u85s_own_opcodes(bounds_host, payloads, tmp_path):
    """NPU_SET_IFM_BROADCAST (0x108) and NPU_OP_RESIZE (0x007) are U85 commands: in a U55 stream, in
    place of its first one-word command, they are unknown opcodes."""
    p = ep.decode(payloads[("tiny_cnn", "ethos-u55-128", None, 0)][0])
    start, _ = nh.stream_span(p.cmd_data)
    for word in (0x0108, 0x0007):
        words = np.frombuffer(p.cmd_data, "<u4").copy()
        assert not words[start] & nh.PAYLOAD_FLAG
        words[start] = word
        bad = ep.encode(words.tobytes(), p.weight_data, p.scratch_size, p.inputs, p.outputs)
        assert check(bounds_host, tmp_path, bad).stdout == unprovable(0, word)


# --- A hand-built Ethos-U85 stream: the OFM's transposes ------------------------------------
# One ELEMENTWISE ADD of an int8 IFM of H=2, W=8, C=16 (NHWC, 256 bytes at offset 0 of region 1)
# and a scalar IFM2, its OFM at offset 256 of region 1 in NHWC with rows 32 bytes apart and
# columns 16 apart (tile 0 of 16 rows x 8 columns holds every case's box, the other tiles
# unused). Bytes the OFM write spans, worked by hand:
#   HWC: rows H=2, cols W=8, channels 16:  (2-1)*32 + (8-1)*16 + 16 = 160 -> ends at 416
#   WHC: rows W=8, cols H=2, channels 16:  (8-1)*32 + (2-1)*16 + 16 = 256 -> ends at 512
#   CHW: rows C=16, cols H=2, channels W=8: (16-1)*32 + (2-1)*16 + 8 = 504 -> ends at 760
U85_CONFIG, U85_ID = 0x2000_0118, 0x2000_7000  # ethos-u85-256: Vela's ConfigRegister and IdRegister


def cmd0(opcode: int, param: int) -> list[int]:
    return [opcode | param << 16]


def cmd1(opcode: int, value: int) -> list[int]:
    return [opcode | nh.PAYLOAD_FLAG, value]


def cop1(stream: list[int], config: int = U85_CONFIG, ident: int = U85_ID) -> bytes:
    """'COP1', the CONFIG action (tag 1, CONFIG, ID), three NOPs (tag 5) so the stream starts 16-byte
    aligned, the CMD_STREAM action (tag 2, length in bits 31..16) and the stream."""
    words = [0x3150_4F43, 1, config, ident, 5, 5, 5, 2 | len(stream) << 16] + stream
    return np.array(words, "<u4").tobytes()


def transposed_add(transpose: int) -> list[int]:
    return (
        cmd0(0x10F, 1)
        + cmd1(0x000, 0)
        + cmd1(0x004, 16)
        + cmd1(0x005, 128)
        + cmd0(0x105, 1)
        + cmd0(0x10A, 7)
        + cmd0(0x10B, 1)
        + cmd0(0x10C, 1)
        + cmd0(0x104, 15)
        + cmd0(0x108, 0)
        + cmd0(0x180, 8)  # IFM2_BROADCAST: SCALAR
        + cmd0(0x11F, 1)
        + cmd1(0x010, 256)
        + cmd1(0x014, 16)
        + cmd1(0x015, 32)
        + cmd0(0x114, 1 | transpose << 11)
        + cmd0(0x111, 7)
        + cmd0(0x112, 1)
        + cmd0(0x113, 15)
        + cmd0(0x11A, 7)
        + cmd0(0x11B, 15)
        + cmd0(0x11C, 15)
        + cmd0(0x006, 1)
        + cmd0(0x000, 0)
    )  # NPU_OP_ELEMENTWISE ADD, NPU_OP_STOP


@pytest.mark.parametrize("transpose, end", [(0, 416), (1, 512), (6, 760)], ids=["HWC", "WHC", "CHW"])
def test_a_transposed_u85_ofm_is_bounded_by_its_memory_layout(bounds_host, tmp_path, transpose, end):
    out = [IoTensor((1, 1, 1, 1, 1, 16), 1, 256, 1)]
    for scratch, expected in (
        (end, "ok\n"),
        (
            end - 1,
            "error 0x531 NPU stream accesses memory outside its "
            "region's buffer: OFM write of the operation at word 28\n",
        ),
    ):
        payload = ep.encode(
            cop1(transposed_add(transpose)), b"", scratch, [IoTensor((1, 1, 1, 2, 8, 16), 1, 0, 1)], out
        )
        assert check(bounds_host, tmp_path, payload).stdout == expected, (transpose, scratch)


# --- A hand-built Ethos-U85 matmul: a CONV with its weights in IFM2 -------------------------------
# IFM 1 x 1 x 16 int8 at offset 0 of region 1 (16 bytes); OFM 1 x 1 x 4 int8 at offset 16 (4 bytes);
# IFM2 the weights, one row of 4 columns (the OFM's depth) of 16 channels (the IFM's depth), NHWC,
# columns 16 bytes apart, at offset 32: (4 - 1) * 16 + 16 = 64 bytes, ending at 96. The scales' region
# is 0 (the payload's weights: none), based at 0; with global scaling (OFM_PRECISION bit 8) the
# NPU reads no scales, with per-channel scaling 4 records of 10 bytes there.
def matmul(ofm_precision: int = 1 | 1 << 8, kernel_width_m1: int = 0, ifm2_broadcast: int = 0) -> list[int]:
    return (
        cmd0(0x10F, 1)
        + cmd1(0x000, 0)
        + cmd1(0x004, 16)
        + cmd1(0x005, 16)
        + cmd0(0x105, 1)
        + cmd0(0x10A, 0)
        + cmd0(0x104, 15)
        + cmd0(0x18F, 1)
        + cmd1(0x080, 32)
        + cmd1(0x084, 16)
        + cmd1(0x085, 64)
        + cmd0(0x185, 1)
        + cmd0(0x18A, 3)
        + cmd0(0x180, ifm2_broadcast)
        + cmd0(0x11F, 1)
        + cmd1(0x010, 16)
        + cmd1(0x014, 4)
        + cmd1(0x015, 4)
        + cmd0(0x114, ofm_precision)
        + cmd0(0x113, 3)
        + cmd0(0x11C, 0)
        + cmd0(0x120, kernel_width_m1)
        + cmd0(0x129, 0)
        + cmd1(0x022, 0)
        + cmd0(0x002, 1)
        + cmd0(0x000, 0)
    )  # NPU_OP_CONV weights_ifm2 = 1, NPU_OP_STOP


MATMUL_AT = len(matmul()) - 2  # the word of its NPU_OP_CONV
OUTSIDE_TEXT = "error 0x531 NPU stream accesses memory outside its region's buffer: "


@pytest.mark.parametrize(
    "stream, scratch, expected",
    [
        (matmul(), 96, "ok\n"),
        (matmul(), 95, OUTSIDE_TEXT + f"IFM2 read of the operation at word {MATMUL_AT}\n"),
        # IFM2_BROADCAST (left by an earlier elementwise operation) does not apply: IFM2 is still read
        (matmul(ifm2_broadcast=8), 95, OUTSIDE_TEXT + f"IFM2 read of the operation at word {MATMUL_AT}\n"),
        (matmul(ofm_precision=1), 96, OUTSIDE_TEXT + f"scale read of the operation at word {MATMUL_AT}\n"),
        (matmul(kernel_width_m1=1), 96, unprovable(MATMUL_AT, 0x0001_0002)),
    ],
    ids=["exact", "one byte short", "broadcast ignored", "per-channel scales", "2x1 kernel"],
)
def test_a_hand_built_u85_matmul_reads_its_ifm2_row_and_scales_only_per_channel(
    bounds_host, tmp_path, stream, scratch, expected
):
    out = [IoTensor((1, 1, 1, 1, 1, 4), 1, 16, 1)]
    payload = ep.encode(cop1(stream), b"", scratch, [IoTensor((1, 1, 1, 1, 1, 16), 1, 0, 1)], out)
    assert check(bounds_host, tmp_path, payload).stdout == expected


# --- A delegate compiled for another NPU ---------------------------------------------------
# CONFIG and ID words of NPUs, worked out from Vela's register layouts: U55/U65 CONFIG = log2 MACs
# | SHRAM KiB << 8 | product << 28; U85 CONFIG = log2 MACs | stream version 1 << 4 | log2 SRAM
# AXI ports << 8 | log2 external ports << 10 | log2 cores << 12 | 2 << 28 (ethos_u85.cpp's table).
NPUS = {
    "ethos-u55-128": (0x0000_1807, 0x1006_6001),
    "ethos-u65-256": (0x1000_3008, 0x1006_6001),
    "ethos-u85-256": (0x2000_0118, 0x2000_7000),
    "ethos-u85-2048": (0x2000_261B, 0x2000_7000),
    "ethos-u85-256 with 2 external AXI ports": (0x2000_0518, 0x2000_7000),
    "ethos-u85-256 of architecture 1.0": (0x2000_0118, 0x1006_6001),
    "ethos-u85-256 of stream version 0": (0x2000_0108, 0x2000_7000),
}
TARGET = "error 0x516 stream compiled for another NPU: "


@pytest.mark.parametrize(
    "compiled, npu, expected",
    [
        ("ethos-u85-256", "ethos-u85-256", "ok"),
        ("ethos-u55-128", "ethos-u55-128", "ok"),
        (
            "ethos-u85-256",
            "ethos-u55-128",
            TARGET + "the delegate was compiled for Ethos-U85 with 256 MACs; this NPU is an Ethos-U55 with 128 MACs",
        ),
        (
            "ethos-u55-128",
            "ethos-u85-256",
            TARGET + "the delegate was compiled for Ethos-U55 with 128 MACs; this NPU is an Ethos-U85 with 256 MACs",
        ),
        (
            "ethos-u65-256",
            "ethos-u85-256",
            TARGET + "the delegate was compiled for Ethos-U65 with 256 MACs; this NPU is an Ethos-U85 with 256 MACs",
        ),
        (
            "ethos-u85-256",
            "ethos-u85-2048",
            TARGET + "the delegate was compiled for Ethos-U85 with 256 MACs; this NPU is an Ethos-U85 with 2048 MACs",
        ),
        (
            "ethos-u85-256",
            "ethos-u85-256 with 2 external AXI ports",
            TARGET + "the delegate was compiled for Ethos-U85 with 256 MACs (2 SRAM and 1 external AXI ports); "
            "this NPU is an Ethos-U85 with 256 MACs (2 SRAM and 2 external AXI ports)",
        ),
        (
            "ethos-u85-256",
            "ethos-u85-256 of architecture 1.0",
            "error 0x515 stream compiled for another NPU architecture: stream 2.0, NPU 1.0",
        ),
        (
            "ethos-u85-256",
            "ethos-u85-256 of stream version 0",
            "error 0x514 stream compiled for another command stream version: stream version 1, NPU version 0",
        ),
    ],
)
def test_a_delegate_for_another_npu_is_refused_naming_both(bounds_host, payloads, tmp_path, compiled, npu, expected):
    mode = "Dedicated_Sram_384KB" if compiled == "ethos-u65-256" else None
    path = tmp_path / "payload.bin"
    path.write_bytes(payloads[("tiny_cnn", compiled, mode, 0)][0])
    config, ident = NPUS[npu]
    done = subprocess.run(
        [str(bounds_host), "--match", hex(config), hex(ident), str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == expected + "\n", done.stdout + done.stderr
    assert done.returncode == (0 if expected == "ok" else 1)

"""Hand-built streams whose results are worked out by hand: strided (2-D, 3-D) DMA, a
tiled NHCWB16 feature map and TRUNCATE rounding, which Vela never emits for U55/U65."""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu import FlatMemory, run_stream
from kiln.simulator.npu.config import config_for
from tests.simulator.npu_streams import Stream

BASES = (0x1000, 0x8000, 0, 0, 0, 0, 0, 0)


def test_dma_3d_destination_strides():
    # 2 planes of 3 rows of 4 bytes; rows 6 bytes apart (skip0 2), planes 24 bytes apart
    # (skip1 = 24 - 3 * 4 = 12); the source is contiguous.
    src = bytearray(range(1, 25))
    dst = bytearray(64)
    memory = FlatMemory({0x1000: src, 0x8000: dst})
    stream = (
        Stream()
        .set("DMA0_SRC_REGION", 0)
        .set1("DMA0_SRC", 0)
        .set("DMA0_DST_REGION", 1 | (2 << 9))
        .set1("DMA0_DST", 4)
        .set1("DMA0_LEN", 4)
        .set("DMA0_SIZE0", 3)
        .set1("DMA0_SKIP0", 2)
        .set("DMA0_SIZE1", 2)
        .set1("DMA0_SKIP1", 12)
        .op("DMA_START")
        .op("DMA_WAIT")
    )
    result = run_stream(stream.array(), BASES, memory, config_for("ethos-u65-256"))
    assert result.fault is None
    want = bytearray(64)
    for plane in range(2):
        for row in range(3):
            start = 4 + plane * 24 + row * 6
            first = 1 + (plane * 3 + row) * 4
            want[start : start + 4] = bytes(range(first, first + 4))
    assert dst == want


def test_copy_into_two_tile_nhcwb16():
    # A 1x1 max pool copies a 2x3x20 int8 NHWC IFM into an NHCWB16 OFM split in two tiles:
    # columns 0..1 at OFM_BASE0, column 2 at OFM_BASE1.
    h, w, c = 2, 3, 20
    ifm = np.arange(h * w * c, dtype=np.int64).reshape(h, w, c) % 200 - 100
    scratch = bytearray(1024)
    scratch[: ifm.size] = ifm.astype(np.int8).tobytes()
    memory = FlatMemory({0x1000: bytearray(16), 0x8000: scratch})
    stream = Stream().feature_map("IFM", 1, 0, h, w, c)
    stream.set("OFM_REGION", 1).set1("OFM_BASE0", 256).set1("OFM_BASE1", 640).set1("OFM_BASE2", 0).set1("OFM_BASE3", 0)
    stream.set("OFM_HEIGHT0_M1", h - 1).set("OFM_HEIGHT1_M1", h - 1).set("OFM_WIDTH0_M1", 1)
    # tile 0 is 2 columns wide: bricks of 16 channels, 2 columns, 2 bricks per row
    stream.set1("OFM_STRIDE_X", 16).set1("OFM_STRIDE_C", 32).set1("OFM_STRIDE_Y", 64)
    stream.set("OFM_PRECISION", 1 | (1 << 6) | (1 << 8)).set1("OFM_SCALE", 1, 0)
    stream.set("OFM_HEIGHT_M1", h - 1).set("OFM_WIDTH_M1", w - 1).set("OFM_DEPTH_M1", c - 1)
    stream.set("ACTIVATION_MIN", 0xFF80).set("ACTIVATION_MAX", 0x7F).op("POOL", 0)
    result = run_stream(stream.array(), BASES, memory, config_for("ethos-u55-128"))
    assert result.fault is None
    out = np.frombuffer(bytes(scratch), np.int8)
    for y in range(h):
        for x in range(w):
            for ch in range(c):
                base, col = (256, x) if x < 2 else (640, x - 2)
                address = base + y * 64 + col * 16 + (ch // 16) * 32 + ch % 16
                assert out[address] == ifm[y, x, ch], (y, x, ch)


def test_dma_2d_source_gathers_rows():
    # 3 rows of 4 bytes from a source whose rows are 10 bytes apart (skip0 6) into a
    # contiguous destination. No Vela release emits a 2-D DMA for U55/U65 (regor always
    # programs 1-D), so this checks the model against its documented register contract.
    src = bytearray(range(1, 33))
    dst = bytearray(16)
    memory = FlatMemory({0x1000: src, 0x8000: dst})
    stream = (
        Stream()
        .set("DMA0_SRC_REGION", 0 | (1 << 9))
        .set1("DMA0_SRC", 2)
        .set("DMA0_DST_REGION", 1)
        .set1("DMA0_DST", 0)
        .set1("DMA0_LEN", 4)
        .set("DMA0_SIZE0", 3)
        .set1("DMA0_SKIP0", 6)
        .op("DMA_START")
        .op("DMA_WAIT")
    )
    result = run_stream(stream.array(), BASES, memory, config_for("ethos-u55-64"))
    assert result.fault is None
    assert result.coverage.counts[("dma", "2-D")] == 1
    assert bytes(dst[:12]) == bytes([3, 4, 5, 6, 13, 14, 15, 16, 23, 24, 25, 26])
    assert bytes(dst[12:]) == bytes(4)


def test_truncate_rounding_rounds_toward_zero():
    # A 1x1 average pool scales an int8 IFM by OFM_SCALE 1 / 2^2 with OFM_PRECISION's
    # rounding field = TRUNCATE (1). No Vela release emits TRUNCATE for U55/U65; Vela's
    # API documents it as "truncate towards zero": -7 / 4 = -1.75 -> -1 (NATURAL: -2).
    ifm = [-9, -7, -6, -5, -4, -3, -1, 0, 1, 3, 4, 5, 7, 9]
    want = [-2, -1, -1, -1, -1, 0, 0, 0, 0, 0, 1, 1, 1, 2]
    scratch = bytearray(64)
    scratch[: len(ifm)] = np.array(ifm, np.int8).tobytes()
    memory = FlatMemory({0x1000: bytearray(16), 0x8000: scratch})
    stream = Stream().feature_map("IFM", 1, 0, 1, 1, len(ifm)).feature_map("OFM", 1, 32, 1, 1, len(ifm))
    stream.set("OFM_PRECISION", 1 | (1 << 8) | (1 << 14)).set1("OFM_SCALE", 1, 2)
    stream.set("KERNEL_WIDTH_M1", 0).set("KERNEL_HEIGHT_M1", 0)
    stream.set("ACTIVATION_MIN", 0xFF80).set("ACTIVATION_MAX", 0x7F).op("POOL", 1)
    result = run_stream(stream.array(), BASES, memory, config_for("ethos-u55-128"))
    assert result.fault is None
    assert result.coverage.counts[("rounding", "TRUNCATE")] == 1
    assert np.frombuffer(bytes(scratch[32 : 32 + len(ifm)]), np.int8).tolist() == want

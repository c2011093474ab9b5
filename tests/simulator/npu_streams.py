"""Builds command streams by hand for the NPU model tests: cmd0 and cmd1 words from the
register names of kiln.simulator.npu.u55.commands."""

from __future__ import annotations

import numpy as np

from kiln.simulator.npu.u55.commands import CMD0, CMD1


class Stream:
    def __init__(self):
        self.words: list[int] = []

    def set(self, name: str, param: int = 0) -> Stream:
        self.words.append(CMD0[name] | ((param & 0xFFFF) << 16))
        return self

    def set1(self, name: str, payload: int, param: int = 0) -> Stream:
        self.words += [CMD1[name] | (1 << 14) | ((param & 0xFFFF) << 16), payload & 0xFFFFFFFF]
        return self

    def op(self, name: str, param: int = 0) -> Stream:
        return self.set(f"NPU_OP_{name}", param)

    def array(self) -> np.ndarray:
        return np.array(self.words, np.uint32)

    def feature_map(
        self,
        prefix: str,
        region: int,
        base: int,
        h: int,
        w: int,
        c: int,
        elem: int = 1,
        precision: int = 1,
        nhcwb16: bool = False,
    ) -> Stream:
        """An untiled feature map: NHWC strides, or NHCWB16 bricks; precision is the
        register's type field (IFM: 1 = int8; OFM: 1 = int8)."""
        self.set(f"{prefix}_REGION", region)
        self.set1(f"{prefix}_BASE0", base)
        for i in (1, 2, 3):
            self.set1(f"{prefix}_BASE{i}", 0)
        self.set(f"{prefix}_HEIGHT0_M1", h - 1).set(f"{prefix}_HEIGHT1_M1", h - 1).set(f"{prefix}_WIDTH0_M1", w - 1)
        if nhcwb16:
            bricks = -(-c // 16)
            self.set1(f"{prefix}_STRIDE_X", 16 * elem).set1(f"{prefix}_STRIDE_C", 16 * elem * w)
            self.set1(f"{prefix}_STRIDE_Y", 16 * elem * w * bricks)
        else:
            self.set1(f"{prefix}_STRIDE_C", elem).set1(f"{prefix}_STRIDE_X", elem * c).set1(
                f"{prefix}_STRIDE_Y", elem * c * w
            )
        self.set(f"{prefix}_PRECISION", precision | ((1 if nhcwb16 else 0) << 6))
        if prefix == "OFM":
            self.set("OFM_HEIGHT_M1", h - 1).set("OFM_WIDTH_M1", w - 1).set("OFM_DEPTH_M1", c - 1)
        elif prefix == "IFM":
            self.set("IFM_DEPTH_M1", c - 1)
        return self

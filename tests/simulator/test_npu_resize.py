"""Resizing as Vela compiles kiln's lowering, each on kiln's NPU model bit for bit as
tosa_reference_model runs the TOSA graph: nearest upsampling (kiln.lower.resize._upsample_nearest)
by 2, 4 or 8 both ways one TOSA RESIZE (scale 2f / 2, offset 1 - f, border f - 1), whose pixel
repeat is checked against numpy's, otherwise CONCATs of copies; bilinear with align_corners
(_bilinear_aligned) two 1x1 convolutions of integer taps, the second on int16 (on Ethos-U85 too)."""

from __future__ import annotations

import numpy as np
import pytest
import tosa_serializer as ts
from torch import nn

from kiln.lower.lowerer import attr
from kiln.lower.vela import compile_tosa
from tests.simulator import helpers


class Upsample(nn.Module):
    def __init__(self, size, mode="nearest"):
        super().__init__()
        self.size, self.mode = size, mode

    def forward(self, x):
        aligned = {"align_corners": True} if self.mode == "bilinear" else {}
        return nn.functional.interpolate(x, size=self.size, mode=self.mode, **aligned)


CASES = {  # name: (output size, input shape, target[, mode])
    "x2": ((8, 10), (1, 16, 4, 5), "ethos-u55-128"),
    "x4": ((12, 8), (1, 3, 3, 2), "ethos-u55-128"),
    "x8": ((16, 24), (1, 5, 2, 3), "ethos-u65-256"),
    "x3_interleaved": ((9, 12), (1, 4, 3, 4), "ethos-u55-128"),
    "x2_by_1_interleaved": ((8, 5), (1, 4, 4, 5), "ethos-u55-256"),
    "bilinear_aligned_x2": ((10, 12), (1, 6, 5, 6), "ethos-u55-128", "bilinear"),
    "bilinear_aligned_odd": ((9, 4), (1, 3, 4, 7), "ethos-u65-256", "bilinear"),
    "bilinear_aligned_u85": ((10, 12), (1, 6, 5, 6), "ethos-u85-256", "bilinear"),
    "bilinear_aligned_u85_odd": ((9, 13), (1, 3, 4, 7), "ethos-u85-256", "bilinear"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_resizing_on_the_npu_model_equals_tosa_reference(name):
    size, shape, target, *mode = CASES[name]
    diffs, result = helpers.module_on_the_model(Upsample(size, *mode), shape, name, target)
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)


def test_resize_parameters_repeat_each_pixel_as_pytorch_nearest():
    """The RESIZE kiln emits, run by tosa_reference_model and by the NPU model after Vela, is
    numpy's repeat along H and W (PyTorch's nearest index floor(y / f))."""
    for f, shape in ((2, (1, 3, 5, 8)), (4, (1, 2, 3, 4)), (8, (1, 2, 2, 16))):
        ser = ts.TosaSerializer("", targetMinor=0, targetDraft=False)
        n, h, w, c = shape
        ser.addInputTensor(ts.TosaSerializerTensor("x", list(shape), ts.DType.INT8))
        consts = []
        for i, values in enumerate(([2 * f, 2, 2 * f, 2], [1 - f, 1 - f], [f - 1, f - 1])):
            ser.addConst([len(values)], ts.DType.SHAPE, np.array(values, np.int64), name=f"s{i}")
            consts.append(f"s{i}")
        out = ser.addOutput([n, h * f, w * f, c], ts.DType.INT8).name
        ser.addOperator(ts.Op.RESIZE, ["x", *consts], [out], attr("Resize", ts.ResizeMode.NEAREST))
        tosa = bytes(ser.serialize())
        x = np.random.default_rng(f).integers(-128, 128, size=shape, dtype=np.int8)
        want = np.repeat(np.repeat(x, f, 1), f, 2)
        assert np.array_equal(helpers.reference(tosa, [x])[0], want)
        vela = compile_tosa(tosa, f"resize_{f}", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
        got, result = helpers.run_on_model(vela, [x], "ethos-u55-128")
        assert result.fault is None and np.array_equal(got[0].reshape(want.shape), want), f

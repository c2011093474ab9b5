"""A Conv1d network's rank-3 values stay channels last between its convolutions
(kiln.lower.tosa: a squeeze or unsqueeze of unit spatial dims keeps the layout, elementwise ops
work in it): the TOSA graph of a residual Conv1d block transposes only the program's input, and
Vela's command stream runs on kiln's NPU model bit for bit as tosa_reference_model runs the
graph (test_lowering's conv1d_residual checks the graph against PT2E)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from kiln import boards
from kiln.lower import tosa as tosa_lowering
from kiln.lower.vela import compile_tosa
from tests.compiler.helpers import lower_module
from tests.simulator import helpers


class Conv1dBlock(nn.Module):
    """TC-ResNet's block: two 9-tap convolutions, a strided 1x1 shortcut, a residual add."""

    def __init__(self, cin: int = 8, cout: int = 12):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv1d(cin, cout, 9, stride=2, padding=4)
        self.conv2 = nn.Conv1d(cout, cout, 9, padding=4)
        self.shortcut = nn.Conv1d(cin, cout, 1, stride=2)

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        return torch.relu(y + torch.relu(self.shortcut(x))).mean(-1)


def test_conv1d_block_transposes_only_its_input_and_runs_bit_exact():
    shape = (1, 8, 30)
    g = torch.Generator().manual_seed(3)
    calibration = [(torch.randn(*shape, generator=g),) for _ in range(2)]
    _, _, parts = lower_module(Conv1dBlock(), calibration[0], calibration, "ethos-u55-128")
    (part,) = parts.partitions
    tosa = tosa_lowering.lower(part, boards.target("ethos-u55-128").npu)
    import tosa.TosaGraph as graph_module
    from tosa.Op import Op

    block = graph_module.TosaGraph.GetRootAs(tosa, 0).Regions(0).Blocks(0)
    transposes = sum(block.Operators(i).Op() == Op.TRANSPOSE for i in range(block.OperatorsLength()))
    assert transposes == 1, transposes  # NCL -> NLC of the input; none between the convolutions
    vela = compile_tosa(tosa, "conv1d_block", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    x = np.random.default_rng(5).integers(-128, 128, size=shape, dtype=np.int8)
    diffs, result = helpers.compare(tosa, vela, [x], "ethos-u55-128")
    assert diffs == [0] and result.counters["block_ops"] > 0, (diffs, result)

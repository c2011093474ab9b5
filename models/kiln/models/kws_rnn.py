"""kws_gru and kws_lstm: recurrent keyword spotting (as in Zhang et al., "Hello Edge", 2017). Input 1x16x10.

16 frames of 10 MFCCs (a third of the paper's 49, as the unrolled steps each cost a
compile), batch first, through one recurrent layer of 32 units and a linear
classifier to 12 keywords. The GRU model classifies the output sequence's last step
(output[:, -1]); the LSTM model the final hidden state h_n[-1]: the two ways users read
a recurrent layer's result. Weights are PyTorch's default initialisation (uniform in
+-1/sqrt(hidden)), seeded.
``ModelUnderTest`` and ``ModelInputs`` are the GRU model's.
"""

from __future__ import annotations

import torch
from torch import nn

from kiln.models._common import build_seeded

SEED = 30
INPUT_SHAPE = (1, 16, 10)
HIDDEN = 32
CLASSES = 12


class KeywordRNN(nn.Module):
    def __init__(self, cell: str, classes: int = CLASSES) -> None:
        super().__init__()
        self.cell = cell
        self.rnn = CELLS[cell](INPUT_SHAPE[2], HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output, state = self.rnn(x)
        if self.cell == "lstm":
            hidden, _ = state
            return self.fc(hidden[-1])
        return self.fc(output[:, -1])


CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


def build(cell: str = "gru") -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The GRU or LSTM model (eval mode, deterministic weights) and one example input."""
    return build_seeded(SEED, lambda: KeywordRNN(cell), INPUT_SHAPE, signed=True)


ModelUnderTest, ModelInputs = build()

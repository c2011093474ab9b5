"""Recurrent layers unrolled (kiln.frontend.recurrent) compute what PyTorch's own do."""

from __future__ import annotations

import pytest
import torch

from kiln.frontend.recurrent import RECURRENT, unroll_recurrent


class Recurrent(torch.nn.Module):
    """A recurrent layer returning all its outputs: sequence, h_n (and c_n)."""

    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        out, state = self.layer(x)
        return (out, *state) if isinstance(state, tuple) else (out, state)


CASES = {
    "gru": (lambda: torch.nn.GRU(6, 5, batch_first=True), (2, 7, 6)),
    "gru_time_first_2_layers": (lambda: torch.nn.GRU(6, 5, num_layers=2), (7, 2, 6)),
    "lstm": (lambda: torch.nn.LSTM(6, 5, batch_first=True), (1, 9, 6)),
    "lstm_bidirectional_2_layers": (
        lambda: torch.nn.LSTM(4, 3, num_layers=2, bidirectional=True, batch_first=True),
        (2, 5, 4),
    ),
    "lstm_no_bias": (lambda: torch.nn.LSTM(4, 3, bias=False), (5, 1, 4)),
    "lstm_unbatched": (lambda: torch.nn.LSTM(4, 3), (6, 4)),
    "rnn_tanh": (lambda: torch.nn.RNN(4, 8, batch_first=True), (1, 6, 4)),
    "rnn_relu_bidirectional": (lambda: torch.nn.RNN(4, 8, nonlinearity="relu", bidirectional=True), (6, 1, 4)),
}


@pytest.mark.parametrize("case", CASES)
def test_unrolled_layer_equals_pytorch(case):
    make, shape = CASES[case]
    torch.manual_seed(0)
    module = Recurrent(make()).eval()
    x = torch.randn(*shape)
    gm = torch.export.export(module, (x,), strict=False).module(check_guards=False)
    assert unroll_recurrent(gm) == 1
    assert not [n for n in gm.graph.nodes if n.target in RECURRENT]
    with torch.no_grad():
        want, got = module(x), gm(x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_exporting_a_recurrent_layer_warns_nothing():
    """torch.export's warning about the layers' flat weight list is not for kiln's users."""
    import warnings

    from kiln.frontend import export as frontend

    module = Recurrent(torch.nn.GRU(4, 3, batch_first=True)).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frontend.export(frontend.LoadedModel("gru", module, (torch.randn(1, 5, 4),)))
    assert [str(w.message) for w in caught] == []

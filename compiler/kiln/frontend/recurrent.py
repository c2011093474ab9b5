"""Recurrent layers unrolled over their (fixed) sequence length into ops kiln runs.

torch.export keeps nn.GRU, nn.LSTM and nn.RNN as one op each (aten.gru.input,
aten.lstm.input, aten.rnn_tanh.input / rnn_relu.input) with several outputs. For each
layer this pass emits, in PyTorch's gate order and formulas:
- the input projection of every time step at once: linear(x, W_ih, b_ih) over [.., T, I]
  (one MAC op the NPU runs as a convolution), then one time step's gates with select;
- per time step, linear(h, W_hh, b_hh) and the gate arithmetic:
    GRU   r = sigmoid(xr + hr), z = sigmoid(xz + hz), n = tanh(xn + r * hn), h = n + z * (h - n)
    LSTM  i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of (x + h) gates,
          c = f * c + i * g, h = o * tanh(c)
    RNN   h = tanh(x + h) (relu for rnn_relu)
- the output sequence as a cat of the steps' h; h_n (and c_n) as a cat of each layer's last.
Layers stack (num_layers > 1, in eval mode: no dropout between them). Bidirectional layers
run the sequence backwards too and concatenate both directions' features, as PyTorch does.
Each new node records the recurrent op as its origin (kiln_origin), so --exclude-op and
the report name the layer the user wrote.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

from kiln.errors import ModelError
from kiln.frontend.rewrite import Emitter, finish

aten = torch.ops.aten

# op -> (gate count, whether the hidden state is a [h, c] list)
RECURRENT = {
    aten.gru.input: (3, False),
    aten.lstm.input: (4, True),
    aten.rnn_tanh.input: (1, False),
    aten.rnn_relu.input: (1, False),
}


def _gates(emit: Emitter, projected: Node, count: int, size: int) -> list[Node]:
    """The `count` gate blocks of width `size` along the last dim."""
    return [emit(aten.slice.Tensor, projected, -1, k * size, (k + 1) * size) for k in range(count)]


def _cell(
    emit: Emitter, op, x_gates: list[Node], h: Node, c: Node | None, w_hh: Node, b_hh: Node | None, size: int
) -> tuple[Node, Node | None]:
    """One time step: (h, c) after it, from this step's input gates and the previous state."""
    count = RECURRENT[op][0]
    h_gates = (
        _gates(emit, emit(aten.linear.default, h, w_hh, b_hh), count, size)
        if count > 1
        else [emit(aten.linear.default, h, w_hh, b_hh)]
    )
    if op is aten.gru.input:
        r = emit(aten.sigmoid.default, emit(aten.add.Tensor, x_gates[0], h_gates[0]))
        z = emit(aten.sigmoid.default, emit(aten.add.Tensor, x_gates[1], h_gates[1]))
        n = emit(aten.tanh.default, emit(aten.add.Tensor, x_gates[2], emit(aten.mul.Tensor, r, h_gates[2])))
        return emit(aten.add.Tensor, n, emit(aten.mul.Tensor, z, emit(aten.sub.Tensor, h, n))), None
    if op is aten.lstm.input:
        i, f, g, o = (emit(aten.add.Tensor, a, b) for a, b in zip(x_gates, h_gates))
        i, f, o = (emit(aten.sigmoid.default, v) for v in (i, f, o))
        c = emit(aten.add.Tensor, emit(aten.mul.Tensor, f, c), emit(aten.mul.Tensor, i, emit(aten.tanh.default, g)))
        return emit(aten.mul.Tensor, o, emit(aten.tanh.default, c)), c
    act = aten.tanh.default if op is aten.rnn_tanh.input else aten.relu.default
    return emit(act, emit(aten.add.Tensor, x_gates[0], h_gates[0])), None


def _unroll(gm: GraphModule, node: Node) -> list[Node]:
    """The op's outputs (sequence, h_n[, c_n]) as nodes of unrolled ops."""
    op = node.target
    x, hx, params, has_biases, num_layers, _dropout, train, bidirectional, batch_first = node.args
    if train:
        raise ModelError(f"node {node.name} ({op}): a recurrent layer in training mode; call model.eval()")
    count, has_cell = RECURRENT[op]
    emit = Emitter(gm, node)
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2  # tensors per layer and direction
    if len(params) != per * num_layers * directions:
        raise ModelError(
            f"node {node.name} ({op}): {len(params)} weight tensors, expected {per * num_layers * directions}"
        )
    time_dim = 1 if batch_first and x.meta["val"].dim() == 3 else 0  # unbatched [T, I] input: time first
    steps = x.meta["val"].shape[time_dim]
    h0, c0 = (hx[0], hx[1]) if has_cell else (hx, None)
    size = h0.meta["val"].shape[-1]
    layer_in, last_h, last_c = x, [], []
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            w_ih, w_hh, *biases = params[per * k : per * (k + 1)]
            b_ih, b_hh = biases if has_biases else (None, None)
            projected = emit(aten.linear.default, layer_in, w_ih, b_ih)  # every step's input gates at once
            h = emit(aten.select.int, h0, 0, k)
            c = emit(aten.select.int, c0, 0, k) if has_cell else None
            sequence: list[Node | None] = [None] * steps
            order = range(steps - 1, -1, -1) if direction else range(steps)
            for t in order:
                x_t = emit(aten.select.int, projected, time_dim, t)
                x_gates = _gates(emit, x_t, count, size) if count > 1 else [x_t]
                h, c = _cell(emit, op, x_gates, h, c, w_hh, b_hh, size)
                sequence[t] = emit(aten.unsqueeze.default, h, time_dim)
            outputs.append(emit(aten.cat.default, sequence, time_dim))
            last_h.append(emit(aten.unsqueeze.default, h, 0))
            if has_cell:
                last_c.append(emit(aten.unsqueeze.default, c, 0))
        layer_in = outputs[0] if directions == 1 else emit(aten.cat.default, outputs, -1)
    result = [layer_in, emit(aten.cat.default, last_h, 0)]
    if has_cell:
        result.append(emit(aten.cat.default, last_c, 0))
    return result


def unroll_recurrent(gm: GraphModule) -> int:
    """Replaces each GRU/LSTM/RNN op (and the getitems reading it); returns how many."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in RECURRENT:
            continue
        outputs = _unroll(gm, node)
        for user in list(node.users):
            if user.target is not operator.getitem:
                raise ModelError(f"node {user.name} reads recurrent node {node.name} other than by an index")
            user.replace_all_uses_with(outputs[user.args[1]])
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        count += 1
    return finish(gm, count)

"""A toy byte-level language model of CPU kernels, written with kiln's own .pte writer: the two
methods and the state the generation app (firmware/apps/generate) runs, with a "KV cache" any
numpy line can follow.

    cache   int64 [1, 1, T, 1], the state (memory id 2, named "cache"): one token per position
    prefill(tokens int64 [1, T], length int64 [1]) -> (token int64 [1], logits int8 [1, 256])
        cache <- tokens (the prompt, zeros after it); next = (sum(cache) + length) mod 256
    decode(token int64 [1, 1], position int64 [1]) -> (token int64 [1], logits int8 [1, 256])
        cache[position] <- token; next = sum(cache) mod 256
    logits = one-hot of next (int8 1 at next, 0 elsewhere); token = argmax(logits) = next

T is both prefill's token count (P) and the cache length. `generate(prompt, n)` works out the
n tokens and each step's logits with numpy: the reference, independent of the firmware.
"""

from __future__ import annotations

import numpy as np

from kiln.pte.schema import (
    STATE_MEMORY_ID,
    AllocationInfo,
    Bool,
    Chain,
    ExecutionPlan,
    Int,
    IntList,
    KernelCall,
    Null,
    Operator,
    PteProgram,
    ScalarType,
    Tensor,
)
from kiln.pte.writer import serialize

VOCAB = 256
OPERATORS = [
    Operator("aten::view_copy", "out"),  # 0
    Operator("aten::sum", "IntList_out"),  # 1
    Operator("aten::add", "out"),  # 2
    Operator("aten::_to_copy", "out"),  # 3
    Operator("aten::eq", "Tensor_out"),  # 4
    Operator("aten::argmax", "out"),  # 5
    Operator("aten::where", "self_out"),  # 6
]
VIEW, SUM, ADD, CAST, EQ, ARGMAX, WHERE = range(len(OPERATORS))


class _Plan:
    """Values of one plan as they are added; planned tensors laid out in memory id 1."""

    def __init__(self):
        self.values, self.offset = [], 0

    def add(self, value) -> int:
        self.values.append(value)
        return len(self.values) - 1

    def tensor(self, scalar_type, sizes, constant=0, state=None) -> int:
        nbytes = int(np.prod(sizes)) * np.dtype(_NUMPY[scalar_type]).itemsize
        allocation = None
        if state is not None:
            allocation = AllocationInfo.at(STATE_MEMORY_ID, 0)
        elif not constant:
            allocation = AllocationInfo.at(1, self.offset)
            self.offset += -(-nbytes // 16) * 16
        return self.add(
            Tensor(
                scalar_type=scalar_type,
                sizes=sizes,
                dim_order=range(len(sizes)),
                data_buffer_idx=constant,
                allocation_info=allocation,
                name=state,
            )
        )

    def ints(self, *items) -> int:
        return self.add(IntList([self.add(Int(i)) for i in items]))


_NUMPY = {ScalarType.LONG: np.int64, ScalarType.BOOL: np.bool_, ScalarType.CHAR: np.int8}
VOCAB_CONSTANT, ROWS_CONSTANT = 1, 2  # data_buffer_idx of the vocabulary's bytes and arange(T) int64


def _plan(name: str, length: int) -> ExecutionPlan:
    p = _Plan()
    cache = p.tensor(ScalarType.LONG, (1, 1, length, 1), state="cache")
    calls = []
    one, false, none = p.add(Int(1)), p.add(Bool(False)), p.add(Null())
    if name == "prefill":
        tokens, extra = p.tensor(ScalarType.LONG, (1, length)), p.tensor(ScalarType.LONG, (1,))
        calls.append(KernelCall(VIEW, [tokens, p.ints(1, 1, length, 1), cache, cache]))
    else:
        tokens, position = p.tensor(ScalarType.LONG, (1, 1)), p.tensor(ScalarType.LONG, (1,))
        rows, mask = (
            p.tensor(ScalarType.LONG, (1, 1, length, 1), constant=ROWS_CONSTANT),
            p.tensor(ScalarType.BOOL, (1, 1, length, 1)),
        )
        calls.append(KernelCall(EQ, [rows, position, mask, mask]))
        calls.append(KernelCall(WHERE, [mask, tokens, cache, cache, cache]))
    total = p.tensor(ScalarType.LONG, (1,))
    calls.append(KernelCall(SUM, [cache, p.ints(1, 2, 3), false, none, total, total]))
    if name == "prefill":
        calls.append(KernelCall(ADD, [total, extra, one, total, total]))
    low = p.tensor(ScalarType.CHAR, (1,))
    vocab = p.tensor(ScalarType.CHAR, (1, VOCAB), constant=VOCAB_CONSTANT)
    hit, logits, token = (
        p.tensor(ScalarType.BOOL, (1, VOCAB)),
        p.tensor(ScalarType.CHAR, (1, VOCAB)),
        p.tensor(ScalarType.LONG, (1,)),
    )
    calls += [
        KernelCall(CAST, [total, false, none, low, low]),  # int64 -> int8: its low byte
        KernelCall(EQ, [vocab, low, hit, hit]),
        KernelCall(CAST, [hit, false, none, logits, logits]),
        KernelCall(ARGMAX, [logits, one, false, token, token]),
    ]
    inputs = [tokens, extra if name == "prefill" else position]
    return ExecutionPlan(
        name=name,
        values=p.values,
        inputs=inputs,
        outputs=[token, logits],
        chains=[Chain(inputs, [token, logits], calls)],
        operators=OPERATORS,
        delegates=[],
        non_const_buffer_sizes=[0, p.offset, length * 8],
    )


def write(length: int = 16, max_seq_len: int | None = None, prefill: bool = True) -> bytes:
    """The program with a cache of `length` positions (prefill takes as many tokens); with
    `max_seq_len`, ExecuTorch's constant method get_max_seq_len returning it (a plan without inputs
    whose one output is an Int); without `prefill`, decode alone."""
    # the vocabulary as int8 (0..127, -128..-1): byte k equals next's low byte when next = k mod 256
    constants = [np.arange(VOCAB).astype(np.int8).tobytes(), np.arange(length, dtype=np.int64).tobytes()]
    plans = [_plan("prefill", length)] if prefill else []
    plans.append(_plan("decode", length))
    if max_seq_len is not None:
        plans.append(
            ExecutionPlan(
                name="get_max_seq_len",
                values=[Int(max_seq_len)],
                inputs=[],
                outputs=[0],
                chains=[Chain([], [0], [])],
                operators=[],
                delegates=[],
                non_const_buffer_sizes=[0],
            )
        )
    return serialize(PteProgram(plans), constants=constants)


def generate(prompt: bytes, n: int, length: int = 16, prefill: bool = True) -> tuple[list[int], list[np.ndarray]]:
    """The n tokens the model generates after `prompt`, and each step's logits (int8 [1, 256]).
    Without `prefill`, decode reads the prompt a token at a time (each byte at its position), so
    the first token is sum(prompt) mod 256 (prefill adds the length)."""
    cache = np.zeros(length, np.int64)
    cache[: len(prompt)] = list(prompt)
    tokens = [int((cache.sum() + (len(prompt) if prefill else 0)) % VOCAB)]
    for k in range(1, n):
        cache[len(prompt) + k - 1] = tokens[-1]
        tokens.append(int(cache.sum() % VOCAB))
    logits = [np.eye(VOCAB, dtype=np.int8)[t].reshape(1, VOCAB) for t in tokens]
    return tokens, logits

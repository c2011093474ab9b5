"""A CPU-only program of two methods over one state arena, written with kiln's own .pte writer,
and what running a sequence of its methods computes, worked out with numpy.

The arena (memory id 2, STATE_ARENA bytes, ExecuTorch's share_mutable_buffers layout) holds two
state tensors, each named (extra_tensor_info) and planned at the same offset in both plans:

    acc    float32 [4] at offset 0
    steps  int64 [1]   at offset 16

    accumulate(x float32 [4]) -> y:  acc <- acc + x;  steps <- steps + 1;  y = acc * 2
    scale(x float32 [4]) -> y:       acc <- acc * x;  steps <- steps + 1;  y = acc + x

Each method writes its state in place (aten::add.out / aten::mul.out with the state tensor as
both an operand and the out tensor), so a run of accumulate then scale shows the state carried
from one method to the other. `edit(plans)` rewrites the plans before writing (for damaged
files); the writer's own checks are the caller's to switch off.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kiln.pte import writer
from kiln.pte.schema import (
    STATE_MEMORY_ID,
    AllocationInfo,
    Chain,
    ExecutionPlan,
    ExtraTensorInfoSlot,
    Int,
    KernelCall,
    Operator,
    PteProgram,
    ScalarType,
    Tensor,
)
from kiln.pte.writer import serialize

METHODS = ("accumulate", "scale")
STATES = (("acc", 0, ScalarType.FLOAT, (4,)), ("steps", 16, ScalarType.LONG, (1,)))
STATE_ARENA = 32  # bytes: acc's 16, steps' 8, padded
ACTIVATIONS = {"accumulate": 32, "scale": 48}  # x and y (scale plans an unused 16 more)
TWO, ONE = np.full(4, 2.0, np.float32), np.ones(1, np.int64)


def _tensor(scalar_type, sizes, memory_id, offset, name=None, constant=0):
    return Tensor(
        scalar_type=scalar_type,
        sizes=sizes,
        dim_order=range(len(sizes)),
        data_buffer_idx=constant,
        allocation_info=None if constant else AllocationInfo.at(memory_id, offset),
        name=name,
    )


def _plan(name: str) -> ExecutionPlan:
    acc, steps = (_tensor(t, s, STATE_MEMORY_ID, o, n) for n, o, t, s in STATES)
    values = [
        acc,  # 0
        steps,  # 1
        _tensor(ScalarType.FLOAT, (4,), 1, 0),  # 2: x
        _tensor(ScalarType.FLOAT, (4,), 1, 16),  # 3: y
        Int(1),  # 4: alpha
        _tensor(ScalarType.FLOAT, (4,), 0, 0, constant=1),  # 5: TWO
        _tensor(ScalarType.LONG, (1,), 0, 0, constant=2),  # 6: ONE
    ]
    add, mul = 0, 1
    if name == "accumulate":
        calls = [KernelCall(add, [0, 2, 4, 0, 0]), KernelCall(mul, [0, 5, 3, 3])]
    else:
        calls = [KernelCall(mul, [0, 2, 0, 0]), KernelCall(add, [0, 2, 4, 3, 3])]
    calls.append(KernelCall(add, [1, 6, 4, 1, 1]))
    return ExecutionPlan(
        name=name,
        values=values,
        inputs=[2],
        outputs=[3],
        chains=[Chain([2], [3], calls)],
        operators=[Operator("aten::add", "out"), Operator("aten::mul", "out")],
        delegates=[],
        non_const_buffer_sizes=[0, ACTIVATIONS[name], STATE_ARENA],
    )


def plans() -> list[ExecutionPlan]:
    return [_plan(name) for name in METHODS]


def write(edit=None) -> bytes:
    made = plans()
    if edit is not None:
        made = edit(made)
    return serialize(PteProgram(made), constants=[TWO.tobytes(), ONE.tobytes()])


def with_values(plan: ExecutionPlan, **changed) -> ExecutionPlan:
    """`plan` with values replaced by index: with_values(plan, v0=tensor)."""
    values = list(plan.values)
    for key, value in changed.items():
        values[int(key[1:])] = value
    return replace(plan, values=values)


def expected(calls: list[tuple[str, np.ndarray]]) -> list[tuple[np.ndarray, bytes]]:
    """Per call (method, x) in order, from zeroed state: its output y and the state arena's
    bytes after it."""
    acc, steps = np.zeros(4, np.float32), np.zeros(1, np.int64)
    done = []
    for method, x in calls:
        if method == "accumulate":
            acc = acc + x
            y = acc * TWO
        else:
            acc = acc * x
            y = acc + x
        steps = steps + ONE
        arena = acc.tobytes() + steps.tobytes()
        done.append((y.astype(np.float32), arena + bytes(STATE_ARENA - len(arena))))
    return done


def extra_fields(monkeypatch, *fields) -> None:
    """Has kiln's writer write `fields` ((ExtraTensorInfoSlot, kind, value), ...) into every
    extra_tensor_info table beside the name it writes alone: for files that put a state's data
    elsewhere (location 1, EXTERNAL) or on another device (device_type 1, CUDA)."""
    table = writer._Writer.table

    def with_fields(self, n_slots, given, what):
        if n_slots == len(ExtraTensorInfoSlot):
            given = [*given, *fields]
        return table(self, n_slots, given, what)

    monkeypatch.setattr(writer._Writer, "table", with_fields)

"""Builds the ExecuTorch program: values, kernel and delegate calls, and the memory plan.

Contract of the program kiln writes:
- one execution plan "forward", one chain, instructions in the partitioner's schedule;
- CPU ops are KernelCalls (kiln.program.kernels names them): the schema's arguments, the out
  tensor, then it again as the returned value; a quantized op is one integer cortex_m kernel
  where kiln.program.integer_ops finds one for its arguments, else its float kernel between
  dequantizes and a quantize (Program.cpu_kernels says which, and why); an op with several
  out tensors (sort, topk) lists them, then one TensorList of them as the returned value, as
  ExecuTorch's emitter does; an elementwise op no kernel takes with its operands' dtypes reads
  them converted first, as PyTorch's type promotion does (kiln.program.promotion: an
  aten::_to_copy call per converted operand, into a planned tensor); each NPU partition is one
  DelegateCall to "EthosUBackend" whose args are its inputs then its outputs;
- every non-constant tensor is memory-planned in buffer 1 (buffer 0 is
  ExecuTorch's reserved entry) at a 16-byte aligned offset; tensors whose
  lifetimes overlap never share bytes;
- constant tensors (weights of CPU ops) are constant data;
- a program's state (kiln.graph.State) is ExecuTorch's shared mutable buffers: each state buffer
  at one offset of buffer 2 in every method (state_layout: the buffers in name order, each
  16-byte aligned), its value before the call and after it two tensors at that offset; the plan's
  inputs and outputs are the model's own only. So that the two share bytes, nothing reads the
  value before once the value after is being written (build refuses a program otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from kiln.errors import ProgramError
from kiln.graph import DTYPES, Graph, Op, State, Value, dequantize_array
from kiln.partition.partitioner import Partition, Partitioning
from kiln.program import integer_ops, promotion
from kiln.program.kernels import KERNELS, Kernel, kernel_for
from kiln.program.kernels.core import argument
from kiln.pte.schema import SCALAR_TYPES
from kiln.vocabulary import DEQUANTIZE, QUANTIZE

ALIGNMENT = 16  # bytes, every planned tensor's offset
_TORCH = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32}


@dataclass
class Evalue:
    kind: str  # "tensor", "int", "double", "bool", "string", "null", "int_list", "double_list", "tensor_list"
    # Value for tensors, a number, value indices (int_list, tensor_list) or floats (double_list)
    value: object = None


def tensor_args(values: list[Evalue], args: list[int]) -> list[int]:
    """An instruction's arguments with each tensor list replaced by its tensors: the values it
    reads and writes."""
    return [j for i in args for j in (values[i].value if values[i].kind == "tensor_list" else [i])]


@dataclass
class Instruction:
    kind: str  # "kernel" or "delegate"
    index: int  # operator index or delegate index
    args: list[int]  # value indices


@dataclass
class Program:
    values: list[Evalue]
    inputs: list[int]
    outputs: list[int]
    instructions: list[Instruction]
    operators: list[tuple[str, str]]  # (name, overload)
    delegates: list[Partition]  # in delegate index order
    offsets: dict[int, int]  # Value id -> byte offset in planned buffer 1
    planned_size: int  # bytes of planned buffer 1
    constants: dict[int, np.ndarray] = field(default_factory=dict)  # Value id -> data
    state: dict[int, tuple[str, int]] = field(default_factory=dict)  # Value id -> (state name, offset in buffer 2)
    state_size: int = 0  # bytes of buffer 2 (0: the program has no state)
    # Each quantized op on the CPU by node name: {"kernel": operator, "arithmetic": "integer" or
    # "float", and for float "why": why no integer kernel takes it}.
    cpu_kernels: dict[str, dict] = field(default_factory=dict)
    integer_kernels: bool = True  # whether quantized CPU ops could take integer kernels (build's argument)

    def tensor_index(self, value: Value) -> int:
        for i, ev in enumerate(self.values):
            if ev.kind == "tensor" and ev.value is value:
                return i
        raise KeyError(value.name)


class _Builder:
    def __init__(self, integer_kernels: bool = True):
        self.integer_kernels = integer_kernels  # False: every quantized CPU op in float (CompileSpec.integer_kernels)
        self.values: list[Evalue] = []
        self.tensors: dict[int, int] = {}  # Value id -> value index
        self.operators: list[tuple[str, str]] = []
        self.instructions: list[Instruction] = []
        self.constants: dict[int, np.ndarray] = {}
        self.cpu_kernels: dict[str, dict] = {}

    def tensor(self, value: Value) -> int:
        if id(value) not in self.tensors:
            self.tensors[id(value)] = len(self.values)
            self.values.append(Evalue("tensor", value))
            if value.is_constant:
                self.constants[id(value)] = value.data
        return self.tensors[id(value)]

    def scalar(self, x) -> int:
        if x is None:
            kind = "null"
        elif isinstance(x, bool):
            kind = "bool"
        elif isinstance(x, int):
            kind = "int"
        elif isinstance(x, float):
            kind = "double"
        elif isinstance(x, str):  # gelu's approximate, div's rounding_mode
            kind = "string"
        elif isinstance(x, (list, tuple)) and all(isinstance(i, int) for i in x):
            items = [self.scalar(int(i)) for i in x]
            self.values.append(Evalue("int_list", items))
            return len(self.values) - 1
        elif isinstance(x, (list, tuple)) and all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in x):
            kind, x = "double_list", [float(i) for i in x]
        elif isinstance(x, Value):
            return self.tensor(x)
        elif isinstance(x, (list, tuple)) and all(isinstance(i, Value) for i in x):
            items = [self.tensor(v) for v in x]
            self.values.append(Evalue("tensor_list", items))
            return len(self.values) - 1
        else:  # a torch dtype argument: kernels take its ScalarType code
            self.values.append(Evalue("int", int(SCALAR_TYPES[DTYPES[x]])))
            return len(self.values) - 1
        self.values.append(Evalue(kind, x))
        return len(self.values) - 1

    def operator(self, kernel: Kernel) -> int:
        key = (kernel.name, kernel.overload)
        if key not in self.operators:
            self.operators.append(key)
        return self.operators.index(key)

    def kernel_call(self, op: Op, reason: str | None):
        integer = integer_ops.integer_call(op) if op.quantized and self.integer_kernels else None
        if isinstance(integer, integer_ops.IntegerCall):
            self.integer_call(op, integer)
            return
        kernel = kernel_for(op)
        promoted = promotion.promoted(op) if kernel is None else None  # PyTorch's type promotion
        if promoted is not None and (kernel := kernel_for(promoted[0])) is not None:
            op, conversions = promoted
            for source, converted in conversions:
                self.cast(source, converted)
        if kernel is None:
            raise ProgramError(
                f"node {op.name} ({op.op_type}) cannot run on the NPU ({reason}) and kiln has no CPU kernel for "
                f"{'it' if op.target not in KERNELS else 'these arguments'}; "
                "change the model, or check the report for what the NPU supports"
            )
        if op.reads_integers:
            if integer is not None:
                self.cpu_kernels[op.name] = {"kernel": kernel.name, "arithmetic": "float", "why": integer}
            self.quantized_on_cpu(op, kernel)
            return
        outputs = op.outputs if kernel.outputs > 1 else op.output
        self.call(kernel, [self.scalar(argument(op, a)) for a in kernel.schema_args], outputs)

    def integer_call(self, op: Op, call: integer_ops.IntegerCall):
        """A quantized op as its integer kernel (after the calls it needs first, e.g. a pad)."""
        for kernel, args, out in call.before:
            self.call(kernel, [self.scalar(a) for a in args], out)
        self.call(call.kernel, [self.scalar(a) for a in call.args], op.output)
        self.cpu_kernels[op.name] = {"kernel": call.kernel.name, "arithmetic": "integer"}

    def call(self, kernel: Kernel, args: list[int], output: Value | list[Value]):
        """A KernelCall: the schema's arguments, the out tensor, then it again as the result; with
        several out tensors (a list), the result is one TensorList of them (ExecuTorch's emitter)."""
        if not isinstance(output, list):
            out = self.tensor(output)
            self.instructions.append(Instruction("kernel", self.operator(kernel), args + [out, out]))
            return
        outs = [self.tensor(v) for v in output]
        self.values.append(Evalue("tensor_list", outs))
        self.instructions.append(Instruction("kernel", self.operator(kernel), args + outs + [len(self.values) - 1]))

    def cast(self, source: Value, out: Value):
        """out = source converted to out's dtype (aten::_to_copy, PyTorch's conversion)."""
        to_copy = KERNELS[torch.ops.aten._to_copy.default]
        self.call(to_copy, [self.scalar(source), self.scalar(False), self.scalar(None)], out)

    def quantized_on_cpu(self, op: Op, kernel: Kernel):
        """A quantized op the NPU does not run: dequantize its integer inputs, run the
        float kernel, then its fused activation, and quantize, exactly as PT2E's reference.
        An op of quantized inputs whose result is not quantized (a comparison's bool, argmax's
        indices) is the float kernel's result as it is (int32 indices through the kernel's int64)."""

        def float_of(v: Value) -> Value:
            if v.qparams is None:  # an integer or bool operand (indices, a condition) passes as it is
                return v
            if v.is_constant:
                return Value(v.name + "_f", v.shape, "float32", data=dequantize_array(v.data, v.qparams))
            f = Value(v.name + "_f", v.shape, "float32")
            self.call(KERNELS[DEQUANTIZE[0]], self.qargs(v, v), f)
            return f

        floats = {id(v): float_of(v) for v in op.inputs}
        args = []
        for a in kernel.schema_args:
            x = argument(op, a)
            if isinstance(x, (list, tuple)) and any(isinstance(v, Value) for v in x):
                x = [floats[id(v)] for v in x]
            args.append(self.scalar(floats[id(x)] if isinstance(x, Value) else x))
        out = op.output
        if out.qparams is None and out.dtype == "int32":  # argmax's NPU-width indices: the kernel writes int64
            wide = Value(op.name + "_wide", out.shape, "int64")
            self.call(kernel, args, wide)
            self.cast(wide, out)
            return
        if out.qparams is None:
            self.call(kernel, args, out)
            return
        result = Value(op.name + "_f", out.shape, "float32")
        self.call(kernel, args, result)
        if op.activation is not None:
            low, high = op.activation
            clamped = Value(op.name + "_act", out.shape, "float32")
            self.call(
                KERNELS[torch.ops.aten.hardtanh.default],
                [self.tensor(result), self.scalar(float(max(low, -3.0e38))), self.scalar(float(min(high, 3.0e38)))],
                clamped,
            )
            result = clamped
        self.call(KERNELS[QUANTIZE[0]], self.qargs(result, out), out)

    def qargs(self, source: Value, quantized: Value) -> list[int]:
        """quantize/dequantize arguments: source, then the integer value's scale, zero point, range and type."""
        qp = quantized.qparams
        return [
            self.scalar(x) for x in (source, float(qp.scale), qp.zero_point, qp.qmin, qp.qmax, _TORCH[quantized.dtype])
        ]


def state_layout(states: list[State]) -> tuple[dict[str, int], int]:
    """Each state buffer's offset in buffer 2 (in name order, 16-byte aligned), and its size."""
    offsets, size = {}, 0
    for s in sorted(states, key=lambda s: s.name):
        offsets[s.name] = size
        size = _align(size + s.input.nbytes())
    return offsets, size


def build(graph: Graph, partitioning: Partitioning, integer_kernels: bool = True) -> Program:
    """The program of `graph` as partitioned; `integer_kernels` False runs every quantized op kept
    on the CPU in float between a dequantize and a quantize (CompileSpec.integer_kernels)."""
    b = _Builder(integer_kernels)
    stateful = {id(s.input) for s in graph.state} | {id(s.output) for s in graph.state if s.output is not None}
    inputs = [b.tensor(v) for v in graph.inputs if id(v) not in stateful]
    reasons = {id(p.op): p.reason for p in partitioning.placements}
    delegates: list[Partition] = []
    for unit in partitioning.schedule:
        if isinstance(unit, Partition):
            args = [b.tensor(v) for v in unit.inputs] + [b.tensor(v) for v in unit.outputs]
            b.instructions.append(Instruction("delegate", len(delegates), args))
            delegates.append(unit)
        else:
            b.kernel_call(unit, reasons[id(unit)])
    for v in graph.inputs:
        b.tensor(v)  # a state nothing reads is still a value of the plan
    outputs = [b.tensor(v) for v in graph.outputs if id(v) not in stateful]
    state = _place_state(graph, b)
    offsets, size = plan_memory(b.values, b.instructions, inputs, outputs, skip=set(state))
    _, state_size = state_layout(graph.state)
    return Program(
        b.values,
        inputs,
        outputs,
        b.instructions,
        b.operators,
        delegates,
        offsets,
        size,
        b.constants,
        state,
        state_size,
        b.cpu_kernels,
        integer_kernels,
    )


def _place_state(graph: Graph, b: _Builder) -> dict[int, tuple[str, int]]:
    """The state's values at their offsets in buffer 2 (state_layout). Raises ProgramError where an
    instruction reads a state's value before the call after one has begun writing its value
    after: the two share bytes."""
    layout, _ = state_layout(graph.state)
    placed: dict[int, tuple[str, int]] = {}
    touches = [set(tensor_args(b.values, i.args)) for i in b.instructions]  # the values each instruction uses
    for s in graph.state:
        placed[id(s.input)] = (s.name, layout[s.name])
        if s.output is None or s.output is s.input:
            continue
        if s.output.shape != s.input.shape or s.output.dtype != s.input.dtype or s.output.qparams != s.input.qparams:
            raise ProgramError(
                f"state {s.name}: the method writes it as {s.output.dtype}{list(s.output.shape)} "
                f"({s.output.qparams}), it holds {s.input.dtype}{list(s.input.shape)} ({s.input.qparams})"
            )
        placed[id(s.output)] = (s.name, layout[s.name])
        before, after = b.tensors[id(s.input)], b.tensors[id(s.output)]
        last_read = max((k for k, t in enumerate(touches) if before in t), default=-1)
        first_write = min((k for k, t in enumerate(touches) if after in t), default=len(touches))
        if last_read > first_write:
            raise ProgramError(
                f"state {s.name}: instruction {last_read} reads the value it held before the call after "
                f"instruction {first_write} began writing its new value; kiln keeps both in one place"
            )
    return placed


def plan_memory(
    values: list[Evalue], instructions: list[Instruction], inputs: list[int], outputs: list[int], skip=frozenset()
):
    """Offsets for every non-constant tensor but those whose Value ids `skip` holds (the state's):
    greedy, largest first, each placed at the lowest aligned offset free for its whole lifetime.
    Inputs live from the start, outputs to the end."""
    end = len(instructions)
    first: dict[int, int] = {i: -1 for i in inputs}
    last: dict[int, int] = {i: end for i in outputs}
    for step, instruction in enumerate(instructions):
        for i in tensor_args(values, instruction.args):
            if values[i].kind == "tensor":
                first.setdefault(i, step)
                last[i] = max(last.get(i, step), step)
    for i in inputs:
        last.setdefault(i, -1)  # an input nothing reads still gets its bytes
    tensors = [i for i in first if not values[i].value.is_constant and id(values[i].value) not in skip]
    tensors.sort(key=lambda i: (-values[i].value.nbytes(), i))
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    offsets: dict[int, int] = {}
    size = 0
    for i in tensors:
        nbytes = values[i].value.nbytes()
        begin, finish = first[i], last[i]
        offset = 0
        for o, s, f, f_end in sorted(placed):
            if f > finish or f_end < begin:
                continue  # lifetimes do not overlap
            if offset + nbytes <= o:
                break
            offset = max(offset, _align(o + s))
        placed.append((offset, nbytes, begin, finish))
        offsets[id(values[i].value)] = offset
        size = max(size, offset + nbytes)
    return offsets, _align(size)


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT

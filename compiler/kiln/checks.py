"""Health checks between the compile driver's stages.

As Vela's compiler_driver verifies its graph after each pass, kiln.compile runs these after
its stages. Each check is a small function of one stage's result that returns None when its
invariant holds, else what broke; `after(stage, ...)` runs that stage's checks and turns the
first breakage into an InternalError naming the stage and the check: a bug in kiln, never
the model's fault. Every check is one pass over the ops and values (the live-buffer check
sorts them once): all of them take about 2 ms on mobilenet_v2, whose compile takes seconds.

    stage       what holds after it
    fold        values_produced_before_use, producers_and_users_agree,
                shapes_and_dtypes_consistent, quantized_values_have_qparams,
                floats_meet_integers_at_quantize_ops
    partition   every_op_placed_once, partitions_hold_quantized_ops,
                partition_boundaries_complete, partitions_acyclic
    lower       one_tosa_graph_per_partition
    vela        delegate_io_matches_partitions
    program     instructions_reference_valid_indices, every_tensor_planned,
                values_written_before_read, live_buffers_disjoint
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from kiln.errors import InternalError
from kiln.graph import DTYPES, QRANGE, Graph, Op
from kiln.lower.vela import VelaResult
from kiln.partition.partitioner import Partition, Partitioning, boundary
from kiln.program.builder import ALIGNMENT, Program, tensor_args
from kiln.program.kernels import by_name
from kiln.vocabulary import DEQUANTIZE, INDEXED, QUANTIZE

KNOWN_DTYPES = frozenset(DTYPES.values())


# ---- after fold: kiln's graph ---------------------------------------------------------------------
def values_produced_before_use(graph: Graph) -> str | None:
    """Ops are in execution order: each reads only graph inputs, constants and values an
    earlier op produced; each value is produced once; every program output is produced."""
    ready = {id(v) for v in graph.inputs}
    for op in graph.ops:
        for v in op.inputs:
            if not v.is_constant and id(v) not in ready:
                return f"{op.name} ({op.op_type}) reads {v.name} before any op produces it"
        for v in op.outputs:
            if id(v) in ready:
                return f"{v.name} is produced twice (again by {op.name})"
            ready.add(id(v))
    for v in graph.outputs:
        if not v.is_constant and id(v) not in ready:
            return f"program output {v.name} is never produced"
    return None


def producers_and_users_agree(graph: Graph) -> str | None:
    """Each value's producer is the op that lists it as an output, and its users are
    exactly the ops that read it (the partitioner walks these links)."""
    readers: dict[int, list[Op]] = {}
    for op in graph.ops:
        for v in op.outputs:
            if v.producer is not op:
                return f"{v.name} is an output of {op.name} but names {v.producer!r} as its producer"
        for v in dict.fromkeys(op.inputs):
            readers.setdefault(id(v), []).append(op)
    for v in graph.values():
        users = readers.get(id(v), [])
        if {id(u) for u in v.users} != {id(u) for u in users}:
            return f"{v.name} lists users {v.users} but is read by {users}"
        if v.producer is None and not v.is_constant and not any(v is i for i in graph.inputs):
            return f"{v.name} has no producer and is neither a constant nor a program input"
    return None


def shapes_and_dtypes_consistent(graph: Graph) -> str | None:
    """Every value has a known dtype and a shape of non-negative ints; a constant's array has
    that shape and dtype; quantize and dequantize keep the shape and turn float32 into the
    integer type of their quantization parameters and back."""
    for v in graph.values():
        if v.dtype not in KNOWN_DTYPES:
            return f"{v.name} has dtype {v.dtype!r}"
        if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in v.shape):
            return f"{v.name} has shape {v.shape}"
        if v.is_constant and (tuple(v.data.shape) != tuple(v.shape) or v.data.dtype != np.dtype(v.dtype)):
            return f"constant {v.name} is {v.dtype}{list(v.shape)} but holds {v.data.dtype}{list(v.data.shape)}"
    for op in graph.ops:
        if op.target in QUANTIZE or op.target in DEQUANTIZE:
            source, result = op.inputs[0], op.output
            floating, integer = (source, result) if op.target in QUANTIZE else (result, source)
            if source.shape != result.shape:
                return f"{op.name} turns shape {list(source.shape)} into {list(result.shape)}"
            if floating.dtype != "float32" or integer.dtype not in QRANGE:
                return f"{op.name} ({op.op_type}) turns {source.dtype} into {result.dtype}"
    return None


def quantized_values_have_qparams(graph: Graph) -> str | None:
    """Every value a quantized op reads or writes, every quantize output and every dequantize
    input has quantization parameters, of an integer type whose range holds [qmin, qmax];
    per-channel scales have one entry per channel."""
    for op in graph.ops:
        if op.target in QUANTIZE:
            values = [op.output]
        elif op.target in DEQUANTIZE:
            values = [op.inputs[0]]
        elif op.quantized:  # but the integer indices and bool masks (constant or not) it reads as they are
            indices = op.inputs[1:2] if op.target in INDEXED else []  # a gather's or scatter's, constant or not
            values = [
                v
                for v in op.inputs
                if all(v is not i for i in indices)
                and v.dtype != "bool"
                and (v.is_constant or v.dtype not in ("int32", "int64"))
            ] + op.outputs
        else:
            continue
        for v in values:
            qp = v.qparams
            if qp is None:
                return f"{v.name}, which {op.name} ({op.op_type}) reads or writes, has no quantization parameters"
            low, high = QRANGE.get(v.dtype, (1, 0))
            if not low <= qp.qmin <= qp.qmax <= high:
                return f"{v.name} is {v.dtype} with quantization range [{qp.qmin}, {qp.qmax}]"
            if qp.axis is not None and np.size(qp.scale) != v.shape[qp.axis]:
                return f"{v.name} has {np.size(qp.scale)} scales for {v.shape[qp.axis]} channels"
    return None


def floats_meet_integers_at_quantize_ops(graph: Graph) -> str | None:
    """Float ops read no quantized value: explicit quantize and dequantize ops stand exactly
    where float and integer values meet."""
    for op in graph.ops:
        if op.reads_integers or op.target in QUANTIZE or op.target in DEQUANTIZE:
            continue
        for v in op.inputs:
            if v.qparams is not None:
                return f"float op {op.name} ({op.op_type}) reads quantized {v.name}"
    return None


# ---- after partition ------------------------------------------------------------------------------
def every_op_placed_once(parts: Partitioning) -> str | None:
    """One placement per graph op, in graph order; a partition holds exactly the ops placed
    in it; the schedule lists every partition and every CPU op once."""
    ops = parts.graph.ops
    if [id(p.op) for p in parts.placements] != [id(op) for op in ops]:
        return "the placements are not the graph's ops in order"
    placed: dict[int | None, list[int]] = {}
    for p in parts.placements:
        placed.setdefault(p.partition, []).append(id(p.op))
    for i, partition in enumerate(parts.partitions):
        if partition.index != i or [id(op) for op in partition.ops] != placed.get(i):
            return f"partition {i} holds other ops than those placed in it"
    if set(placed) - {None} != set(range(len(parts.partitions))):
        return f"ops are placed in partitions {sorted(k for k in placed if k is not None)}"
    units = [id(p) for p in parts.partitions] + [id(p.op) for p in parts.placements if p.partition is None]
    if sorted(id(u) for u in parts.schedule) != sorted(units):
        return "the schedule does not list every partition and CPU op exactly once"
    return None


def partitions_hold_quantized_ops(parts: Partitioning) -> str | None:
    """The NPU computes in integers: every op in a partition reads integer values (Op.reads_integers;
    no quantize or dequantize), and what a partition takes and returns are quantized integer values,
    bools, argmax's indices or a gather's or scatter's checked ones, or int32 tensors (an int32 product's),
    never constants."""
    for partition in parts.partitions:
        for op in partition.ops:
            int32_arithmetic = all(v.dtype == "int32" for v in op.inputs + op.outputs)
            if not (op.reads_integers or int32_arithmetic) or op.target in QUANTIZE or op.target in DEQUANTIZE:
                return f"partition {partition.index} holds {op.name} ({op.op_type}), which is not quantized"
        for v in partition.inputs + partition.outputs:
            if v.is_constant or (v.qparams is None and v.dtype not in ("bool", "int32")):
                return f"partition {partition.index} exchanges {v.name}, not a quantized runtime value"
    return None


def partition_boundaries_complete(parts: Partitioning) -> str | None:
    """Each partition takes and returns exactly what its ops exchange with the rest of the
    graph, in the same order, as kiln.partition.partitioner.boundary defines it. The
    partitioner builds partitions with that function: this finds inputs or outputs changed
    after they were built."""
    for partition in parts.partitions:
        inputs, outputs = boundary(partition.ops, parts.graph)
        for name, have, want in (("inputs", partition.inputs, inputs), ("outputs", partition.outputs, outputs)):
            if [id(v) for v in have] != [id(v) for v in want]:
                return (
                    f"partition {partition.index} lists {name} {[v.name for v in have]}, "
                    f"its ops need {[v.name for v in want]}"
                )
    return None


def partitions_acyclic(parts: Partitioning) -> str | None:
    """The schedule runs each partition and CPU op after everything it reads, so partitions
    and CPU ops depend on each other without a cycle (each partition is one delegate call).
    The one cycle check: faced with a cycle, the partitioner's scheduler orders what it can and
    appends the rest, leaving this check to report it."""
    done = {id(v) for v in parts.graph.inputs}
    for unit in parts.schedule:
        ops = unit.ops if isinstance(unit, Partition) else [unit]
        produced = {id(v) for op in ops for v in op.outputs}
        for op in ops:
            for v in op.inputs:
                if not v.is_constant and id(v) not in done and id(v) not in produced:
                    what = f"partition {unit.index}" if isinstance(unit, Partition) else f"CPU op {unit.name}"
                    return f"{what} reads {v.name}, which only a later step produces: a cycle"
        done |= produced
    return None


# ---- after lower and vela -------------------------------------------------------------------------
def one_tosa_graph_per_partition(parts: Partitioning, tosa: Sequence[bytes]) -> str | None:
    """One non-empty TOSA flatbuffer per partition, in partition order."""
    if len(tosa) != len(parts.partitions) or not all(tosa):
        return f"{len(tosa)} TOSA graphs ({sum(1 for t in tosa if not t)} empty) for {len(parts.partitions)} partitions"
    return None


def delegate_io_matches_partitions(parts: Partitioning, results: Sequence[VelaResult]) -> str | None:
    """Vela's command stream for each partition takes and returns as many tensors as the
    partition, each of the same size in bytes."""
    if len(results) != len(parts.partitions):
        return f"{len(results)} Vela results for {len(parts.partitions)} partitions"
    for partition, result in zip(parts.partitions, results):
        for name, values, tensors in (
            ("inputs", partition.inputs, result.inputs),
            ("outputs", partition.outputs, result.outputs),
        ):
            sizes = [v.nbytes() for v in values]
            npu = [int(np.prod(t.shape, dtype=np.int64)) * t.elem_size for t in tensors]
            if sizes != npu:
                return f"partition {partition.index} {name} are {sizes} bytes; Vela's stream has {npu}"
    return None


# ---- after program --------------------------------------------------------------------------------
def instructions_reference_valid_indices(program: Program) -> str | None:
    """Every instruction names an existing operator or delegate and existing values; the
    program's inputs and outputs are tensor values."""
    n = len(program.values)
    for step, instruction in enumerate(program.instructions):
        table = program.operators if instruction.kind == "kernel" else program.delegates
        if instruction.kind not in ("kernel", "delegate") or not 0 <= instruction.index < len(table):
            return f"instruction {step} calls {instruction.kind} {instruction.index} of {len(table)}"
        if not all(0 <= a < n for a in instruction.args):
            return f"instruction {step} names values {instruction.args}; the program has {n}"
    for i in program.inputs + program.outputs:
        if not 0 <= i < n or program.values[i].kind != "tensor":
            return f"program input or output {i} is not a tensor value"
    return None


def every_tensor_planned(program: Program) -> str | None:
    """Every constant tensor has its data; every other tensor has a 16-byte aligned offset
    inside the planned buffer, or inside the state's buffer for the state's tensors."""
    for i, ev in enumerate(program.values):
        if ev.kind != "tensor":
            continue
        v = ev.value
        if v.is_constant:
            if id(v) not in program.constants:
                return f"constant value {i} ({v.name}) has no data"
            continue
        offset, size, buffer = program.offsets.get(id(v)), program.planned_size, "planned buffer"
        if id(v) in program.state:
            offset, size, buffer = program.state[id(v)][1], program.state_size, "state buffer"
        if offset is None:
            return f"value {i} ({v.name}) has no place in the planned buffer"
        if offset % ALIGNMENT or offset < 0 or offset + v.nbytes() > size:
            return (
                f"value {i} ({v.name}): {v.nbytes()} bytes at offset {offset} of a "
                f"{size}-byte {buffer} ({ALIGNMENT}-byte aligned)"
            )
    return None


def _reads_and_writes(program: Program, instruction) -> tuple[list[int], list[int]]:
    """The values an instruction reads and writes: a kernel's arguments, then its out tensors
    (then the result: the out tensor again, or a TensorList of several); a delegate's inputs,
    then outputs."""
    if instruction.kind == "kernel":
        kernel = by_name().get(program.operators[instruction.index])
        n = kernel.outputs if kernel is not None else 1
        return tensor_args(program.values, instruction.args[: -1 - n]), instruction.args[-1 - n : -1]
    n = len(program.delegates[instruction.index].inputs)
    return instruction.args[:n], instruction.args[n:]


def values_written_before_read(program: Program) -> str | None:
    """Instructions run in data order: each reads only program inputs, constants and values
    an earlier instruction wrote; every program output is written."""
    state_inputs = {i for i, ev in enumerate(program.values) if ev.kind == "tensor" and id(ev.value) in program.state}
    written = set(program.inputs) | state_inputs  # the state holds what the last call left
    for step, instruction in enumerate(program.instructions):
        reads, outs = _reads_and_writes(program, instruction)
        for i in reads:
            ev = program.values[i]
            if ev.kind == "tensor" and not ev.value.is_constant and i not in written:
                return f"instruction {step} reads value {i} ({ev.value.name}) before any instruction writes it"
        written.update(outs)
    missing = [i for i in program.outputs if i not in written]
    return f"program outputs {missing} are never written" if missing else None


def _lifetimes(program: Program) -> dict[int, tuple[int, int]]:
    """Value index -> (first, last) instruction that touches it; inputs from -1, outputs to the end."""
    end = len(program.instructions)
    span = {i: (-1, -1) for i in program.inputs}
    for step, instruction in enumerate(program.instructions):
        for i in tensor_args(program.values, instruction.args):
            if program.values[i].kind == "tensor" and not program.values[i].value.is_constant:
                first, last = span.get(i, (step, step))
                span[i] = (first, max(last, step))
    for i in program.outputs:
        span[i] = (span.get(i, (end, end))[0], end)
    return span


def live_buffers_disjoint(program: Program) -> str | None:
    """Tensors alive at the same time never share a byte of the planned buffer (the state's
    tensors live in their own buffer, kiln.program.builder)."""
    blocks = sorted(
        (program.offsets[id(program.values[i].value)], program.values[i].value.nbytes(), i, first, last)
        for i, (first, last) in _lifetimes(program).items()
        if id(program.values[i].value) not in program.state
    )
    for n, (offset, size, i, first, last) in enumerate(blocks):
        for other_offset, _, j, other_first, other_last in blocks[n + 1 :]:
            if other_offset >= offset + size:
                break
            if first <= other_last and other_first <= last:
                return (
                    f"values {i} and {j} ({program.values[i].value.name}, {program.values[j].value.name}) "
                    f"are alive together (instructions {first}..{last} and {other_first}..{other_last}) "
                    f"and overlap at offset {other_offset}"
                )
    return None


# ---- the driver's entry point ---------------------------------------------------------------------
CHECKS: dict[str, tuple[Callable[..., str | None], ...]] = {
    "fold": (
        values_produced_before_use,
        producers_and_users_agree,
        shapes_and_dtypes_consistent,
        quantized_values_have_qparams,
        floats_meet_integers_at_quantize_ops,
    ),
    "partition": (
        every_op_placed_once,
        partitions_hold_quantized_ops,
        partition_boundaries_complete,
        partitions_acyclic,
    ),
    "lower": (one_tosa_graph_per_partition,),
    "vela": (delegate_io_matches_partitions,),
    "program": (
        instructions_reference_valid_indices,
        every_tensor_planned,
        values_written_before_read,
        live_buffers_disjoint,
    ),
}


def after(stage: str, *results) -> None:
    """Runs the checks of `stage` on its results (as CHECKS lists them: the graph after fold;
    the partitioning after partition; it and the TOSA graphs after lower, the Vela results
    after vela; the program after program). Raises InternalError for the first that fails."""
    for check in CHECKS[stage]:
        problem = check(*results)
        if problem is not None:
            raise InternalError(
                f"internal error after the {stage} stage: {check.__name__}: {problem} "
                "(a bug in kiln; please report it with the model)"
            )

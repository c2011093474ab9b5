"""kiln's compiled program (kiln.program.builder.Program and its delegates' Vela results) as a
.pte: the PteProgram it makes, written by kiln.pte.writer (kiln.pte.schema holds the format).

Each delegate is "EthosUBackend" with the vela_bin_stream payload. The TOSA
graph each delegate was compiled from travels as named data under kiln.pte.schema's
tosa_key ("kiln/tosa/<delegate index>" in plan forward): `kiln run-host` runs it on
tosa_reference_model; runtimes look data up by key and ignore keys they do not know.
"""

from __future__ import annotations

import numpy as np

from kiln.lower import ethosu_payload
from kiln.lower.vela import VelaResult
from kiln.program.builder import Program
from kiln.pte.schema import (
    PLANNED_MEMORY_ID,
    SCALAR_TYPES,
    STATE_MEMORY_ID,
    AllocationInfo,
    BackendDelegate,
    Bool,
    Chain,
    DataLocation,
    DataReference,
    DelegateCall,
    DelegateCompileSpec,
    Double,
    DoubleList,
    EValue,
    ExecutionPlan,
    Int,
    IntList,
    KernelCall,
    Null,
    Operator,
    PteProgram,
    String,
    Tensor,
    TensorList,
    tosa_key,
)
from kiln.pte.writer import serialize

# Each delegate's compile specs: the two ExecuTorch 1.5.1's Arm flow writes (its runtime
# reads none of them), then kiln's own (see ethosu_payload).
COMPILE_SPECS = (
    ("target", "{target}"),
    ("output_format", "vela"),
    (ethosu_payload.MEMORY_MODE_SPEC, "{memory_mode}"),
    (ethosu_payload.FAST_SCRATCH_SPEC, "{fast_scratch_size}"),
)


# kiln's value kinds (kiln.program.builder) that box one value: its .pte value type and the
# Python type of what it holds.
_BOXED = {
    "int": (Int, int),
    "double": (Double, float),
    "string": (String, str),
    "bool": (Bool, bool),
    "int_list": (IntList, list),
    "double_list": (DoubleList, list),
    "tensor_list": (TensorList, list),
}


def write(program: Program, vela_results: list[VelaResult], tosa: list[bytes], target: str, memory_mode: str) -> bytes:
    """The .pte of `program`: plan "forward" with its values and one chain of its instructions, an
    EthosUBackend delegate per Vela result (in order), and each delegate's TOSA graph as named data."""
    return write_methods({"forward": (program, vela_results, tosa)}, target, memory_mode)


def write_methods(
    methods: dict[str, tuple[Program, list[VelaResult], list[bytes]]],
    target: str,
    memory_mode: str,
    constant_methods: dict[str, int] | None = None,
) -> bytes:
    """The .pte of several methods (name -> program, its Vela results, its TOSA graphs), one plan
    each in the given order: every plan's constants and delegate payloads in the file's shared
    lists, its TOSA graphs as named data under tosa_key(plan, delegate index). A program with state
    (kiln.program.builder) declares buffer 2, of the same size in every plan. `constant_methods`
    (name -> int) follow as ExecuTorch writes them (its LLM export's get_max_seq_len, ...): a plan
    without inputs or instructions whose one output is an Int value."""
    plans, constants, payloads, named = [], [], [], {}
    for name, (program, vela_results, tosa) in methods.items():
        values, data = _values(program, len(constants))
        constants += data
        instructions = [
            KernelCall(i.index, i.args) if i.kind == "kernel" else DelegateCall(i.index, i.args)
            for i in program.instructions
        ]
        delegates = [
            BackendDelegate(
                ethosu_payload.DELEGATE_ID,
                DataReference(DataLocation.INLINE, len(payloads) + i),
                [
                    DelegateCompileSpec(
                        k,
                        v.format(
                            target=target, memory_mode=memory_mode, fast_scratch_size=r.fast_scratch_size
                        ).encode(),
                    )
                    for k, v in COMPILE_SPECS
                ],
            )
            for i, r in enumerate(vela_results)
        ]
        payloads += [payload(r) for r in vela_results]
        sizes = [0, program.planned_size] + ([program.state_size] if program.state_size else [])
        plans.append(
            ExecutionPlan(
                name=name,
                values=values,
                inputs=program.inputs,
                outputs=program.outputs,
                chains=[Chain(program.inputs, program.outputs, instructions)],
                operators=[Operator(op, overload) for op, overload in program.operators],
                delegates=delegates,
                non_const_buffer_sizes=sizes,
            )
        )
        named.update({tosa_key(name, i): t for i, t in enumerate(tosa)})
    for name, number in (constant_methods or {}).items():
        plans.append(
            ExecutionPlan(
                name=name,
                values=[Int(number)],
                inputs=[],
                outputs=[0],
                chains=[Chain([], [0], [])],
                operators=[],
                delegates=[],
                non_const_buffer_sizes=[0],
            )
        )
    return serialize(PteProgram(plans), constants=constants, delegate_payloads=payloads, named_data=named)


def _values(program: Program, before: int = 0) -> tuple[list[EValue], list[bytes]]:
    """The plan's values, and the data of its constant tensors (data_buffer_idx i is constants[i - 1 - before]:
    `before` constants of earlier plans come first)."""
    values: list[EValue] = []
    constants: list[bytes] = []
    for ev in program.values:
        if ev.kind == "tensor":
            v = ev.value
            scalar_type = SCALAR_TYPES[v.dtype]
            common = dict(scalar_type=scalar_type, sizes=list(v.shape), dim_order=list(range(len(v.shape))))
            if v.is_constant:
                constants.append(np.ascontiguousarray(v.data).tobytes())
                values.append(Tensor(**common, data_buffer_idx=before + len(constants)))
            elif id(v) in program.state:
                name, offset = program.state[id(v)]
                values.append(Tensor(**common, allocation_info=AllocationInfo.at(STATE_MEMORY_ID, offset), name=name))
            else:
                offset = program.offsets[id(v)]
                values.append(Tensor(**common, allocation_info=AllocationInfo.at(PLANNED_MEMORY_ID, offset)))
        elif ev.kind == "null":
            values.append(Null())
        elif ev.kind in _BOXED:
            kind, content = _BOXED[ev.kind]
            values.append(kind(content(ev.value)))
        else:
            raise ValueError(f"unknown value kind {ev.kind}")
    return values, constants


def payload(result: VelaResult) -> bytes:
    """The vela_bin_stream of one Vela compilation."""
    return ethosu_payload.encode(
        result.cmd_data, result.weight_data, result.scratch_size, result.inputs, result.outputs
    )

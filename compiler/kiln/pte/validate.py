"""The cross-references a .pte's program must keep: every index refers to something, every
planned tensor fits its buffer. kiln.pte.writer checks a program against them before writing,
kiln.pte.reader after reading; either raises PteError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kiln.errors import PteError
from kiln.pte.schema import (
    ELEMENT_SIZE,
    STATE_MEMORY_ID,
    DataLocation,
    DelegateCall,
    ExecutionPlan,
    FreeCall,
    Instruction,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    OptionalTensorList,
    Tensor,
    TensorList,
)


def check_index(index: int, count: int, what: str) -> None:
    if not 0 <= index < count:
        raise PteError(
            f"{what} is {index}, outside 0..{count - 1}"
            if count
            else f"{what} is {index}, but there is nothing to refer to"
        )


def check_plan(plan: ExecutionPlan, p: str, n_constants: int, delegate_targets: Mapping[DataLocation, int]) -> None:
    """Cross-references inside a plan. n_constants counts the reserved constant 0;
    delegate_targets gives, per allowed location, how many entries it can index."""
    n_values = len(plan.values)
    for i, v in enumerate(plan.values):
        at = f"{p}.values[{i}]"
        if isinstance(v, (IntList, TensorList)):
            for j, item in enumerate(v.items):
                check_index(item, n_values, f"{at}.items[{j}]")
        elif isinstance(v, OptionalTensorList):
            for j, item in enumerate(v.items):
                if item != -1:
                    check_index(item, n_values, f"{at}.items[{j}]")
        elif isinstance(v, Tensor):
            _check_tensor(v, at, n_constants, plan.non_const_buffer_sizes)
    for name in ("inputs", "outputs"):
        for j, index in enumerate(getattr(plan, name)):
            check_index(index, n_values, f"{p}.{name}[{j}]")
    for c, chain in enumerate(plan.chains):
        at = f"{p}.chains[{c}]"
        for name in ("inputs", "outputs"):
            for j, index in enumerate(getattr(chain, name)):
                check_index(index, n_values, f"{at}.{name}[{j}]")
        if chain.stacktrace is not None and len(chain.stacktrace) != len(chain.instructions):
            raise PteError(
                f"{at}.stacktrace has {len(chain.stacktrace)} entries for {len(chain.instructions)} instructions"
            )
        for k, ins in enumerate(chain.instructions):
            _check_instruction(ins, f"{at}.instructions[{k}]", plan, len(chain.instructions))
    for d, delegate in enumerate(plan.delegates):
        ref, at = delegate.processed, f"{p}.delegates[{d}].processed"
        if ref.location not in delegate_targets:
            raise PteError(
                f"{at}.location is {ref.location!r}, expected one of {[loc.name for loc in delegate_targets]}"
            )
        check_index(ref.index, delegate_targets[ref.location], f"{at}.index")


def check_state(plans: Sequence[ExecutionPlan]) -> None:
    """The program's state arena (schema.STATE_MEMORY_ID): every plan that declares it declares
    the same size, and a state tensor named in several plans (Tensor.name, extra_tensor_info's
    fully_qualified_name) has the same offset and size in each. (Each lies inside its plan's
    buffer: check_plan.)"""
    arena: tuple[int, int] | None = None  # (plan, size) of the first plan declaring it
    where: dict[str, tuple[int, int, int]] = {}  # name -> (plan, offset, nbytes)
    for i, plan in enumerate(plans):
        if len(plan.non_const_buffer_sizes) > STATE_MEMORY_ID:
            size = plan.non_const_buffer_sizes[STATE_MEMORY_ID]
            arena = arena or (i, size)
            if size != arena[1]:
                raise PteError(
                    f"execution_plan[{i}].non_const_buffer_sizes[{STATE_MEMORY_ID}] is {size}, but "
                    f"execution_plan[{arena[0]}]'s is {arena[1]}: the state arena (memory id "
                    f"{STATE_MEMORY_ID}) is one buffer every method shares"
                )
        for j, v in enumerate(plan.values):
            if not (isinstance(v, Tensor) and v.allocation_info and v.allocation_info.memory_id == STATE_MEMORY_ID):
                continue
            name = v.name or ""
            here = (i, v.allocation_info.offset, v.nbytes)
            first = where.setdefault(name, here) if name else here
            if first[1:] != here[1:]:
                raise PteError(
                    f"execution_plan[{i}].values[{j}], state {name!r}: {here[2]} bytes at offset {here[1]} of the "
                    f"state arena, but {first[2]} bytes at offset {first[1]} in execution_plan[{first[0]}]"
                )


def _check_instruction(ins: Instruction, at: str, plan: ExecutionPlan, n_ins: int) -> None:
    n_values = len(plan.values)
    if isinstance(ins, KernelCall):
        check_index(ins.op_index, len(plan.operators), f"{at}.op_index")
        for j, a in enumerate(ins.args):
            check_index(a, n_values, f"{at}.args[{j}]")
    elif isinstance(ins, DelegateCall):
        check_index(ins.delegate_index, len(plan.delegates), f"{at}.delegate_index")
        for j, a in enumerate(ins.args):
            check_index(a, n_values, f"{at}.args[{j}]")
    elif isinstance(ins, MoveCall):
        check_index(ins.move_from, n_values, f"{at}.move_from")
        check_index(ins.move_to, n_values, f"{at}.move_to")
    elif isinstance(ins, JumpFalseCall):
        check_index(ins.cond_value_index, n_values, f"{at}.cond_value_index")
        check_index(ins.destination_instruction, n_ins + 1, f"{at}.destination_instruction")
    elif isinstance(ins, FreeCall):
        check_index(ins.value_index, n_values, f"{at}.value_index")
    else:
        raise PteError(f"{at} is a {type(ins).__name__}, not an instruction")


def _check_tensor(t: Tensor, at: str, n_constants: int, buffer_sizes: Sequence[int]) -> None:
    if t.scalar_type not in ELEMENT_SIZE:
        raise PteError(f"{at}.scalar_type {t.scalar_type} is not a ScalarType")
    if any(s < 0 for s in t.sizes):
        raise PteError(f"{at}.sizes {list(t.sizes)} has a negative size")
    if sorted(t.dim_order) != list(range(len(t.sizes))):
        raise PteError(f"{at}.dim_order {list(t.dim_order)} is not a permutation of the {len(t.sizes)} dimensions")
    if t.data_buffer_idx:
        if t.allocation_info is not None:
            raise PteError(
                f"{at} has both constant data and allocation_info (a mutable tensor with initial state): not supported"
            )
        check_index(t.data_buffer_idx, n_constants, f"{at}.data_buffer_idx")
    if t.allocation_info is not None:
        a = t.allocation_info
        if not 1 <= a.memory_id < len(buffer_sizes):
            raise PteError(
                f"{at}.allocation_info.memory_id is {a.memory_id}; the plan has "
                f"planned buffers 1..{len(buffer_sizes) - 1}"
            )
        if a.offset + t.nbytes > buffer_sizes[a.memory_id]:
            raise PteError(
                f"{at}: {t.nbytes} bytes at offset {a.offset} overrun planned "
                f"buffer {a.memory_id} ({buffer_sizes[a.memory_id]} bytes)"
            )

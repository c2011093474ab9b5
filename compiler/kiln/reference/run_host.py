"""`kiln run-host`: runs a .pte on the host, the reference the firmware must match bit for bit.

Kernel calls run kiln.program.kernels' numpy implementations; each Ethos-U delegate runs
the TOSA graph it was compiled from (named data kiln.pte.schema.TOSA_KEY, "kiln/tosa/<i>") on
tosa_reference_model, whose integer results are the NPU's; a delegate without one
(ExecuTorch's Arm flow keeps none) runs its command stream on kiln's NPU model. Inputs and outputs
are raw little-endian bytes in the program's order and types.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from kiln.lower import ethosu_payload
from kiln.pte import schema as pte
from kiln.errors import HostError, NpuConfigError, UsageError
from kiln.program.kernels import by_name


@contextmanager
def quiet_native_output():
    """tosa_reference_model's C++ core prints a version notice for every graph it loads."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)


def _dtype(tensor: pte.Tensor):
    try:
        return pte.NUMPY_DTYPES[tensor.scalar_type]
    except KeyError:
        raise HostError(f"tensors of scalar type {tensor.scalar_type.name} are not supported") from None


def run(data: bytes, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Runs plan "forward" of the .pte `data` on `inputs` (arrays of the input types and shapes)."""
    return _run(pte.deserialize(data), inputs)


def _run(f: pte.PteFile, inputs: list[np.ndarray]) -> list[np.ndarray]:
    plan = f.program.execution_plans[0]
    named = f.named()
    kernels = by_name()
    slots: dict[int, object] = {}
    for i, value in enumerate(plan.values):
        if isinstance(value, pte.Tensor):
            raw = f.tensor_data(value)
            if raw is not None:
                slots[i] = np.frombuffer(raw, _dtype(value)).reshape(value.sizes)
        elif isinstance(value, (pte.Int, pte.Double, pte.Bool, pte.String)):
            slots[i] = value.value
        elif isinstance(value, pte.Null):
            slots[i] = None
        elif isinstance(value, pte.IntList):
            slots[i] = [plan.values[j].value for j in value.items]
        elif isinstance(value, pte.DoubleList):
            slots[i] = list(value.items)
        elif isinstance(value, pte.TensorList):  # its tensors, read when a kernel runs
            slots[i] = value
    if len(inputs) != len(plan.inputs):
        raise UsageError(f"the program takes {len(plan.inputs)} inputs, {len(inputs)} given")
    for i, x in zip(plan.inputs, inputs):
        t = plan.values[i]
        slots[i] = np.asarray(x, _dtype(t)).reshape(t.sizes)
    for instruction in plan.chains[0].instructions:
        if isinstance(instruction, pte.KernelCall):
            op = plan.operators[instruction.op_index]
            kernel = kernels.get((op.name, op.overload))
            if kernel is None:
                raise HostError(f"no host kernel for {op.name}.{op.overload}")
            n = kernel.outputs  # n out tensors, then the result: the out tensor, or a TensorList of them
            args, outs = instruction.args[:-1 - n], instruction.args[-1 - n:-1]
            args = [[slots[j] for j in slots[a].items] if isinstance(slots.get(a), pte.TensorList) else slots.get(a)
                    for a in args]
            result = kernel.run(*args, *([_dtype(plan.values[outs[0]])] if kernel.out_dtype else []))
            for out, r in zip(outs, [result] if n == 1 else result):
                t = plan.values[out]
                slots[out] = np.asarray(r, _dtype(t)).reshape(t.sizes)
        elif isinstance(instruction, pte.DelegateCall):
            delegate = plan.delegates[instruction.delegate_index]
            payload = ethosu_payload.decode(f.delegate_payload(delegate), named)
            if pte.TOSA_KEY.format(instruction.delegate_index) in named:
                _delegate(instruction, len(payload.inputs), plan, named, slots)
            else:
                _delegate_on_npu_model(instruction, delegate, payload, plan, slots)
        else:
            raise HostError(f"instruction {type(instruction).__name__} is not supported on the host")
    return [slots[i] for i in plan.outputs]


def _delegate(call: pte.DelegateCall, n_in: int, plan: pte.ExecutionPlan, named: dict, slots: dict):
    """A kiln delegate: its TOSA graph (named data kiln/tosa/<index>) on tosa_reference_model."""
    import tosa_reference_model

    key = pte.TOSA_KEY.format(call.delegate_index)
    ins, outs = call.args[:n_in], call.args[n_in:]
    with quiet_native_output():
        results, status = tosa_reference_model.run(named[key], [slots[i] for i in ins])
    if status != tosa_reference_model.GraphStatus.TOSA_VALID:
        raise HostError(f"tosa_reference_model rejected delegate {call.delegate_index}'s graph: {status}")
    for i, r in zip(outs, results):
        t = plan.values[i]
        slots[i] = np.asarray(r, _dtype(t)).reshape(t.sizes)


def _delegate_on_npu_model(call: pte.DelegateCall, delegate: pte.BackendDelegate, payload, plan: pte.ExecutionPlan,
                           slots: dict):
    """A delegate without a TOSA graph (ExecuTorch's Arm flow writes none): its command
    stream on kiln's NPU model, for the target its compile specs name. The model is
    bit-exact with tosa_reference_model on every stream the tests compare."""
    from kiln.firmware import runner_build
    from kiln.simulator.npu.config import config_for
    from kiln.simulator.npu.standalone import run_compiled

    specs = ethosu_payload.compile_specs(delegate)
    target = specs.get(ethosu_payload.TARGET_SPEC)
    mode = ethosu_payload.compiled_memory_mode(specs)
    try:
        config = config_for(target, ethosu_payload.compiled_system_config(specs), mode)
    except NpuConfigError:
        raise HostError(f"delegate {call.delegate_index} carries no TOSA graph and names no target kiln's NPU "
                        f"model runs (target {target!r})") from None
    fast = ethosu_payload.compiled_fast_scratch(specs)
    if fast is None:  # ExecuTorch's: the mode's whole arena cache
        fast = runner_build.FAST_SCRATCH_SIZES.get(mode)
    n_in = len(payload.inputs)
    raw, result = run_compiled(payload, [slots[i] for i in call.args[:n_in]], config, fast)
    if result.fault is not None:
        raise HostError(f"delegate {call.delegate_index} faulted on kiln's NPU model: {result.fault}")
    for data, index in zip(raw, call.args[n_in:]):
        t = plan.values[index]
        slots[index] = np.frombuffer(data, _dtype(t)).reshape(t.sizes)


def run_files(pte_path: str, input_paths: list[str], output_dir: str) -> list[Path]:
    """The command: reads the .pte and raw inputs, writes output_<i>.bin; returns their paths."""
    try:
        data = Path(pte_path).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {pte_path}: {error.strerror}") from None
    f = pte.deserialize(data)
    plan = f.program.execution_plans[0]
    if len(input_paths) != len(plan.inputs):
        raise UsageError(f"{pte_path} takes {len(plan.inputs)} inputs; give one --input file for each")
    inputs = []
    for n, (path, i) in enumerate(zip(input_paths, plan.inputs)):
        t = plan.values[i]
        raw = Path(path).read_bytes()
        if len(raw) != t.nbytes:
            raise UsageError(f"input {n} ({path}) has {len(raw)} bytes; the program takes "
                             f"{t.scalar_type.name} {list(t.sizes)} = {t.nbytes} bytes")
        inputs.append(np.frombuffer(raw, _dtype(t)).reshape(t.sizes))
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, result in enumerate(_run(f, inputs)):
        path = out / f"output_{n}.bin"
        path.write_bytes(np.ascontiguousarray(result).astype(result.dtype.newbyteorder("<")).tobytes())
        paths.append(path)
    return paths

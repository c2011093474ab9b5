"""Programs of one CPU kernel call, run on the host runtime and on `kiln run-host`.

A case is (operator, overload, arguments, output shape[, output dtype]), or with Outs((shape,
dtype), ...) in place of the shape for several outputs; an argument is a
planned input tensor (In), a constant tensor (a numpy array), None, a bool, an int, a
float, a str, a list of ints, a DoubleList (Doubles), or a TensorList (Tensors of In or arrays).
run_kernel returns what the C++ kernel wrote and what kiln.program.kernels' numpy computes for
the same program (lists of them for Outs). kernel_names(family) is what a family's CASES
must cover.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from kiln.pte.schema import (
    SCALAR_TYPES,
    AllocationInfo,
    Bool,
    Chain,
    Double,
    DoubleList,
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
)
from kiln.pte.writer import serialize
from kiln.reference import run_host as host


def kernel_names(family) -> set[tuple[str, str]]:
    """(operator, overload) of every kernel of a kiln.program.kernels family module (its
    KERNELS, a tuple of kernels where the arguments choose one, any FOREIGN_KERNELS, and the
    integer module's INTEGER_KERNELS)."""
    found = getattr(family, "KERNELS", {}).values()
    every = [k for f in found for k in (f if isinstance(f, tuple) else (f,))]
    extra = (*getattr(family, "FOREIGN_KERNELS", ()), *getattr(family, "INTEGER_KERNELS", {}).values())
    return {(k.name, k.overload) for k in (*every, *extra)}


def run_tool(tool: Path, *args) -> subprocess.CompletedProcess:
    done = subprocess.run([str(tool), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert "runtime error" not in done.stderr and "AddressSanitizer" not in done.stderr, done.stderr
    return done


class In:
    """A tensor the program takes as an input (planned memory)."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)


class Doubles(tuple):
    """A DoubleList argument."""


class Tensors(tuple):
    """A TensorList argument: planned inputs (In) or constants (arrays)."""


class Outs(tuple):
    """Several out tensors, each (shape, dtype), in place of a case's output shape (sort, topk):
    the call lists them after the arguments, then one TensorList of them as the result."""


def single_kernel(name, overload, args, out_shape, out_dtype=np.float32, plan_edit=None):
    """A program of one KernelCall: tensors as planned inputs (_In) or constants
    (arrays), scalars, int lists, double lists; returns (bytes, input arrays). `out_shape`
    is an Outs for an operator with several outputs."""
    values, constants, inputs, arg_indices, arrays = [], [], [], [], []
    planned: list[tuple[int, int]] = []  # (value index, nbytes)

    def scalar_type(dtype):
        return SCALAR_TYPES[np.dtype(dtype).name]

    def add(v):
        values.append(v)
        return len(values) - 1

    def planned_tensor(shape, dtype):
        t = dict(scalar_type=scalar_type(dtype), sizes=list(shape), dim_order=list(range(len(shape))))
        planned.append((len(values), int(np.prod(shape)) * np.dtype(dtype).itemsize))
        return add(t)  # completed below, once offsets are known

    def tensor(a):
        if isinstance(a, In):
            index = planned_tensor(a.array.shape, a.array.dtype)
            inputs.append(index)
            arrays.append(a.array)
            return index
        constants.append(np.ascontiguousarray(a).tobytes())
        return add(
            Tensor(
                scalar_type=scalar_type(a.dtype),
                sizes=list(a.shape),
                dim_order=list(range(a.ndim)),
                data_buffer_idx=len(constants),
            )
        )

    for a in args:
        if isinstance(a, (In, np.ndarray)):
            index = tensor(a)
        elif isinstance(a, Tensors):
            index = add(TensorList([tensor(t) for t in a]))
        elif a is None:
            index = add(Null())
        elif isinstance(a, bool):
            index = add(Bool(a))
        elif isinstance(a, int):
            index = add(Int(a))
        elif isinstance(a, float):
            index = add(Double(a))
        elif isinstance(a, str):
            index = add(String(a))
        elif isinstance(a, Doubles):
            index = add(DoubleList(list(a)))
        else:
            items = [add(Int(int(i))) for i in a]
            index = add(IntList(items))
        arg_indices.append(index)
    outs = [
        planned_tensor(shape, dtype)
        for shape, dtype in (out_shape if isinstance(out_shape, Outs) else [(out_shape, out_dtype)])
    ]
    offset = 0
    for index, nbytes in planned:
        values[index] = Tensor(**values[index], allocation_info=AllocationInfo.at(1, offset))
        offset += -(-nbytes // 16) * 16
    result = outs if len(outs) == 1 else [add(TensorList(outs))]  # several: one TensorList
    call = KernelCall(0, arg_indices + outs + result)
    fields = dict(
        name="forward",
        values=values,
        inputs=inputs,
        outputs=outs,
        chains=[Chain(inputs, outs, [call])],
        operators=[Operator(name, overload)],
        delegates=[],
        non_const_buffer_sizes=[0, max(offset, 16)],
    )
    if plan_edit is not None:
        fields = plan_edit(fields)
    plan = ExecutionPlan(**fields)
    return serialize(PteProgram([plan]), constants=constants), arrays


def rng_array(shape, seed, scale=2.0, dtype=np.float32):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


X = rng_array((2, 4, 7, 6), 1)
SPECIAL = np.array([[0.0, -0.0, 1.5, -1.5], [np.nan, np.inf, -np.inf, 3.0e-39]], np.float32)


def kernel_error(runtime_host, tmp_path, case) -> str:
    """Runs a case the C++ kernel must refuse; returns the runtime's error line."""
    name, overload, args, out_shape, *dtype = case
    data, arrays = single_kernel(name, overload, args, out_shape, *dtype)
    (tmp_path / "kernel.pte").write_bytes(data)
    paths = [tmp_path / f"in{n}.bin" for n in range(len(arrays))]
    for a, path in zip(arrays, paths):
        a.tofile(path)
    done = run_tool(runtime_host, "run", tmp_path / "kernel.pte", tmp_path, *paths)
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout.strip()


def run_kernel(runtime_host, tmp_path, case):
    name, overload, args, out_shape, *dtype = case
    data, arrays = single_kernel(name, overload, args, out_shape, *dtype)
    path = tmp_path / "kernel.pte"
    path.write_bytes(data)
    paths = []
    for n, a in enumerate(arrays):
        paths.append(tmp_path / f"in{n}.bin")
        a.tofile(paths[-1])
    done = run_tool(runtime_host, "run", path, tmp_path, *paths)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = host.run(data, arrays)
    got = [
        np.frombuffer((tmp_path / f"output_{n}.bin").read_bytes(), e.dtype).reshape(e.shape)
        for n, e in enumerate(expected)
    ]
    if isinstance(out_shape, Outs):
        return got, expected
    return got[0], expected[0]

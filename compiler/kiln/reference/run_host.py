"""`kiln run-host`: runs a .pte on the host, the reference the firmware must match bit for bit.

Kernel calls run kiln.program.kernels' numpy implementations; each Ethos-U delegate runs
the TOSA graph it was compiled from (named data kiln.pte.schema.tosa_key, "kiln/tosa/<i>") on
tosa_reference_model, whose integer results are the NPU's; a delegate without one
(ExecuTorch's Arm flow keeps none) runs its command stream on kiln's NPU model. Inputs and outputs
are raw little-endian bytes in the program's order and types, each tensor's elements in its
dim order (kiln.pte.dim_order: channels-last where ExecuTorch's Cortex-M flow writes it).

A .pte may be damaged or hostile; every way it can fail is a KilnError (HostError, PteError,
PayloadError, UsageError), and the work it can cause is bounded: no tensor or set of planned
buffers larger than the largest board's memory, each kernel call and NPU-model stream within
KERNEL_MEMORY_FACTOR times that in address space, the kernel calls of one run within
HOST_WORK_BUDGET element operations (checked before each call), and each delegate (its TOSA
graph on tosa_reference_model, or its command stream on kiln's NPU model, whose native parts
can crash or exit on damaged data) in a child process within DELEGATE_MEMORY_BYTES and
DELEGATE_SECONDS (kiln.isolation; what runs there is kiln.reference.isolated_tosa and
isolated_npu).
"""

from __future__ import annotations

import functools
import math
import resource
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from kiln.errors import HostError, NpuConfigError, UsageError
from kiln.isolation import address_space, in_child
from kiln.lower import ethosu_payload
from kiln.program.kernels import by_name
from kiln.pte import dim_order
from kiln.pte.reader import PteFile, deserialize
from kiln.pte.schema import (
    NUMPY_DTYPES,
    STATE_MEMORY_ID,
    BackendDelegate,
    Bool,
    DelegateCall,
    Double,
    DoubleList,
    ExecutionPlan,
    Int,
    IntList,
    KernelCall,
    Null,
    String,
    Tensor,
    TensorList,
    tosa_key,
)

# Bounds on one delegate call, which runs in a child process: a damaged TOSA graph can crash
# tosa_reference_model's C++ core, a damaged weight stream makes Vela's mlw_codec (the NPU
# model's weight decoder) exit the process, and either can allocate or compute without end;
# the child's crash, address space beyond this many bytes or time beyond this many seconds is
# a HostError naming the delegate. A kiln delegate needs a small fraction of either. The time
# grows with the delegate's data (its TOSA graph or its payload, weights included): a language
# model's 168 MB graph (SmolLM2-135M's shape) runs for minutes.
DELEGATE_MEMORY_BYTES = 4 << 30
DELEGATE_SECONDS = 120.0
DELEGATE_SECONDS_PER_MIB = 4.0
# A CPU kernel may take this many times the largest board's memory in address space beyond
# what the process holds (its result and temporaries); more, on sizes a damaged program's
# arguments give (pads, strides, output sizes), is a HostError instead of an allocation.
KERNEL_MEMORY_FACTOR = 4
# Element operations (_call_work) one run's kernel calls may take, 75 times what a CPU-only
# resnet8 takes (2.8e7, 0.13 s); work beyond it is a HostError before the call that would pass it.
HOST_WORK_BUDGET = 1 << 31
# The arguments through which ExecuTorch's Cortex-M flow hands a kernel working memory (planned,
# written by no instruction; a transposed convolution takes two); kiln's kernels take them and do
# not read them.
SCRATCH = ("scratch", "output_scratch")
MATRIX_PRODUCTS = (
    "aten::mm",
    "aten::bmm",
    "aten::matmul",
    "aten::linear",
    "cortex_m::quantized_linear",
    "cortex_m::quantized_linear_per_channel",
)
WINDOWED_POOLS = ("aten::max_pool2d", "aten::avg_pool2d", "cortex_m::quantized_avg_pool2d")
# Convolutions by the dim of their weight that counts output channels (OIHW, OHWI, IHWO).
CONVOLUTIONS = {"aten::convolution": 0, "cortex_m::quantized_conv2d": 0, "cortex_m::quantized_depthwise_conv2d": 3}


def _dtype(tensor: Tensor):
    try:
        return NUMPY_DTYPES[tensor.scalar_type]
    except KeyError:
        raise HostError(f"tensors of scalar type {tensor.scalar_type.name} are not supported") from None


def run(
    data: bytes, inputs: list[np.ndarray], method: str | None = None, state: dict[str, np.ndarray] | None = None
) -> list[np.ndarray]:
    """Runs plan `method` (default: the first) of the .pte `data` on `inputs` (arrays of the input
    types and shapes). `state`: the program's state (its tensors in memory buffer 2, by name, or
    "@<offset>" where a tensor has none) as the previous calls left it, updated in place with what
    this call writes; a state `state` lacks starts at zero, as the firmware's does."""
    return _run(deserialize(data), inputs, method, state)


def state_key(tensor: Tensor) -> str | None:
    """The name run-host keeps a state tensor's values under (None: the tensor is not state)."""
    alloc = tensor.allocation_info
    if alloc is None or alloc.memory_id != STATE_MEMORY_ID:
        return None
    return tensor.name or f"@{alloc.offset}"


def _run(
    f: PteFile, inputs: list[np.ndarray], method: str | None = None, state: dict[str, np.ndarray] | None = None
) -> list[np.ndarray]:
    plan = f.forward() if method is None else f.method(method)
    state = {} if state is None else state
    _check_sizes(plan)
    named = f.named()
    kernels = by_name()
    work = [HOST_WORK_BUDGET]  # element operations the run's kernel calls may still take
    slots: dict[int, object] = {}
    for i, value in enumerate(plan.values):
        if isinstance(value, Tensor):
            raw = f.tensor_data(value)
            if raw is not None:
                slots[i] = dim_order.from_memory(np.frombuffer(raw, _dtype(value)), value.sizes, value.dim_order)
        elif isinstance(value, (Int, Double, Bool, String)):
            slots[i] = value.value
        elif isinstance(value, Null):
            slots[i] = None
        elif isinstance(value, IntList):
            if not all(isinstance(plan.values[j], Int) for j in value.items):
                raise HostError(f"value {i}, an int list, names items that are not ints")
            slots[i] = [plan.values[j].value for j in value.items]
        elif isinstance(value, DoubleList):
            slots[i] = list(value.items)
        elif isinstance(value, TensorList):  # its tensors, read when a kernel runs
            slots[i] = value
    held = _load_state(plan, slots, state)
    if len(inputs) != len(plan.inputs):
        raise UsageError(f"the program takes {len(plan.inputs)} inputs, {len(inputs)} given")
    for i, x in zip(plan.inputs, inputs):
        _store(slots, plan, i, x, f"input value {i}")
    places = _written_at(plan, {}, plan.inputs)  # (memory id, offset) -> the value written there last
    if len(plan.chains) != 1:
        raise HostError(f"the plan has {len(plan.chains)} chains; run-host runs programs of one")
    for k, instruction in enumerate(plan.chains[0].instructions):
        if isinstance(instruction, KernelCall):
            _written_at(plan, places, _kernel_call(k, instruction, plan, kernels, slots, work, places))
        elif isinstance(instruction, DelegateCall):
            delegate = plan.delegates[instruction.delegate_index]
            payload = ethosu_payload.decode(f.delegate_payload(delegate), named)
            n_io = len(payload.inputs) + len(payload.outputs)
            if len(instruction.args) != n_io:
                raise HostError(
                    f"instruction {k} calls delegate {instruction.delegate_index} with "
                    f"{len(instruction.args)} values; its payload has {n_io} inputs and outputs"
                )
            for n, a in enumerate(instruction.args):
                _tensor_value(plan, a, f"instruction {k}'s argument")
                if n < len(payload.inputs) and a not in slots:
                    raise HostError(
                        f"instruction {k} passes tensor value {a} to delegate "
                        f"{instruction.delegate_index} before anything writes it"
                    )
            if tosa_key(plan.name, instruction.delegate_index) in named:
                _delegate(instruction, len(payload.inputs), plan, named, slots)
            else:
                _delegate_on_npu_model(instruction, delegate, payload, plan, slots)
            _written_at(plan, places, instruction.args[len(payload.inputs) :])
        else:
            raise HostError(f"instruction {k} ({type(instruction).__name__}) is not supported on the host")
    missing = [i for i in plan.outputs if i not in slots]
    if missing:
        raise HostError(f"no instruction writes output value(s) {missing}")
    for i, (key, before) in held.items():
        if slots[i] is not before:  # an instruction wrote it
            state[key] = np.array(slots[i])
    return [slots[i] for i in plan.outputs]


def _load_state(plan: ExecutionPlan, slots: dict, state: dict[str, np.ndarray]) -> dict[int, tuple[str, object]]:
    """Puts the state's values (zeros where `state` has none) in the plan's state tensors' slots;
    returns value index -> (state key, the array put there)."""
    held = {}
    for i, value in enumerate(plan.values):
        if not isinstance(value, Tensor) or (key := state_key(value)) is None:
            continue
        dtype = _dtype(value)
        array = state.get(key)
        if array is None:
            array = np.zeros(value.sizes, dtype)
        elif array.dtype != dtype or array.size != math.prod(value.sizes):
            raise HostError(
                f"value {i}: state {key} is {value.scalar_type.name} {list(value.sizes)} here, "
                f"{array.dtype} of {array.size} elements in an earlier method"
            )
        slots[i] = np.array(array).reshape(value.sizes)
        held[i] = (key, slots[i])
    return held


def _check_sizes(plan: ExecutionPlan):
    """Refuses a plan whose memory no board has (so run-host never allocates more than that):
    its planned buffers together, or any one tensor, larger than the largest board's memory."""
    bound = _memory_bound()
    planned = sum(plan.non_const_buffer_sizes)
    if planned > bound:
        raise HostError(f"the plan's buffers take {planned:,} bytes; no board has more than {bound:,}")
    for i, value in enumerate(plan.values):
        if isinstance(value, Tensor) and value.nbytes > bound:
            raise HostError(f"value {i} is a tensor of {value.nbytes:,} bytes; no board has more than {bound:,}")
        if isinstance(value, Tensor) and dim_order.layout(value.sizes, value.dim_order) is None:
            raise HostError(
                f"value {i} has dim_order {list(value.dim_order)} for sizes {list(value.sizes)}: kiln's runtime reads "
                "the contiguous and the channels-last orders"
            )


@functools.cache
def _memory_bound() -> int:
    """Bytes of memory of the board with the most."""
    from kiln import boards

    return max(sum(r.size for r in boards.load(name).memory) for name in boards.board_names())


def _call_work(name: str, args: list, outs: list[int]) -> int:
    """An upper estimate of one kernel call's element operations: every element of its tensor
    arguments and results once, and for the kernels whose work grows faster than that, the
    products each output sums: a convolution's per-output weights, a matrix product's inner
    dimension, a pooling window."""
    arrays = [a for arg in args for a in (arg if isinstance(arg, list) else [arg]) if isinstance(a, np.ndarray)]
    out = sum(outs)
    work = sum(a.size for a in arrays) + out
    first = args[0] if args and isinstance(args[0], np.ndarray) else None
    second = args[1] if len(args) > 1 else None
    if (
        name in CONVOLUTIONS
        and isinstance(second, np.ndarray)
        and second.ndim > CONVOLUTIONS[name]
        and first is not None
    ):
        work += (out + first.size) * (second.size // max(second.shape[CONVOLUTIONS[name]], 1))
    elif name in MATRIX_PRODUCTS and first is not None and first.ndim:
        work += out * first.shape[-1]
    elif name in WINDOWED_POOLS and isinstance(second, list) and all(isinstance(v, int) for v in second):
        work += out * math.prod(max(v, 1) for v in second)
    return work


@contextmanager
def _address_space_bound(limit: int):
    """At most `limit` more bytes of address space for this process while the block runs
    (an allocation beyond it raises MemoryError); the limit before is restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    bound = address_space() + limit
    if soft != resource.RLIM_INFINITY and soft <= bound:
        yield  # a tighter limit is in place already
        return
    resource.setrlimit(resource.RLIMIT_AS, (bound if hard == resource.RLIM_INFINITY else min(bound, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _tensor_value(plan: ExecutionPlan, index: int, what: str) -> Tensor:
    value = plan.values[index]
    if not isinstance(value, Tensor):
        raise HostError(f"{what} is value {index}, a {type(value).__name__}, not a tensor")
    return value


def _store(slots: dict, plan: ExecutionPlan, index: int, array, what: str):
    """slots[index] = `array` as tensor value `index`'s type and shape; HostError if it has another size."""
    t = _tensor_value(plan, index, what)
    try:
        array = np.asarray(array)
        converted = array.astype(_dtype(t), copy=False)
    except (TypeError, ValueError) as error:
        raise HostError(f"{what}: {type(error).__name__}: {error}") from None
    if converted.size != math.prod(t.sizes):
        raise HostError(
            f"{what} has {converted.size} elements {list(array.shape)}; tensor value {index} has shape {list(t.sizes)}"
        )
    slots[index] = converted.reshape(t.sizes)


def _kernel_call(
    k: int, instruction: KernelCall, plan: ExecutionPlan, kernels: dict, slots: dict, work: list[int], places: dict
) -> list[int]:
    """Instruction `k`, a kernel call: its arguments checked against the kernel's schema (a planned
    tensor nothing wrote read in place: _read_in_place), its out tensors written; returns them.
    A kernel that raises on the program's arguments (values of the wrong kind, shapes that do not
    fit) is a HostError naming the instruction."""
    op = plan.operators[instruction.op_index]
    kernel = kernels.get((op.name, op.overload))
    if kernel is None:
        raise HostError(f"no host kernel for {op.name}.{op.overload}")
    at = f"instruction {k} ({op.name}.{op.overload})"
    n = kernel.outputs  # n out tensors, then the result: the out tensor, or a TensorList of them
    expected = len(kernel.schema_args) + n + 1
    if len(instruction.args) != expected:
        raise HostError(f"{at} has {len(instruction.args)} arguments; the kernel takes {expected}")
    args, outs = instruction.args[: -1 - n], instruction.args[-1 - n : -1]
    out_types = [_dtype(_tensor_value(plan, out, f"{at}'s out argument")) for out in outs]
    for name, a in zip(kernel.schema_args, args):
        if name in SCRATCH and a not in slots and isinstance(plan.values[a], Tensor):
            slots[a] = np.zeros(plan.values[a].sizes, _dtype(plan.values[a]))  # its contents are never read
        if a not in slots:
            _read_in_place(plan, slots, places, a)
        if a not in slots:
            kind = plan.values[a]
            raise HostError(
                f"{at} reads tensor value {a} before anything writes it"
                if isinstance(kind, Tensor)
                else f"{at} reads value {a}, a {type(kind).__name__}, which no host kernel takes"
            )
        if isinstance(slots[a], TensorList) and not all(j in slots for j in slots[a].items):
            raise HostError(f"{at} reads tensor list value {a}, whose tensors are not all written yet")
    args = [[slots[j] for j in slots[a].items] if isinstance(slots[a], TensorList) else slots[a] for a in args]
    if op.name == "cortex_m::pad":
        args = _pads_in_logical_order(plan, instruction.args[0], args)
    work[0] -= _call_work(op.name, args, [math.prod(plan.values[out].sizes) for out in outs])
    if work[0] < 0:
        raise HostError(
            f"{at}: the program's kernel calls take more than {HOST_WORK_BUDGET:,} element operations, "
            "run-host's bound on one run"
        )
    try:
        with _address_space_bound(KERNEL_MEMORY_FACTOR * _memory_bound()):
            result = kernel.run(*args, *([out_types[0]] if kernel.out_dtype else []))
        results = [result] if n == 1 else list(result)
    except HostError:
        raise
    except MemoryError:  # sizes from the program's own arguments (pads, strides, output sizes)
        raise HostError(
            f"{at} needs more than {KERNEL_MEMORY_FACTOR} times the largest board's memory on the program's arguments"
        ) from None
    except (
        TypeError,
        ValueError,
        IndexError,
        KeyError,
        AttributeError,
        ZeroDivisionError,
        OverflowError,
        StopIteration,
        RuntimeError,
    ) as error:  # arguments the kernel cannot take
        raise HostError(
            f"{at} cannot run on the program's arguments: {type(error).__name__}: {str(error)[:200]}"
        ) from None
    if len(results) != n:
        raise HostError(f"{at} gave {len(results)} results for {n} out tensors")
    for out, r in zip(outs, results):
        _store(slots, plan, out, r, f"{at}'s result")
    return outs


def _place(t) -> tuple[int, int] | None:
    """A planned tensor's place: (memory id, offset); None for any other value."""
    if not isinstance(t, Tensor) or t.allocation_info is None:
        return None
    return t.allocation_info.memory_id, t.allocation_info.offset


def _written_at(plan: ExecutionPlan, places: dict, written) -> dict:
    """`places` with the tensors just `written` as the last written at their places."""
    for i in written:
        if (place := _place(plan.values[i])) is not None:
            places[place] = i
    return places


def _read_in_place(plan: ExecutionPlan, slots: dict, places: dict, index: int) -> None:
    """ExecuTorch's memory planning leaves a view_copy no instruction: its output is planned at its
    input's place and read there while the input lives (nothing else is planned over it). A
    planned tensor `index` that nothing wrote takes the bytes of the tensor written last at its
    place, when that one has its size and type; otherwise it stays unwritten."""
    t = plan.values[index]
    source = places.get(_place(t))
    if source is None or source == index:
        return
    s = plan.values[source]
    if (s.nbytes, s.scalar_type) == (t.nbytes, t.scalar_type):
        flat = dim_order.to_memory(slots[source], s.dim_order).reshape(-1)
        slots[index] = dim_order.from_memory(flat, t.sizes, t.dim_order)


def _pads_in_logical_order(plan: ExecutionPlan, x: int, args: list) -> list:
    """cortex_m::pad's arguments with its two lists of four pads in the order of its input's dims,
    which the host kernel reads: ExecuTorch writes them in the input's memory order, N, H, W, C
    for a channels-last input (the firmware's kernel reads them so)."""
    t = plan.values[x]
    if not isinstance(t, Tensor) or dim_order.layout(t.sizes, t.dim_order) != dim_order.CHANNELS_LAST:
        return args
    logical = np.argsort(dim_order.CHANNELS_LAST_ORDER)
    pads = [a if not isinstance(a, list) or len(a) != 4 else [a[d] for d in logical] for a in args[1:3]]
    return [args[0], *pads, *args[3:]]


def _delegate(call: DelegateCall, n_in: int, plan: ExecutionPlan, named: dict, slots: dict):
    """A kiln delegate: its TOSA graph (named data kiln/tosa/<index>) on tosa_reference_model."""
    from kiln.reference import isolated_tosa

    key = tosa_key(plan.name, call.delegate_index)
    ins, outs = call.args[:n_in], call.args[n_in:]
    results, valid, status = _in_child(
        isolated_tosa.tosa_graph,
        (named[key], [slots[i] for i in ins]),
        f"delegate {call.delegate_index}'s TOSA graph ({key})",
        "tosa_reference_model",
        len(named[key]),
    )
    if not valid:
        raise HostError(f"tosa_reference_model rejected delegate {call.delegate_index}'s graph: {status}")
    if len(results) != len(outs):
        raise HostError(
            f"delegate {call.delegate_index}'s TOSA graph gives {len(results)} outputs; the call takes {len(outs)}"
        )
    for i, r in zip(outs, results):
        _store(slots, plan, i, r, f"delegate {call.delegate_index}'s output")


def _in_child(function, args: tuple, what: str, engine: str, size: int = 0):
    """function(*args) (kiln.reference.isolated_tosa's or isolated_npu's: tosa_reference_model or
    the NPU model on a delegate of `size` bytes) in a child process within DELEGATE_MEMORY_BYTES and
    DELEGATE_SECONDS plus DELEGATE_SECONDS_PER_MIB per MiB of it; a HostError naming `what` and
    `engine` if it fails."""
    return in_child(
        function,
        args,
        DELEGATE_MEMORY_BYTES,
        DELEGATE_SECONDS + DELEGATE_SECONDS_PER_MIB * size / (1 << 20),
        lambda how: HostError(f"{engine} {how} on {what}: the .pte is damaged; compile the model again"),
    )


def _delegate_on_npu_model(call: DelegateCall, delegate: BackendDelegate, payload, plan: ExecutionPlan, slots: dict):
    """A delegate without a TOSA graph (ExecuTorch's Arm flow writes none): its command
    stream on kiln's NPU model, for the target its compile specs name. The model is
    bit-exact with tosa_reference_model on every stream the tests compare."""
    from kiln.firmware import runner_build
    from kiln.reference import isolated_npu
    from kiln.simulator.npu.config import config_for

    specs = ethosu_payload.compile_specs(delegate)
    target = specs.get(ethosu_payload.TARGET_SPEC)
    mode = ethosu_payload.compiled_memory_mode(specs)
    try:
        config = config_for(target, ethosu_payload.compiled_system_config(specs), mode)
    except NpuConfigError:
        raise HostError(
            f"delegate {call.delegate_index} carries no TOSA graph and names no target kiln's NPU "
            f"model runs (target {target!r})"
        ) from None
    fast = ethosu_payload.compiled_fast_scratch(specs)
    if fast is None:  # ExecuTorch's: the mode's whole arena cache
        fast = runner_build.FAST_SCRATCH_SIZES.get(mode)
    n_in = len(payload.inputs)
    _check_npu_io(call, payload, plan, fast or 0)

    raw, fault = _in_child(
        isolated_npu.command_stream,
        (payload, [slots[i] for i in call.args[:n_in]], config, fast),
        f"delegate {call.delegate_index}'s command stream",
        "kiln's NPU model",
        len(payload.cmd_data) + len(payload.weight_data),
    )
    if fault is not None:
        raise HostError(f"delegate {call.delegate_index} faulted on kiln's NPU model: {fault}")
    for data, index in zip(raw, call.args[n_in:]):
        _store(
            slots,
            plan,
            index,
            np.frombuffer(data, _dtype(plan.values[index])),
            f"delegate {call.delegate_index}'s output",
        )


def _check_npu_io(call: DelegateCall, payload, plan: ExecutionPlan, fast: int):
    """Refuses a payload whose scratch the host cannot hold or whose inputs and outputs lie
    outside their regions or differ in size from the tensors the call passes."""
    bound = _memory_bound()
    d = f"delegate {call.delegate_index}"
    if payload.scratch_size > bound or fast > bound:
        raise HostError(
            f"{d} asks for {payload.scratch_size:,} bytes of scratch and {fast:,} of fast scratch; "
            f"no board has more than {bound:,}"
        )
    sizes = {0: len(payload.weight_data), 1: max(payload.scratch_size, 16), 2: max(fast, 16)}  # as run_compiled's
    for n, (io, index) in enumerate(zip(payload.inputs + payload.outputs, call.args)):
        what = f"{d}'s {'input' if n < len(payload.inputs) else 'output'} {n}"
        if min(io.shape) < 0 or io.elem_size <= 0 or io.offset < 0 or io.region not in sizes:
            raise HostError(
                f"{what} has shape {list(io.shape)}, element size {io.elem_size}, offset {io.offset} "
                f"and region {io.region}: not a tensor in the scratch"
            )
        nbytes = math.prod(io.shape) * io.elem_size
        if io.offset + nbytes > sizes[io.region]:
            raise HostError(
                f"{what}: {nbytes:,} bytes at offset {io.offset:,} overrun region {io.region} "
                f"({sizes[io.region]:,} bytes)"
            )
        if nbytes != plan.values[index].nbytes:
            raise HostError(
                f"{what} has {nbytes:,} bytes; the call passes value {index} of {plan.values[index].nbytes:,}"
            )


def run_files(pte_path: str, input_paths: list[str], output_dir: str) -> list[Path]:
    """The command: reads the .pte and raw inputs, writes output_<i>.bin; returns their paths."""
    try:
        data = Path(pte_path).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {pte_path}: {error.strerror}") from None
    f = deserialize(data)
    plan = f.forward()
    _check_sizes(plan)
    if len(input_paths) != len(plan.inputs):
        raise UsageError(f"{pte_path} takes {len(plan.inputs)} inputs; give one --input file for each")
    inputs = []
    for n, (path, i) in enumerate(zip(input_paths, plan.inputs)):
        t = plan.values[i]
        _dtype(t)
        if Path(path).stat().st_size != t.nbytes:  # before reading a file of any size
            raise UsageError(
                f"input {n} ({path}) has {Path(path).stat().st_size} bytes; the program takes "
                f"{t.scalar_type.name} {list(t.sizes)} = {t.nbytes} bytes"
            )
        raw = Path(path).read_bytes()
        if len(raw) != t.nbytes:
            raise UsageError(
                f"input {n} ({path}) has {len(raw)} bytes; the program takes "
                f"{t.scalar_type.name} {list(t.sizes)} = {t.nbytes} bytes"
            )
        inputs.append(dim_order.from_memory(np.frombuffer(raw, _dtype(t)), t.sizes, t.dim_order))
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, (result, i) in enumerate(zip(_run(f, inputs), plan.outputs)):
        path = out / f"output_{n}.bin"
        memory = dim_order.to_memory(result, plan.values[i].dim_order)
        path.write_bytes(memory.astype(result.dtype.newbyteorder("<")).tobytes())
        paths.append(path)
    return paths

"""kiln's graph: the quantized model as integer values and the ops between them.

`from_pt2e` folds PT2E's quantize/dequantize pairs into the values they
describe. An op whose tensor inputs all come from dequantize nodes and whose
output goes straight into a quantize node (or through an activation the
quantizer fused) becomes a *quantized* op on integer values; every other op
stays in float, and explicit `quantize`/`dequantize` ops appear exactly where
float and integer values meet. Constants (weights, bias) are numpy arrays.

Shapes are in PyTorch's order (NCHW); the TOSA lowering chooses layouts.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.fx import GraphModule, Node

from kiln.errors import ModelError
from kiln.frontend.rewrite import module_path
from kiln.vocabulary import (
    CHECKED_INDEX,
    COMPARISON_OPS,
    DEQUANTIZE,
    DEQUANTIZE_CHANNEL,
    FUSIBLE_ACTIVATIONS,
    INDEX_OPS,
    INDEXED,
    LOGICAL_OPS,
    QUANTIZE,
    VIEW_OPS,
    index_argument,
)

if TYPE_CHECKING:
    from kiln.frontend.state import StateBuffer

qd = torch.ops.quantized_decomposed
aten = torch.ops.aten
# Ops that read their quantized operands' integers and return unquantized results (bools, indices).
INTEGER_READERS = COMPARISON_OPS | INDEX_OPS

DTYPES = {
    torch.float32: "float32",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.bool: "bool",
    torch.uint8: "uint8",
}
# The origin (kiln.graph.Op.origin) of a product by 1 that requantizes between integer types
REQUANTIZE_ORIGIN = ("", "requantize")
QRANGE = {"int8": (-128, 127), "int16": (-32768, 32767), "int32": (-(2**31), 2**31 - 1)}


@dataclass(frozen=True)
class QParams:
    """Affine quantization: real = (q - zero_point) * scale. Per channel along
    `axis` when `scale` is an array (then zero_point is 0)."""

    scale: float | np.ndarray
    zero_point: int = 0
    axis: int | None = None
    qmin: int = -128
    qmax: int = 127

    def step(self) -> float:
        return float(np.max(self.scale))


@dataclass(eq=False)
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "float32", "int8", "int16", "int32", ...
    qparams: QParams | None = None
    data: np.ndarray | None = None  # set for constants; shape == self.shape
    producer: Op | None = None
    users: list[Op] = field(default_factory=list)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def __repr__(self):
        return f"Value({self.name}, {self.dtype}{list(self.shape)})"


@dataclass(eq=False)
class Op:
    """One operation. `target` is the aten overload (or a quantized_decomposed one
    for quantize/dequantize); `args`/`kwargs` are the call's, with Values in
    place of tensors; `activation` is a fused (low, high) clamp in real units."""

    name: str  # the FX node's name: what exclusions and the report use
    target: torch._ops.OpOverload
    args: tuple
    kwargs: dict
    outputs: list[Value]
    module: str = ""  # the nn.Module path that created it ("" at top level)
    activation: tuple[float, float] | None = None
    # (node name, op type) of the op this one was decomposed from (kiln.frontend.decompose), else ("", "")
    origin: tuple[str, str] = ("", "")

    @property
    def op_type(self) -> str:
        """e.g. "aten.conv2d": the op without its overload."""
        packet = self.target.overloadpacket
        return f"{packet._qualified_op_name.replace('::', '.')}"

    @property
    def inputs(self) -> list[Value]:
        return [v for v in _flatten((self.args, tuple(self.kwargs.values()))) if isinstance(v, Value)]

    @property
    def output(self) -> Value:
        return self.outputs[0]

    @property
    def quantized(self) -> bool:
        return self.output.qparams is not None and self.target not in QUANTIZE

    @property
    def reads_integers(self) -> bool:
        """An op on quantized integer values or their bools: a quantized op, a comparison or an
        argmax of quantized operands (its bool or index result has no quantization), a comparison
        of a checked index (compare_checked_indices), or a logical op or a view of bools."""
        if self.target in LOGICAL_OPS or (self.target in VIEW_OPS and self.output.dtype == "bool"):
            return all(v.dtype == "bool" for v in self.inputs + self.outputs)
        if self.target in COMPARISON_OPS and any(
            v.producer is not None and v.producer.target is CHECKED_INDEX for v in self.inputs
        ):
            return True
        return self.quantized or (self.target in INTEGER_READERS and any(v.qparams is not None for v in self.inputs))

    def arg(self, name: str):
        """The argument called `name` in the op's schema, or its default."""
        return schema_arg(self.target, self.args, self.kwargs, name)

    def __repr__(self):
        return f"Op({self.name}: {self.op_type})"


@dataclass
class Graph:
    ops: list[Op]  # in execution (topological) order
    inputs: list[Value]  # the model's, then its state's (in state's order)
    outputs: list[Value]  # the model's, then the state it writes (in state's order)
    state: list[State] = field(default_factory=list)

    def values(self) -> Iterable[Value]:
        seen = set()
        for v in self.inputs + [o for op in self.ops for o in op.inputs + op.outputs]:
            if id(v) not in seen:
                seen.add(id(v))
                yield v


@dataclass(frozen=True)
class State:
    """A state buffer of a program (kiln.frontend.state): its name, the value it holds when the
    graph starts (one of the graph's last inputs) and, if the graph writes it, the value it holds
    when the graph ends (one of its last outputs). Both live in the program's state memory."""

    name: str
    input: Value
    output: Value | None


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for item in x:
            yield from _flatten(item)
    else:
        yield x


def _dtype(t) -> str:
    try:
        return DTYPES[t]
    except KeyError:
        raise ModelError(f"tensors of type {t} are not supported") from None


def _is_float(node: Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _qparams(node: Node, constants: dict) -> QParams:
    """QParams of a quantize/dequantize node (args: x, scale, zero_point, qmin, qmax, dtype)."""
    scale, zero_point = (constants.get(a, a) for a in node.args[1:3])
    qmin, qmax = int(node.args[3]), int(node.args[4])
    if node.target in DEQUANTIZE_CHANNEL:
        axis = int(node.args[3])
        qmin, qmax = int(node.args[4]), int(node.args[5])
        scale = np.asarray(scale.detach().numpy() if isinstance(scale, torch.Tensor) else scale, np.float32)
        return QParams(scale, 0, axis, qmin, qmax)
    if isinstance(scale, torch.Tensor):
        scale = scale.item()
    if isinstance(zero_point, torch.Tensor):
        zero_point = zero_point.item()
    return QParams(float(scale), int(zero_point), None, qmin, qmax)


class _Builder:
    def __init__(
        self, gm: GraphModule, io_quantized: bool, state_inputs: frozenset[str] = frozenset(), state_outputs=0
    ):
        self.gm = gm
        self.io_quantized = io_quantized
        self.state_inputs = state_inputs  # placeholder names of state inputs: integer whatever io_quantized says
        self.state_outputs = state_outputs  # the last this many outputs are state: integer likewise
        self.ops: list[Op] = []
        self.env: dict[Node, Value] = {}  # node -> the value it stands for
        self.dq: dict[Node, Value] = {}  # dequantize node -> the integer value it reads
        self.constants: dict[Node, torch.Tensor] = {}
        self.dequantized: dict[int, Value] = {}  # integer value id -> its float dequantization
        self.inputs: list[Value] = []
        self.skipped: set[Node] = set()
        self.checked: dict[tuple[int, int], Value] = {}  # (index value id, size) -> its CHECKED_INDEX

    def add(self, name, target, args, kwargs, outputs, module="", activation=None, origin=("", "")) -> Op:
        op = Op(name, target, args, kwargs, outputs, module, activation, origin)
        for v in outputs:
            v.producer = op
        for v in op.inputs:
            v.users.append(op)
        self.ops.append(op)
        return op

    def float_of(self, node) -> Value | object:
        """What a float op sees for argument `node`: a float Value (dequantizing if needed)."""
        if node in self.dq:
            value = self.dq[node]
            if value.is_constant:  # a quantized weight used by a float op: fold to float
                return self.constant(node.name, dequantize_array(value.data, value.qparams))
            key = id(value)
            if key not in self.dequantized:
                out = Value(f"{value.name}_dq", value.shape, "float32")
                qp = value.qparams
                self.add(
                    f"{value.name}_dq",
                    qd.dequantize_per_tensor.default,
                    (value, qp.scale, qp.zero_point, qp.qmin, qp.qmax, _torch_dtype(value.dtype)),
                    {},
                    [out],
                )
                self.dequantized[key] = out
            return self.dequantized[key]
        if node in self.env:
            return self.env[node]
        if node in self.constants:
            return self.constant(node.name, self.constants[node].detach().numpy())
        raise ModelError(f"node {node.name}: its input is not a value kiln understands")

    def integer_of(self, node) -> Value | object:
        """What a quantized op sees for argument `node`: its integer value (quantized, or an
        integer/bool tensor as it is)."""
        return self.dq[node] if node in self.dq else self.float_of(node)

    def constant(self, name, array) -> Value:
        array = np.ascontiguousarray(array)
        return Value(name, tuple(array.shape), _dtype(torch.from_numpy(array).dtype), data=array)

    def map_args(self, args, fn):
        if isinstance(args, (list, tuple)):
            return type(args)(self.map_args(a, fn) for a in args)
        if isinstance(args, dict):
            return {k: self.map_args(a, fn) for k, a in args.items()}
        if isinstance(args, Node):
            return fn(args)
        return args

    def run(self) -> Graph:
        outputs = None
        for node in self.gm.graph.nodes:
            if node in self.skipped:
                continue
            if node.op == "placeholder":
                self.placeholder(node)
            elif node.op == "get_attr":
                self.constants[node] = functools.reduce(getattr, node.target.split("."), self.gm)
            elif node.op == "output":
                outputs = self.output(node)
            elif node.op == "call_function":
                self.call(node)
            else:
                raise ModelError(f"node {node.name}: {node.op} nodes are not supported")
        self.compare_checked_indices()
        return Graph(self.ops, self.inputs, outputs)

    def compare_checked_indices(self) -> None:
        """A comparison of an integer index that a gather or scatter also reads (through
        CHECKED_INDEX) with an integer constant compares the checked int32 index instead: the two
        are equal wherever the program completes (an index out of range stops it at the check), and
        int32 is what the NPU compares. A decode step's mask arange(T) <= position so runs on the
        NPU beside the rest of the step. The constant is saturated to int32 (its order against an
        index in [0, 2^31) is kept); a check that came later moves before the comparison. A
        comparison whose every reader makes int64 values (where(i < 0, i + size, i)) stays on the
        CPU with them: alone on the NPU it would be a delegate of its own."""
        checks: dict[int, Op] = {}
        for op in self.ops:
            if op.target is CHECKED_INDEX:
                checks.setdefault(id(op.inputs[0]), op)
        for op in list(self.ops):
            tensors = [v for v in op.inputs if not v.is_constant]
            if op.target not in COMPARISON_OPS or len(tensors) != 1 or id(tensors[0]) not in checks:
                continue
            if all(user.output.dtype == "int64" for user in op.output.users):
                continue  # it selects int64 values (PyTorch's negative-index rule): the CPU's, beside them
            index, check = tensors[0], checks[id(tensors[0])]
            other = op.args[1] if op.args[0] is index else op.args[0]
            if isinstance(other, Value) and other.dtype in ("int8", "int16", "int32", "int64"):
                narrow = np.clip(other.data, -(2**31), 2**31 - 1).astype(np.int32)
                other.users.remove(op)
                other = Value(other.name + "_i32", other.shape, "int32", data=narrow, users=[op])
            elif isinstance(other, int) and not isinstance(other, bool):
                other = int(np.clip(other, -(2**31), 2**31 - 1))
            else:
                continue
            op.args = (check.output, other) if op.args[0] is index else (other, check.output)
            index.users.remove(op)
            check.output.users.append(op)
            if self.ops.index(check) > self.ops.index(op):
                self.ops.remove(check)
                self.ops.insert(self.ops.index(op), check)

    def placeholder(self, node: Node):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise ModelError(f"input {node.name} is not a tensor")
        users = list(node.users)
        if (self.io_quantized or node.name in self.state_inputs) and len(users) == 1 and users[0].target in QUANTIZE:
            q = users[0]
            qp = _qparams(q, self.constants)
            value = Value(node.name, tuple(val.shape), _dtype(q.args[5]), qp)
            self.env[q] = value
            self.skipped.add(q)
        else:
            value = Value(node.name, tuple(val.shape), _dtype(val.dtype))
            self.env[node] = value
        self.inputs.append(value)

    def output(self, node: Node) -> list[Value]:
        result = []
        returned = list(_flatten(node.args[0]))
        if not any(isinstance(arg, Node) for arg in returned):
            raise ModelError(f"the model returns no tensor (it returns {', '.join(map(repr, returned)) or 'nothing'})")
        for k, arg in enumerate(returned):
            if not isinstance(arg, Node):
                continue  # None or a number beside the tensors: not a program output (kiln.frontend.export)
            integer = self.io_quantized or k >= len(returned) - self.state_outputs
            if arg in self.dq and integer and not self.dq[arg].is_constant:
                result.append(self.dq[arg])
            else:
                result.append(self.float_of(arg))
        return result

    def call(self, node: Node):
        target = node.target
        if target in QUANTIZE:
            if self.requantized(node):
                return
            source = self.float_of(node.args[0])
            qp = _qparams(node, self.constants)
            out = Value(node.name, source.shape, _dtype(node.args[5]), qp)
            self.add(node.name, target, (source, *node.args[1:]), {}, [out])
            self.env[node] = out
            return
        if target in DEQUANTIZE or target in DEQUANTIZE_CHANNEL:
            source = node.args[0]
            if source in self.constants:  # a quantized constant (weight, bias)
                array = self.constants[source].detach().numpy()
                self.dq[node] = Value(
                    source.name,
                    tuple(array.shape),
                    _dtype(self.constants[source].dtype),
                    _qparams(node, self.constants),
                    data=array,
                )
            else:
                self.dq[node] = self.env[source]
            return
        if target is torch.ops.aten._assert_tensor_metadata.default:
            return
        self.aten(node)

    def aten(self, node: Node):
        val = node.meta.get("val")
        if isinstance(val, (tuple, list)) and val and all(isinstance(v, torch.Tensor) for v in val):
            self.several_outputs(node, val)
            return
        if not isinstance(val, torch.Tensor):
            op = getattr(getattr(node.target, "overloadpacket", None), "_qualified_op_name", str(node.target))
            returns = f"{len(val)} tensors" if isinstance(val, (tuple, list)) else type(val).__name__
            raise ModelError(
                f"node {node.name} ({op.replace('::', '.')}) returns {returns}, not one tensor; "
                "kiln supports single-output operators (OPS.md lists the ones it splits)"
            )
        quant, fused, activation = self.quantized_output(node)
        tensor_args = [a for a in _flatten((node.args, tuple(node.kwargs.values()))) if isinstance(a, Node)]
        # integer and bool operands (indices, masks) are never quantized: they flow as they are
        float_args = [a for a in tensor_args if a in self.dq or _is_float(a)]
        inputs_quantized = float_args and all(a in self.dq for a in float_args)
        module = module_path(node)
        origin = node.meta.get("kiln_origin", ("", ""))
        if quant is not None and inputs_quantized:
            qp = _qparams(quant, self.constants)
            out = Value(quant.name, tuple(val.shape), _dtype(quant.args[5]), qp)
            args = self.map_args(node.args, self.integer_of)
            kwargs = self.map_args(node.kwargs, self.integer_of)
            if node.target in INDEXED:
                args = self.checked_indices(node, args, module, origin)
            self.add(node.name, node.target, args, kwargs, [out], module, activation, origin)
            self.env[quant] = out
            self.skipped.update({quant} | ({fused} if fused is not None else set()))
            return
        # a comparison or argmax of quantized operands reads their integer values (its bool or index
        # result has no quantization); on the CPU the program dequantizes them for the float kernel
        of = self.integer_of if node.target in INTEGER_READERS and inputs_quantized else self.float_of
        args = self.map_args(node.args, of)
        kwargs = self.map_args(node.kwargs, of)
        out = Value(node.name, tuple(val.shape), _dtype(val.dtype))
        if node.target in INDEX_OPS and inputs_quantized:
            # int32 indices (what the NPU writes: Vela 5.2.0 reads no int64 ARGMAX result), then
            # PyTorch's int64 by a cast
            narrow = Value(node.name + "_i32", tuple(val.shape), "int32")
            self.add(node.name, node.target, args, kwargs, [narrow], module, origin=origin)
            self.add(
                node.name + "_i64",
                aten._to_copy.default,
                (narrow,),
                {"dtype": torch.int64},
                [out],
                module,
                origin=origin,
            )
        else:
            self.add(node.name, node.target, args, kwargs, [out], module, origin=origin)
        self.env[node] = out

    def requantized(self, node: Node) -> bool:
        """Folds quantize(dequantize(v)) into a product by 1 if it changes v's integer type or its
        qparams (where an 8-bit value meets a 16-bit reader, or the reverse; where a value written
        at a fixed range, a program's state, meets a reader observing its own): on the NPU one
        RESCALE, on the CPU the same dequantize and quantize as PT2E's reference. Returns whether it
        did (the same type and qparams: v itself)."""
        integer = self.dq.get(node.args[0])
        if integer is None or integer.is_constant or integer.qparams is None:
            return False
        dtype, qparams = _dtype(node.args[5]), _qparams(node, self.constants)
        if integer.dtype == dtype and integer.qparams == qparams:
            self.env[node] = integer
            return True
        out = Value(node.name, integer.shape, dtype, qparams)
        module = integer.producer.module if integer.producer is not None else ""
        self.add(node.name, aten.mul.Tensor, (integer, 1.0), {}, [out], module, origin=REQUANTIZE_ORIGIN)
        self.env[node] = out
        return True

    def checked_indices(self, node: Node, args: tuple, module: str, origin) -> tuple:
        """`args` of a quantized gather or scatter with its indices through CHECKED_INDEX (int32, each
        checked against the size of the dim it indexes): one check per index value and size, however
        many ops read it (a decode step's position, which every layer's caches and the rotary
        tables take)."""
        at = index_argument(node.target)
        values, index = args[0], args[at]
        size = values.shape[0] if node.target is aten.embedding.default else values.shape[args[1] % len(values.shape)]
        if index.is_constant:  # checked now
            bad = (index.data < 0) | (index.data >= size)
            if bad.any():
                raise ModelError(
                    f"node {node.name} ({node.target.__name__}): index {int(index.data[bad].flat[0])} "
                    f"is out of range 0..{size - 1}"
                )
            checked = Value(node.name + "_index", index.shape, "int32", data=index.data.astype(np.int32))
        elif (id(index), size) in self.checked:
            checked = self.checked[id(index), size]
        else:
            checked = Value(node.name + "_index", index.shape, "int32")
            self.add(checked.name, CHECKED_INDEX, (index, size), {}, [checked], module, origin=origin)
            self.checked[id(index), size] = checked
        return (*args[:at], checked, *args[at + 1 :])

    def several_outputs(self, node: Node, vals):
        """An op returning several tensors (sort, topk: values and indices) is one float op with
        one Value per output; each operator.getitem node reading an output stands for its Value
        (getitem nodes are not ops). A quantized input is dequantized first; an output the graph
        quantizes afterwards gets an explicit quantize op, as any float op's."""
        users = {}
        for user in node.users:
            if user.op != "call_function" or user.target is not operator.getitem:
                raise ModelError(f"node {node.name}: its outputs are read other than one by one ({user.name})")
            users.setdefault(user.args[1], user)
        outputs = [
            Value(users[i].name if i in users else f"{node.name}_{i}", tuple(v.shape), _dtype(v.dtype))
            for i, v in enumerate(vals)
        ]
        args = self.map_args(node.args, self.float_of)
        kwargs = self.map_args(node.kwargs, self.float_of)
        self.add(
            node.name,
            node.target,
            args,
            kwargs,
            outputs,
            module_path(node),
            origin=node.meta.get("kiln_origin", ("", "")),
        )
        for user in node.users:
            self.env[user] = outputs[user.args[1]]
            self.skipped.add(user)

    def quantized_output(self, node: Node):
        """(quantize node, fused activation node or None, activation range) if `node`'s
        result is quantized right away (directly or after a fused activation)."""
        users = list(node.users)
        if len(users) != 1:
            return None, None, None
        user = users[0]
        if user.target in QUANTIZE:
            return user, None, None
        if user.target in FUSIBLE_ACTIVATIONS:
            after = list(user.users)
            if len(after) == 1 and after[0].target in QUANTIZE:
                return (
                    after[0],
                    user,
                    clamp_range(user.target, lambda name: schema_arg(user.target, user.args, user.kwargs, name)),
                )
        return None, None, None


def schema_arg(target, args: tuple, kwargs: dict, name: str):
    """The argument called `name` of a call to `target`, positional or keyword, or its default."""
    for i, a in enumerate(target._schema.arguments):
        if a.name == name:
            if i < len(args):
                return args[i]
            if name in kwargs:
                return kwargs[name]
            return a.default_value if a.has_default_value() else None
    raise KeyError(f"{target} has no argument {name!r}")


def pair(x) -> tuple[int, int]:
    """An int-or-sequence kernel/stride/padding argument as (height, width)."""
    if isinstance(x, (list, tuple)):
        return (int(x[0]), int(x[-1]))
    return (int(x), int(x))


def clamp_range(target, arg) -> tuple[float, float]:
    """(low, high) in real units of relu/relu6/hardtanh/clamp; `arg(name)` reads the call's arguments."""
    name = target.overloadpacket.__name__.rstrip("_")
    if name == "relu":
        return (0.0, float("inf"))
    if name == "relu6":
        return (0.0, 6.0)
    low, high = (arg("min_val"), arg("max_val")) if name == "hardtanh" else (arg("min"), arg("max"))
    return (float("-inf") if low is None else float(low), float("inf") if high is None else float(high))


def _torch_dtype(name: str):
    return {v: k for k, v in DTYPES.items()}[name]


def dequantize_array(data: np.ndarray, qp: QParams) -> np.ndarray:
    scale = np.asarray(qp.scale, np.float32)
    if qp.axis is not None:
        shape = [1] * data.ndim
        shape[qp.axis] = -1
        scale = scale.reshape(shape)
    return ((data.astype(np.float32) - np.float32(qp.zero_point)) * scale).astype(np.float32)


def from_pt2e(gm: GraphModule, io_quantized: bool = False, state: Sequence[StateBuffer] = ()) -> Graph:
    """kiln's graph of a PT2E-converted module (or of a plain exported one, all float).

    With `io_quantized`, an input quantized right away and an output that is a
    dequantized integer value stay integer: the program's I/O is then int8. `state`: the
    buffers kiln.frontend.state.lift_state made the module's last inputs and outputs; they stay
    integer whatever `io_quantized` says (a state keeps its integers from call to call).
    """
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    written = [b for b in state if b.written]
    g = _Builder(gm, io_quantized, frozenset(placeholders[len(placeholders) - len(state) :]), len(written)).run()
    if state:
        inputs = dict(zip([b.name for b in state], g.inputs[-len(state) :]))
        outputs = dict(zip([b.name for b in written], g.outputs[len(g.outputs) - len(written) :]))
        g.state = [State(b.name, inputs[b.name], outputs.get(b.name)) for b in state]
    return g

"""A program's state: buffers its methods update in place (a language model's key/value cache).

A model with several methods (kiln_methods: name -> example inputs) is exported one method at a
time. A buffer that any method writes in place is *state*: it lives in the program for as long as
the program does, every method sees the values the last call left, and it starts at zero. Each
method's graph then takes every state buffer as an extra input after its own (the values before
the call) and, for each buffer it writes, returns an extra output after its own (the values after
the call): from there on the compiler sees a pure function. The program pairs each state input
with its output again by the buffer's name (kiln.program.builder: ExecuTorch's shared mutable
buffers, memory id 2).

Calibration replays the model's kiln_calibration calls on the float model in order, the buffers
carried from call to call as the program will carry them, and records each call's inputs with
the state it began from: every method is calibrated on the caches it will really read. Each state
buffer's quantization is then fixed from every value it held (state_ranges), the same in every
method, so that what one method writes another reads at the same scale.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node
from torch.fx.graph import CodeGen

from kiln.errors import ModelError

# The attributes of a multi-method model (any nn.Module may carry them).
METHODS_ATTRIBUTE = "kiln_methods"  # {method name: example inputs (a tuple of tensors)}
CALIBRATION_ATTRIBUTE = "kiln_calibration"  # [(method name, inputs), ...] replayed in order
CONSTANTS_ATTRIBUTE = "kiln_constants"  # {name: int}: ExecuTorch's constant methods (get_max_seq_len, ...)
# The exported wrapper's attribute holding the model, so buffer names are "model.<name>".
_PREFIX = "model."


@dataclass(frozen=True)
class StateBuffer:
    """One state buffer: its name in the model (a fully qualified buffer name), and its float
    shape; `written`: whether the method at hand writes it (it then has an output)."""

    name: str
    shape: tuple[int, ...]
    written: bool


def methods_of(module: torch.nn.Module) -> Mapping[str, tuple[torch.Tensor, ...]] | None:
    """The model's methods and their example inputs (kiln_methods), or None for a one-method model."""
    methods = getattr(module, METHODS_ATTRIBUTE, None)
    if methods is None:
        return None
    if not isinstance(methods, Mapping) or not methods:
        raise ModelError(f"{METHODS_ATTRIBUTE} must map method names to example inputs (a tuple of tensors)")
    for name, inputs in methods.items():
        if not isinstance(name, str) or not name.isidentifier() or not callable(getattr(module, name, None)):
            raise ModelError(f"{METHODS_ATTRIBUTE} names {name!r}, which is not a method of {type(module).__name__}")
        if not isinstance(inputs, tuple) or not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
            raise ModelError(f"{METHODS_ATTRIBUTE}[{name!r}] must be a tuple of example tensors")
    return methods


def constants_of(module: torch.nn.Module) -> dict[str, int]:
    """The model's constant methods (kiln_constants: name -> int), {} where it has none."""
    constants = getattr(module, CONSTANTS_ATTRIBUTE, None) or {}
    if not isinstance(constants, Mapping) or not all(
        isinstance(k, str) and k.isidentifier() and isinstance(v, int) and not isinstance(v, bool)
        for k, v in constants.items()
    ):
        raise ModelError(f"{CONSTANTS_ATTRIBUTE} must map method names to ints")
    return dict(constants)


class _Method(torch.nn.Module):
    """A module whose forward is one method of `model` (torch.export exports forward only)."""

    def __init__(self, model: torch.nn.Module, method: str):
        super().__init__()
        self.model = model
        self.method = method


def method_module(model: torch.nn.Module, method: str) -> torch.nn.Module:
    """`model.<method>` as an nn.Module's forward, with the method's argument names (so the
    program's inputs are named as the method names them)."""
    bound = getattr(model, method)
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += list(inspect.signature(bound).parameters.values())

    def forward(self, *args):
        return getattr(self.model, self.method)(*args)

    forward.__signature__ = inspect.Signature(parameters)
    return type(f"{type(model).__name__}_{method}", (_Method,), {"forward": forward})(model, method)


def written_buffers(gm: GraphModule) -> set[str]:
    """The model's buffers (by name) that an in-place op of `gm` writes, directly or through a view."""
    from kiln.frontend.normalize import _view_base, _written  # the one definition of both

    buffers = {name for name, _ in gm.named_buffers()}
    found = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if not node.target._schema.is_mutable:
            continue
        for i in _written(node.target):
            written = node.args[i] if i < len(node.args) else None
            base = _view_base(written)
            if isinstance(base, Node) and base.op == "get_attr" and base.target in buffers:
                found.add(base.target)
    return {name.removeprefix(_PREFIX) for name in found}


def input_name(name: str) -> str:
    """The name of the input lift_state gives state buffer `name`."""
    return "state_" + name.replace(".", "_")


@contextmanager
def preserved(model: torch.nn.Module) -> Iterator[None]:
    """Restores the model's buffers after the block (which may run its methods)."""
    saved = {name: b.clone() for name, b in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(saved[name])


def lift_state(gm: GraphModule, state: Iterable[str], written: set[str]) -> list[StateBuffer]:
    """Makes each buffer of `state` (names in the model) an input of `gm` after its own inputs and
    each of them that `written` holds an output after its own outputs (which the in-place ops'
    functionalisation, kiln.frontend.normalize, then points at the buffer's last value). `gm`
    then takes and returns flat tensors (a plain CodeGen). Returns the buffers in that order."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    outputs = gm.graph.output_node()
    returned = list(outputs.args[0]) if isinstance(outputs.args[0], (list, tuple)) else [outputs.args[0]]
    lifted: list[StateBuffer] = []
    extra_outputs: list[Node] = []
    for name in state:
        target = _PREFIX + name
        buffer = gm.get_buffer(target)
        if bool(buffer.count_nonzero()):
            raise ModelError(
                f"state buffer {name} does not start at zero; kiln's programs start their state at zero "
                "(initialise the buffer with zeros, or fill it in a method)"
            )
        with gm.graph.inserting_after(placeholders[-1] if placeholders else next(iter(gm.graph.nodes))):
            node = gm.graph.placeholder(input_name(name))
        node.meta["val"] = torch.zeros_like(buffer)
        placeholders.append(node)
        for reader in [n for n in gm.graph.nodes if n.op == "get_attr" and n.target == target]:
            reader.replace_all_uses_with(node)
            gm.graph.erase_node(reader)
        if name in written:
            extra_outputs.append(node)
        lifted.append(StateBuffer(name, tuple(buffer.shape), name in written))
    outputs.args = (tuple(returned + extra_outputs),)
    gm.graph._codegen = CodeGen()
    gm.recompile()
    return lifted


def replay(
    model: torch.nn.Module, calls: Iterable[tuple[str, tuple]], state: list[str]
) -> dict[str, list[tuple[torch.Tensor, ...]]]:
    """Runs `calls` (method name, inputs) on the float `model` in order from zero state and
    returns, per method, each call's inputs followed by the state buffers' values it began from
    (in `state`'s order): the calibration samples of the lifted graphs. The model's buffers are
    left as they were."""
    buffers = {name: model.get_buffer(name) for name in state}
    saved = {name: b.clone() for name, b in buffers.items()}
    samples: dict[str, list[tuple[torch.Tensor, ...]]] = {}
    try:
        for b in buffers.values():
            b.zero_()
        with torch.no_grad():
            for method, inputs in calls:
                before = tuple(buffers[name].clone() for name in state)
                getattr(model, method)(*inputs)
                samples.setdefault(method, []).append((*inputs, *before))
            final = tuple(buffers[name].clone() for name in state)
    finally:
        for name, b in buffers.items():
            b.copy_(saved[name])
    samples[""] = [final]  # the state after the last call: a value the state holds too
    return samples


def state_ranges(samples: dict[str, list[tuple]], n_inputs: Mapping[str, int], state: list[str]) -> dict:
    """Each state buffer's (least, greatest) value over every value it held in `samples` (replay's;
    a method's samples hold its n_inputs[method] inputs first)."""
    ranges = {}
    for k, name in enumerate(state):
        held = [call[n_inputs.get(method, 0) + k] for method, calls in samples.items() for call in calls]
        ranges[name] = (min(float(t.min()) for t in held), max(float(t.max()) for t in held))
    return ranges

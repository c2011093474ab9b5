"""`kiln profile`: a per-layer profile of a compiled model, on the host.

Every NPU command of every delegate runs on kiln's NPU model with per-command accounting
(kiln.simulator.npu.profile): the cycles it adds to the model's PMU cycle estimate and the
bytes it reads and writes per region. Each command is then attributed to the model op (and
PyTorch module path) it came from, joined through what Vela records about which operators
each command range implements:

  command (its byte offset in the stream)
    -> Vela's debug database (`vela --enable-debug-db`), table `queue`: the offset of every
       NPU_OP_* command Vela emitted for an operation, and that scheduled operation (a sliced
       or striped one has a row per command); the commands before such an offset (DMA, waits)
       belong to the operation whose command they precede
    -> table `perf`: the scheduled operation's source operator and Vela's own NPU cycle
       estimate for it (what `--verbose-performance` prints per layer)
    -> table `source`: the source operator's `ext_key`, its index in the TOSA graph
    -> the TOSA operator's output tensor, which kiln's lowering emitted while lowering one
       kiln op (recorded here by running kiln.lower's Lowerer again with a hook on
       emit(); the graph it makes must equal the compiled one byte for byte)
    -> the kiln op: its name, module path and placement from the compile report.

On the Ethos-U85 Vela costs an elementwise operation chained to its producer (a residual ADD
reading a convolution's output from a chaining buffer) in the producer's figure and gives the
chained one 0 cycles; the NPU model does the same (kiln.simulator.npu.u85.cycles), and so the
chained command counts here with the command of the operation the model costed it in.

Per layer the profile gives the model's cycles (integers, rounded so that a delegate's
layers sum to its PMU cycle count), Vela's per-layer estimate beside them, the bytes per
region and per AXI port. CPU ops run no NPU commands: `kiln profile --cpu-instructions` builds
kiln's executor runner for the program and runs it once on the virtual platform, counting the
instructions of every call of Method::run_instruction (RUN_INSTRUCTION: one per program
instruction, in order: kiln's QEMU plugin, as `kiln run --count-instructions=FUNCTION`);
count_cpu gives each CPU op its kernel calls' counts, each delegate the CPU's share of its call
(the driver), and keeps the run's own NPU PMU total beside the host's. Without it CPU
instructions are null, and the profile says they were not measured.

`kiln run --profile=PTE` profiles a runner already built: the ELF must bake PTE's program
(check_baked); PTE is profiled as profile_pte does and the ELF itself runs as above.

Compiling, building and running come after this stage: kiln.flow (profile_model,
profile_elf) does them and hands the results in."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from kiln import boards
from kiln.errors import InternalError
from kiln.families import NpuFamily
from kiln.lower import tosa as tosa_lowering
from kiln.lower import vela

REGION_NAMES = {0: "weights", 1: "scratch", 2: "fast_scratch"}
TOLERANCE = 0.10  # the profile's per-layer agreement with Vela's own estimate


# ---- TOSA operators to kiln ops ---------------------------------------------------------------


class _OpsSeen:
    """A partition whose ops, as the Lowerer iterates them, tell it which op it is lowering."""

    def __init__(self, partition, lowerer):
        self._partition, self._lowerer, self._tracked = partition, lowerer, False

    def __getattr__(self, name):
        return getattr(self._partition, name)

    @property
    def ops(self):
        """The first read (Lowerer.lower's loop) tracks; later ones (a lowering that looks at
        the other ops, as _global_mean does) are the plain list."""
        if self._tracked:
            return self._partition.ops
        self._tracked = True
        return self._track()

    def _track(self):
        for op in self._partition.ops:
            self._lowerer.current = op.name
            yield op
        self._lowerer.current = None


class _TrackingLowerer(tosa_lowering.Lowerer):
    """kiln's Lowerer recording, for every TOSA tensor an operator writes, the kiln op being
    lowered when it was emitted (None: the graph outputs' layout changes after the last op)."""

    def __init__(self, partition, family: NpuFamily, flipped):
        self.current = None
        self.owner: dict[str, str | None] = {}
        super().__init__(_OpsSeen(partition, self), family, flipped)

    def emit(self, op, inputs, outputs, attribute):
        super().emit(op, inputs, outputs, attribute)
        for name in outputs:
            self.owner.setdefault(name, self.current)


def tosa_op_owners(partition, family: NpuFamily, compiled: bytes, flipped: frozenset[str]) -> list[str | None]:
    """Per operator of the TOSA graph `compiled` (kiln's lowering of `partition` with the choices
    `flipped`, as compile_model's Result records them), the name of the kiln op it was lowered
    from; an operator emitted for no op (a graph output's layout change) is owned by the op that
    produced its input, a constant by None."""
    lowerer = _TrackingLowerer(partition, family, flipped)
    again = lowerer.lower()
    if again != compiled:
        raise InternalError(
            "lowering a delegate's partition again gave another TOSA graph; its operators cannot be traced to kiln ops"
        )
    from tosa.TosaGraph import TosaGraph

    block = TosaGraph.GetRootAs(compiled, 0).Regions(0).Blocks(0)
    owners: list[str | None] = []
    inputs: list[list[str]] = []
    producer: dict[str, int] = {}
    for i in range(block.OperatorsLength()):
        operator = block.Operators(i)
        outs = [operator.Outputs(j).decode() for j in range(operator.OutputsLength())]
        inputs.append([operator.Inputs(j).decode() for j in range(operator.InputsLength())])
        owners.append(next((lowerer.owner[n] for n in outs if lowerer.owner.get(n)), None))
        for n in outs:
            producer[n] = i
    for i in range(len(owners)):
        frontier, seen = list(inputs[i]), set()
        while owners[i] is None and frontier:
            tensor = frontier.pop(0)
            if tensor in seen or tensor not in producer:
                continue
            seen.add(tensor)
            owners[i] = owners[producer[tensor]]
            frontier += inputs[producer[tensor]]
    return owners


# ---- Vela's own record ------------------------------------------------------------------------


@dataclass
class VelaOperation:
    scheduled_id: int
    offset: int  # byte offset of its NPU_OP_* command in the command stream
    operator: str  # Vela's operator, e.g. Conv2D
    name: str  # its OFM tensor's name
    tosa_index: int | None  # the TOSA operator it came from
    npu_cycles: int  # Vela's per-layer NPU cycles (--verbose-performance's "NPU")


@dataclass
class VelaRecord:
    result: vela.VelaResult
    operations: list[VelaOperation]  # in command stream order
    tensors: list[dict]  # Vela's tensor allocation (debug database table `tensors`)


def _tables(xml: bytes) -> dict[str, list[dict]]:
    """The tables of Vela's debug database, by name: one dict per row (its CSV text)."""
    tables = {}
    for table in ElementTree.fromstring(xml).iter("table"):
        text = (table.text or "").strip()
        tables[table.get("name")] = list(csv.DictReader(io.StringIO(text)))
    return tables


DEBUG_OPTIONS = ("--enable-debug-db", "--verbose-performance")  # Vela's per-operation record


def vela_record(
    tosa: bytes, name: str, accelerator: str, system_config: str, memory_mode: str, timeout_s: float = 600
) -> VelaRecord:
    """Vela run on `tosa` as kiln.lower.vela runs it, with its debug database and per-layer
    performance: the compiled stream and, per Vela operation, its command and estimate."""
    debug = f"{name}_debug.xml"
    done = vela.run(
        tosa, f"{name}.tosa", accelerator, system_config, memory_mode, DEBUG_OPTIONS, (debug,), timeout_s=timeout_s
    )
    tables = _tables(done.files[debug])
    ext_key = {row["id"]: int(row["ext_key"]) for row in tables.get("source", [])}
    perf = {row["id"]: row for row in tables.get("perf", [])}
    operations = []
    for row in tables.get("queue", []):
        p = perf.get(row["scheduled_id"], {})
        operations.append(
            VelaOperation(
                int(row["scheduled_id"]),
                int(row["offset"]),
                p.get("operator", "?"),
                p.get("name", "?"),
                ext_key.get(p.get("source_id")),
                int(float(p.get("npu_cycles") or 0)),
            )
        )
    operations.sort(key=lambda o: o.offset)
    return VelaRecord(done.result, operations, tables.get("tensors", []))


# ---- the profile -----------------------------------------------------------------------------


@dataclass
class Layer:
    name: str  # the kiln op (graph node) name
    op: str  # its op type, e.g. aten.conv2d
    module: str  # the PyTorch module path it came from
    where: str  # "npu" or "cpu"
    delegate: int | None = None
    npu_cycles: int | None = None  # the NPU model's PMU cycles attributed to it (None on the CPU)
    vela_npu_cycles: int | None = None  # Vela's per-layer estimate of its NPU cycles
    commands: int = 0  # NPU_OP_* commands attributed to it
    vela_operations: list[str] = field(default_factory=list)  # Vela's operations, "Operator name"
    bytes: dict = field(default_factory=dict)  # region name -> {"read": n, "write": n}
    axi_bytes: dict = field(default_factory=dict)  # "axi0"/"axi1" -> {"read": n, "write": n}
    cpu_instructions: int | None = None  # not measured by the host profile
    start_cycle: int | None = None  # where its NPU work starts on the delegate's timeline

    @property
    def agreement(self) -> float | None:
        """npu_cycles / vela_npu_cycles, where Vela gives a figure."""
        if not self.vela_npu_cycles or self.npu_cycles is None:
            return None
        return self.npu_cycles / self.vela_npu_cycles


@dataclass
class Delegate:
    index: int
    pmu_cycles: int  # the NPU model's PMU cycle count for the delegate's stream
    vela_npu_cycles: int  # Vela's summary figure
    weight_bytes: int
    scratch_bytes: int
    fast_scratch_bytes: int
    tensors: list[dict]  # Vela's allocation of the delegate's tensors
    operations: list[dict]  # per Vela operation: name, operator, layer, vela and model cycles
    cpu_instructions: int | None = None  # the CPU's instructions in the delegate call (measured runs)


@dataclass
class Profile:
    model: str
    target: str
    system_config: str
    memory_mode: str
    layers: list[Layer]
    delegates: list[Delegate]
    schedule: list[tuple[str, object]]  # ("cpu", layer name) or ("npu", delegate index), in run order
    planned: list[dict]  # the program's planned buffer: one entry per value (name, offset, size)
    planned_bytes: int
    cpu_measured: bool = False  # CPU instructions counted on the virtual platform
    platform_pmu_cycles: int | None = None  # the firmware's NPU PMU total on the virtual platform
    cpu_instructions_total: int | None = None  # all program instructions' CPU instructions
    image: dict | None = None  # the runner build's memory report (measured runs): regions, buffers, parts

    @property
    def total_npu_cycles(self) -> int:
        return sum(d.pmu_cycles for d in self.delegates)

    def to_json(self) -> dict:
        layers = []
        for layer in self.layers:
            entry = asdict(layer)
            entry["vs_vela"] = None if layer.agreement is None else round(layer.agreement, 4)
            layers.append(entry)
        compared = [layer for layer in self.layers if layer.agreement is not None]
        worst = max(compared, key=lambda x: abs(x.agreement - 1), default=None)
        return {
            "model": self.model,
            "target": self.target,
            "system_config": self.system_config,
            "memory_mode": self.memory_mode,
            "layers": layers,
            "total_npu_cycles": self.total_npu_cycles,
            "vela_npu_cycles": sum(d.vela_npu_cycles for d in self.delegates),
            "worst_layer_vs_vela": None if worst is None else {"name": worst.name, "ratio": round(worst.agreement, 4)},
            "cpu_instructions_measured": self.cpu_measured,
            "cpu_instructions_note": (
                "per program instruction, from the virtual platform's counter (calls of Method::run_instruction)"
                if self.cpu_measured
                else "not measured: kiln profile --cpu-instructions counts them on the virtual platform"
            ),
            "cpu_instructions_total": self.cpu_instructions_total,
            "platform_pmu_cycles": self.platform_pmu_cycles,
            "delegates": [asdict(d) for d in self.delegates],
            "schedule": [list(s) for s in self.schedule],
            "planned": self.planned,
            "planned_bytes": self.planned_bytes,
            "image": self.image,
        }


def _inputs(compiled) -> list[np.ndarray]:
    """Zero inputs of the delegate's sizes (the cycle estimate and the bytes moved do not
    depend on values)."""
    return [np.zeros(int(np.prod(t.shape)) * t.elem_size, np.uint8) for t in compiled.inputs]


def _delegate(
    index: int,
    tosa: bytes,
    cmd_data: bytes,
    owners: list[str | None],
    fallback: str,
    layers: dict,
    model: str,
    target: str,
    system_config: str,
    memory_mode: str,
    config,
) -> Delegate:
    """Delegate `index` (its TOSA graph, compiled to `cmd_data`) profiled: its commands' cycles and
    bytes added to `layers` (by name; owners: the layer of each TOSA operator, None for none, then
    `fallback`), and Vela's per-operation estimate beside them."""
    from kiln.simulator.npu.profile import profile_compiled

    record = vela_record(tosa, f"{model}_{index}", target, system_config, memory_mode)
    if record.result.cmd_data != cmd_data:
        raise InternalError(
            f"Vela compiled delegate {index} to another command stream with its debug "
            "database on; the profile would not be of the compiled program"
        )
    stream = profile_compiled(record.result, _inputs(record.result), config)
    # each command to the Vela operation whose NPU_OP_* it is or precedes
    offsets = [op.offset for op in record.operations]
    owner_of_vela = [
        owners[op.tosa_index] if op.tosa_index is not None and op.tosa_index < len(owners) else None
        for op in record.operations
    ]
    groups: dict[str, list[int]] = {}
    which: list[int] = []
    first_of_operation: dict[int, int] = {}  # the NPU model's operation -> its first command's Vela op
    for position, command in enumerate(stream.commands):
        k = next((j for j, offset in enumerate(offsets) if command.index * 4 <= offset), len(offsets) - 1)
        if command.operation is not None:  # a chained elementwise costs in its producer's operation
            k = first_of_operation.setdefault(command.operation, k)
        which.append(k)
        layer_name = (owner_of_vela[k] if k >= 0 else None) or fallback
        groups.setdefault(layer_name, []).append(position)
    names = list(groups)
    cycles = stream.cycles_of([groups[n] for n in names])
    cursor = 0
    for n, c in zip(names, cycles):
        layer = layers.setdefault(n, Layer(n, "?", "", "npu", npu_cycles=0))
        layer.delegate = index
        layer.npu_cycles = (layer.npu_cycles or 0) + c
        layer.start_cycle = cursor if layer.start_cycle is None else layer.start_cycle
        cursor += c
        layer.commands += len(groups[n])
        for position in groups[n]:
            for (region, direction), count in stream.commands[position].traffic.items():
                key = REGION_NAMES.get(region, f"region{region}")
                layer.bytes.setdefault(key, {"read": 0, "write": 0})[direction] += count
                port = f"axi{stream.ports[region]}"
                layer.axi_bytes.setdefault(port, {"read": 0, "write": 0})[direction] += count
    model_cycles_of_vela = [0.0] * len(record.operations)
    for position, k in enumerate(which):
        if k >= 0:
            model_cycles_of_vela[k] += stream.commands[position].cycles
    operations: dict[int, dict] = {}  # by scheduled operation: one queue row per command of it
    for k, (op, owner) in enumerate(zip(record.operations, owner_of_vela)):
        if op.scheduled_id not in operations:
            layer = layers.setdefault(owner or fallback, Layer(owner or fallback, "?", "", "npu", npu_cycles=0))
            layer.vela_npu_cycles = (layer.vela_npu_cycles or 0) + op.npu_cycles
            layer.vela_operations.append(f"{op.operator} {op.name}")
            operations[op.scheduled_id] = {
                "name": op.name,
                "operator": op.operator,
                "layer": owner or fallback,
                "vela_npu_cycles": op.npu_cycles,
                "npu_cycles": 0.0,
            }
        operations[op.scheduled_id]["npu_cycles"] += model_cycles_of_vela[k]
    for entry in operations.values():
        entry["npu_cycles"] = round(entry["npu_cycles"], 1)
    return Delegate(
        index,
        stream.cycles,
        record.result.npu_cycles,
        len(record.result.weight_data),
        record.result.scratch_size,
        record.result.fast_scratch_size,
        record.tensors,
        list(operations.values()),
    )


def profile(result, target: boards.Target | None = None, name: str | None = None) -> Profile:
    """The profile of `result`, a kiln.compile.Result (compile_model's) for `target` (default:
    the report's target on its reference board)."""
    from kiln.simulator.npu.config import config_for

    report = result.report
    family = (target if target is not None else boards.target(report["target"])).npu
    name_of_target, system_config, memory_mode = report["target"], report["system_config"], report["memory_mode"]
    config = config_for(name_of_target, system_config, memory_mode)
    layers = {op["node"]: Layer(op["node"], op["op"], op["module"], op["where"]) for op in report["ops"]}
    for layer in layers.values():
        if layer.where == "npu":
            layer.npu_cycles = 0
    delegates = []
    for index, (partition, tosa) in enumerate(zip(result.program.delegates, result.tosa)):
        owners = tosa_op_owners(partition, family, tosa, result.flipped[index])
        fallback = partition.ops[-1].name if partition.ops else f"delegate {index}"
        delegates.append(
            _delegate(
                index,
                tosa,
                result.vela[index].cmd_data,
                owners,
                fallback,
                layers,
                report["model"],
                name_of_target,
                system_config,
                memory_mode,
                config,
            )
        )
    schedule = []
    for unit in result.partitioning.schedule:
        if hasattr(unit, "ops"):
            schedule.append(("npu", next(i for i, p in enumerate(result.program.delegates) if p is unit)))
        else:
            schedule.append(("cpu", unit.name))
    prog = result.program
    planned = []
    for value_id, offset in sorted(prog.offsets.items(), key=lambda item: item[1]):
        value = next((ev.value for ev in prog.values if ev.kind == "tensor" and id(ev.value) == value_id), None)
        if value is None:
            continue
        planned.append({"name": value.name, "offset": int(offset), "size": value.nbytes()})
    return Profile(
        name or report["model"],
        name_of_target,
        system_config,
        memory_mode,
        list(layers.values()),
        delegates,
        schedule,
        planned,
        int(prog.planned_size),
    )


def tosa_op_labels(tosa: bytes) -> list[str | None]:
    """Per operator of a TOSA graph, "KIND output-tensor" (None for constants): the layers of a
    .pte's delegate, which records no map from TOSA operators back to the model's ops."""
    from tosa.Op import Op
    from tosa.TosaGraph import TosaGraph

    kinds = {value: name for name, value in vars(Op).items() if not name.startswith("_")}
    block = TosaGraph.GetRootAs(tosa, 0).Regions(0).Blocks(0)
    labels = []
    for i in range(block.OperatorsLength()):
        operator = block.Operators(i)
        kind = kinds.get(operator.Op(), "?")
        out = operator.Outputs(0).decode() if operator.OutputsLength() else ""
        labels.append(None if kind.startswith("CONST") else f"{kind} {out}")
    return labels


def profile_pte(path: Path) -> Profile:
    """The profile of a kiln .pte with its compile report (.json) beside it. The .pte keeps each
    delegate's TOSA graph (named data kiln/tosa/<i>) but not which model op each operator came
    from, so its NPU layers are the TOSA operators Vela's operations came from ("CONV2D
    layer-2"); profile the model itself for the model's op names and module paths."""
    from kiln.errors import UsageError
    from kiln.lower import ethosu_payload
    from kiln.pte.reader import deserialize
    from kiln.pte.schema import TOSA_KEY
    from kiln.simulator.npu.config import config_for

    path = Path(path)
    report_path = path.with_suffix(".json")
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    if not report_path.is_file():
        raise UsageError(f"{path}: no compile report {report_path.name} beside it (kiln compile writes one)")
    report = json.loads(report_path.read_text())
    f = deserialize(path.read_bytes())
    named, plan = f.named(), f.forward()
    target, system_config, memory_mode = report["target"], report["system_config"], report["memory_mode"]
    config = config_for(target, system_config, memory_mode)
    layers = {
        op["node"]: Layer(op["node"], op["op"], op["module"], "cpu") for op in report["ops"] if op["where"] == "cpu"
    }
    delegates = []
    for index, delegate in enumerate(plan.delegates):
        key = TOSA_KEY.format(index)
        if key not in named:
            raise UsageError(f"{path}: delegate {index} carries no TOSA graph ({key}); profile the model instead")
        payload = ethosu_payload.decode(f.delegate_payload(delegate), named)
        delegates.append(
            _delegate(
                index,
                named[key],
                payload.cmd_data,
                tosa_op_labels(named[key]),
                f"delegate {index}",
                layers,
                report["model"],
                target,
                system_config,
                memory_mode,
                config,
            )
        )
    for layer in layers.values():
        if layer.op == "?":
            layer.op = f"tosa.{layer.name.split()[0]}"
    of_partition = {d["partition"]: d["delegate"] for d in report.get("delegates", [])}
    schedule: list[tuple[str, object]] = []
    for op in report["ops"]:
        if op["where"] == "cpu":
            schedule.append(("cpu", op["node"]))
        elif op.get("partition") in of_partition and ("npu", of_partition[op["partition"]]) not in schedule:
            schedule.append(("npu", of_partition[op["partition"]]))
    ordered = []
    for kind, what in schedule:
        ordered += (
            [layers[what]]
            if kind == "cpu"
            else sorted(
                (x for x in layers.values() if x.where == "npu" and x.delegate == what),
                key=lambda x: x.start_cycle or 0,
            )
        )
    return Profile(
        report["model"],
        target,
        system_config,
        memory_mode,
        ordered,
        delegates,
        schedule,
        [],
        int(report.get("memory", {}).get("planned_bytes", 0)),
    )


# ---- CPU instructions on the virtual platform -------------------------------------------------

RUN_INSTRUCTION = "kiln::runtime::Method::run_instruction"  # called once per program instruction


def instruction_owners(result) -> list[tuple[str, object]]:
    """Per instruction of `result`'s program, in order: ("cpu", op name) for a kernel call (an op
    on the CPU may take several: dequantize, kernel, quantize) or ("npu", delegate index),
    from the program builder run again over the schedule."""
    from kiln.partition.partitioner import Partition
    from kiln.program.builder import _Builder

    builder = _Builder(result.program.integer_kernels)
    reasons = {id(p.op): p.reason for p in result.partitioning.placements}
    owners: list[tuple[str, object]] = []
    delegates = 0
    for unit in result.partitioning.schedule:
        if isinstance(unit, Partition):
            owners.append(("npu", delegates))
            delegates += 1
            continue
        before = len(builder.instructions)
        builder.kernel_call(unit, reasons[id(unit)])
        owners += [("cpu", unit.name)] * (len(builder.instructions) - before)
    if len(owners) != len(result.program.instructions):
        raise InternalError(
            f"the program has {len(result.program.instructions)} instructions, the schedule gives {len(owners)}"
        )
    return owners


def count_cpu(
    p: Profile,
    owners: list[tuple[str, object]],
    calls: list[int],
    pmu_cycles: int | None = None,
    image: dict | None = None,
) -> None:
    """Fills into `p` the CPU instructions of the first inference of a run of its program that
    counted each call of RUN_INSTRUCTION (`calls`, every inference's in order): per `owners`
    entry (one per program instruction: ("cpu", layer name or None for a call no layer owns) or
    ("npu", delegate index)) to that layer or delegate, the sum to cpu_instructions_total; and
    the run's first NPU PMU total (`pmu_cycles`) and its runner's memory report (`image`). A
    RunnerError when the calls are not a whole number of inferences of the program."""
    from kiln.errors import RunnerError

    if len(calls) < len(owners) or len(calls) % len(owners):
        raise RunnerError(
            f"counted {len(calls)} calls of {RUN_INSTRUCTION} for a program of {len(owners)} instructions"
        )
    calls = calls[: len(owners)]  # the first inference
    layers = {layer.name: layer for layer in p.layers}
    for (kind, what), count in zip(owners, calls):
        if kind == "npu":
            p.delegates[what].cpu_instructions = count
        elif what is not None:
            layers[what].cpu_instructions = (layers[what].cpu_instructions or 0) + count
    p.platform_pmu_cycles = pmu_cycles
    p.cpu_instructions_total = sum(calls)
    p.image = image
    p.cpu_measured = True


# ---- a built runner's ELF and the .pte it was built from --------------------------------------

BAKED_SYMBOLS = ("kiln_model_pte", "kiln_model_pte_end")  # where the runner's image holds its .pte


def baked_program(elf: Path) -> bytes | None:
    """The .pte bytes kiln's executor runner ELF embeds (between BAKED_SYMBOLS, as
    kiln.firmware.runner_build bakes it), or None when the ELF has no such symbols."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with open(elf, "rb") as stream:
        f = ELFFile(stream)
        table = next((s for s in f.iter_sections() if isinstance(s, SymbolTableSection)), None)
        found = {}
        for name in BAKED_SYMBOLS:
            symbols = table.get_symbol_by_name(name) if table is not None else None
            if not symbols:
                return None
            found[name] = symbols[0]["st_value"]
        start, end = (found[name] for name in BAKED_SYMBOLS)
        for section in f.iter_sections():
            base = section["sh_addr"]
            if section["sh_type"] == "SHT_PROGBITS" and base <= start and end <= base + section["sh_size"]:
                return section.data()[start - base : end - base]
    return None


def check_baked(elf: Path, pte_path: Path) -> None:
    """A UsageError unless `elf` is an executor runner that bakes exactly the program of `pte_path`
    (the .pte as kiln build bakes it: without run-host's reference data)."""
    import hashlib

    from kiln.errors import PteError, UsageError
    from kiln.pte.reader import deserialize
    from kiln.pte.writer import without_reference_data

    baked = baked_program(elf)
    if baked is None:
        raise UsageError(
            f"{elf} is not kiln's executor runner (no {BAKED_SYMBOLS[0]} in it): --profile profiles "
            "a runner built with `kiln build --pte`"
        )
    try:
        expected = without_reference_data(deserialize(Path(pte_path).read_bytes()))
    except PteError as error:
        raise UsageError(f"{pte_path} is not a valid .pte: {error}") from None
    if baked != expected:
        digest = lambda data: hashlib.sha256(data).hexdigest()[:12]  # noqa: E731
        raise UsageError(
            f"{elf.name} was not built from {Path(pte_path).name}: it bakes a {len(baked):,}-byte program "
            f"(sha256 {digest(baked)}), the .pte as baked is {len(expected):,} bytes (sha256 "
            f"{digest(expected)}); give the .pte the ELF was built from"
        )


def pte_instruction_owners(pte_path: Path, p: Profile) -> list[tuple[str, object]]:
    """Per instruction of a .pte's program, as instruction_owners: a delegate call is its
    delegate's; kernel calls go to p's CPU layers (the report's CPU ops, in order) only when
    there is one per CPU op and each calls its op's operator (its name, the namespace aside; a .pte
    does not record which op a kernel call belongs to, and a quantized op run on the CPU takes
    several), else to none."""
    from kiln.pte.reader import deserialize
    from kiln.pte.schema import DelegateCall, KernelCall

    plan = deserialize(Path(pte_path).read_bytes()).forward()
    owners: list[tuple[str, object]] = []
    kernels = []
    for instruction in (i for chain in plan.chains for i in chain.instructions):  # kiln writes one chain
        if isinstance(instruction, DelegateCall):
            owners.append(("npu", instruction.delegate_index))
        else:
            owners.append(("cpu", None))
            kernels.append((len(owners) - 1, instruction))
    cpu = [layer for layer in p.layers if layer.where == "cpu"]
    names = [plan.operators[k.op_index].name if isinstance(k, KernelCall) else None for _, k in kernels]
    # the operator's own name, its namespace aside (quantized_decomposed.quantize_per_tensor runs as
    # cortex_m::quantize_per_tensor)
    same = all(n is not None and n.split("::")[-1] == layer.op.split(".")[-1] for n, layer in zip(names, cpu))
    if len(cpu) == len(kernels) and same:
        for (position, _), layer in zip(kernels, cpu):
            owners[position] = ("cpu", layer.name)
    return owners


# ---- output ----------------------------------------------------------------------------------


def _kib(n: int) -> str:
    return f"{n:,}" if n < 10_000 else f"{n / 1024:,.1f}K"


def format_table(p: Profile) -> str:
    """The per-layer table printed in the terminal."""
    lines = [
        f"{p.model} on {p.target} ({p.system_config}, {p.memory_mode}): "
        f"{p.total_npu_cycles:,} NPU cycles (the NPU model's PMU count), "
        f"Vela {sum(d.vela_npu_cycles for d in p.delegates):,}"
    ]
    header = (
        f"{'layer':28} {'module':22} {'where':5} {'NPU cycles':>10} {'Vela':>8} {'model/Vela':>10} "
        f"{'read':>8} {'written':>8}  AXI0 rd/wr, AXI1 rd/wr"
    )
    lines += [header, "-" * len(header)]
    for layer in p.layers:
        if layer.where == "npu" and not layer.commands and not layer.vela_npu_cycles:
            continue  # folded into another op's commands (a reshape Vela makes free)
        read = sum(b["read"] for b in layer.bytes.values())
        written = sum(b["write"] for b in layer.bytes.values())
        ratio = "" if layer.agreement is None else f"{layer.agreement:.3f}"
        vela_c = "" if layer.vela_npu_cycles is None else f"{layer.vela_npu_cycles:,}"
        cycles = "-" if layer.npu_cycles is None else f"{layer.npu_cycles:,}"
        if layer.where == "npu":
            axi = " ".join(
                f"{_kib(layer.axi_bytes.get(port, {}).get(d, 0))}"
                for port in ("axi0", "axi1")
                for d in ("read", "write")
            )
        elif layer.cpu_instructions is None:
            axi = "CPU instructions: not measured"
        else:
            axi = f"CPU instructions: {layer.cpu_instructions:,}"
        module = layer.module if len(layer.module) <= 22 else "…" + layer.module[-21:]
        lines.append(
            f"{layer.name[:28]:28} {module:22} {layer.where:5} {cycles:>10} {vela_c:>8} "
            f"{ratio:>10} {_kib(read) if layer.where == 'npu' else '':>8} "
            f"{_kib(written) if layer.where == 'npu' else '':>8}  {axi}"
        )
    hidden = [
        layer.name for layer in p.layers if layer.where == "npu" and not layer.commands and not layer.vela_npu_cycles
    ]
    if hidden:
        lines.append(
            f"({len(hidden)} NPU op(s) ran no commands of their own (Vela folded them, or chained them "
            f"into the op before): {', '.join(hidden[:6])}"
            f"{', ...' if len(hidden) > 6 else ''})"
        )
    lines.append(f"sum of the layers' NPU cycles: {sum(x.npu_cycles or 0 for x in p.layers):,}")
    if p.cpu_measured:
        driver = ", ".join(f"delegate {d.index} {d.cpu_instructions:,}" for d in p.delegates)
        lines.append(
            f"CPU instructions (virtual platform): {p.cpu_instructions_total:,} in all; in delegate calls "
            f"{driver or '-'}; the firmware's NPU PMU total there: {p.platform_pmu_cycles}"
        )
    else:
        lines.append("CPU ops' instructions: not measured (--cpu-instructions counts them on the virtual platform)")
    return "\n".join(lines)


def write(p: Profile, output: Path) -> list[Path]:
    """profile.json, timeline.png, memory.png and profile.html in `output`."""
    from kiln.reference import profile_plots

    output.mkdir(parents=True, exist_ok=True)
    written = [output / "profile.json"]
    written[0].write_text(json.dumps(p.to_json(), indent=1) + "\n")
    written += profile_plots.write(p, output, format_table(p))
    return written

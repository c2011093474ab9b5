"""A plain-Python mutation fuzzer of kiln's host-side .pte readers (issue 14, item 1c).

The target (`execute`) is what kiln does with a .pte it is given: kiln.pte.reader,
`kiln build`'s reader and planner (kiln.firmware.runner_build.plan: payloads, compile specs,
memory placement, the program rewritten without reference data) and `kiln run-host`
(kiln.reference.run_host.run_files: the interpreter, every kernel, the delegates on
tosa_reference_model or kiln's NPU model), inputs of zeros of the sizes the program names.
A finding is an input on which the target raises anything but a KilnError, takes longer
than EXECUTION_BOUND_S, runs out of the worker's memory bound (MEMORY_BOUND_BYTES beyond
what the worker holds after its imports) or kills the worker.

Seeds are kiln-written programs: one single-kernel program per case of the firmware's
kernel tests (tests/firmware/runtime/test_kernels_*.py, built by tests/firmware/runtime/helpers.single_kernel),
models compiled by kiln (delegated, --io int8, CPU-only) and ExecuTorch's fixtures
(tests/fixtures/executorch). Mutations are byte-level (bit flips, interesting integers,
cuts, duplicated or deleted runs, the format's magic strings) and structural (a field of the
deserialized program changed, then written again with kiln.pte.writer.serialize).

    run(seconds, seed) -> {"executions", "executions_per_second", "findings", ...}

runs the loop in worker subprocesses (a crash or a hang takes the worker, not the caller,
and its input is kept); `python tests/fuzz/python/mutate.py --seconds S --seed N` prints
the figures. CORPUS holds every input that ever found a defect; test_mutate.py replays it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CORPUS = HERE / "corpus"
KERNEL_TESTS = ROOT / "tests" / "firmware" / "runtime"
EXECUTORCH_FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
TARGET = "ethos-u55-128"
# One execution of the target; the slowest seed takes under 1 s, a stream with 64K x 64K
# feature maps about 5 s.
EXECUTION_BOUND_S = 10.0
MEMORY_BOUND_BYTES = 2 << 30  # address space a worker may add to what its imports took
MAX_INPUT_BYTES = 64 << 20  # a program input larger than this gets a short file (the size check)
# Kiln-compiled seed programs: (model, options of kiln.spec.CompileSpec).
COMPILED_SEEDS = (
    ("tiny_cnn", {}),
    ("tiny_cnn", {"io": "int8"}),
    ("tiny_cnn", {"delegate": False}),
    ("fc_autoencoder", {}),
)
# Strings of the format a mutation may write anywhere (FlatBuffer identifier, extended
# header, Vela's payload blocks and command streams, kiln's compile specs and named data).
DICTIONARY = (
    b"ET12",
    b"eh00",
    b"COP1",
    b"COP2",
    b"vela_bin_stream",
    b"vela_end_stream",
    b"cmd_data",
    b"weight_data",
    b"scratch_size",
    b"inputs",
    b"outputs",
    b"EthosUBackend",
    b"kiln/tosa/0",
    b"kiln.memory_mode",
    b"kiln.fast_scratch_size",
    b"Dedicated_Sram",
    b"Sram_Only",
    b"target",
    b"ethos-u55-128",
    b"ethos-u85-256",
    b"forward",
    b"out",
    b"aten::",
    b"\x00" * 8,
    b"\xff" * 8,
)
INTERESTING = (
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    15,
    16,
    31,
    32,
    63,
    64,
    127,
    128,
    255,
    256,
    1023,
    1024,
    4095,
    4096,
    65535,
    65536,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    0xFFFFFFFE,
    0x40000000,
    0x10000,
)


# --- The target ---------------------------------------------------------------------------


class Hang(BaseException):
    """One execution ran past EXECUTION_BOUND_S (a BaseException: no `except Exception` in
    kiln swallows it)."""


def execute(data: bytes, workdir: Path) -> None:
    """Runs every host-side reader of a .pte on `data`; raises whatever they raise."""
    from kiln.errors import KilnError
    from kiln.firmware import runner_build
    from kiln.pte.reader import deserialize
    from kiln.pte.schema import Tensor
    from kiln.reference import run_host

    path = workdir / "program.pte"
    path.write_bytes(data)
    report = workdir / "program.json"  # a stale report would choose the memory mode
    report.unlink(missing_ok=True)
    f = deserialize(data)
    try:
        runner_build.plan(path, TARGET)
    except KilnError:
        pass  # run-host may still run what the firmware build refuses
    plan = f.forward()
    inputs = []
    for n, i in enumerate(plan.inputs):
        value = plan.values[i]
        size = value.nbytes if isinstance(value, Tensor) else 0
        inputs.append(workdir / f"input_{n}.bin")
        with open(inputs[-1], "wb") as f:
            f.truncate(size if size <= MAX_INPUT_BYTES else 1)  # zeros, sparse
    run_host.run_files(str(path), [str(p) for p in inputs], str(workdir / "out"))


def warm_up() -> None:
    """What the first execution would otherwise pay for inside its time bound: kiln's readers
    imported, and the isolation server started with the delegates' engines imported."""
    import kiln.firmware.runner_build  # noqa: F401
    import kiln.reference.run_host  # noqa: F401
    from kiln import isolation

    for module in ("kiln.reference.isolated_npu", "kiln.reference.isolated_tosa"):
        isolation.prepare(module, wait=True)


def classify(data: bytes, workdir: Path) -> str | None:
    """None when `execute` ends or raises a KilnError; else what it did instead (one line)."""
    from kiln.errors import KilnError

    try:
        signal.setitimer(signal.ITIMER_REAL, EXECUTION_BOUND_S)
        try:
            execute(data, workdir)
        finally:  # inside the outer try: an alarm up to here is a Hang caught below
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KilnError:
        return None
    except Hang:
        return f"hang: more than {EXECUTION_BOUND_S:g} s"
    except Exception as error:  # noqa: BLE001 - what the fuzzer looks for
        import traceback

        where = traceback.extract_tb(error.__traceback__)[-1]
        return f"{type(error).__name__} at {Path(where.filename).name}:{where.lineno}: {str(error)[:200]}"
    return None


def _raise_hang(signum, frame):
    raise Hang()


# --- Seeds ----------------------------------------------------------------------------------


def seeds() -> list[bytes]:
    """The seed programs, in a fixed order."""
    out = [p.read_bytes() for p in sorted(EXECUTORCH_FIXTURES.glob("*.pte"))]
    out += _compiled_seeds()
    out += _kernel_seeds()
    return out


def _compiled_seeds() -> list[bytes]:
    import io
    from contextlib import redirect_stdout

    from kiln import compile as kc
    from kiln.spec import CompileSpec

    out = []
    with tempfile.TemporaryDirectory() as d:
        for n, (model, options) in enumerate(COMPILED_SEEDS):
            with redirect_stdout(io.StringIO()):
                result = kc.compile_model(model, CompileSpec(TARGET, **options), log=lambda line: None)
                kc.write(result, Path(d) / f"{n}.pte")
            out.append((Path(d) / f"{n}.pte").read_bytes())
    return out


def _kernel_seeds() -> list[bytes]:
    """One program per case of the firmware's kernel tests (every kernel kiln has)."""
    import importlib

    if str(ROOT) not in sys.path:  # as pytest puts it there: tests is a package
        sys.path.insert(0, str(ROOT))
    from tests.firmware.runtime.helpers import single_kernel

    out = []
    for module in sorted(KERNEL_TESTS.glob("test_kernels_*.py")):
        cases = getattr(importlib.import_module(f"tests.firmware.runtime.{module.stem}"), "CASES", {})
        for name in sorted(cases):
            data, _ = single_kernel(*cases[name])
            out.append(data)
    return out


# --- Mutations -------------------------------------------------------------------------------


def mutate(data: bytes, rng: random.Random, others: list[bytes]) -> bytes:
    """One to four mutations of `data`; structural ones half the time."""
    if rng.random() < 0.5:
        mutated = _structural(data, rng)
        if mutated is not None:
            data = mutated
            if rng.random() < 0.7:
                return data
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        _byte_mutation(out, rng, others)
    return bytes(out)


def _byte_mutation(out: bytearray, rng: random.Random, others: list[bytes]) -> None:
    if not out:
        out.extend(rng.randbytes(rng.randint(1, 64)))
        return
    at = rng.randrange(len(out))
    kind = rng.randrange(9)
    if kind == 0:  # a bit flip
        out[at] ^= 1 << rng.randrange(8)
    elif kind == 1:  # an interesting byte
        out[at] = rng.choice((0, 1, 0x7F, 0x80, 0xFF))
    elif kind in (2, 3):  # an interesting 32-bit integer, or a small change of one
        if len(out) >= 4:
            at = rng.randrange(0, len(out) - 3) & ~3 if rng.random() < 0.8 else rng.randrange(len(out) - 3)
            if kind == 2:
                value = rng.choice(INTERESTING + (len(out), len(out) - at))
            else:
                value = struct.unpack_from("<I", out, at)[0] + rng.randint(-16, 16)
            struct.pack_into("<I", out, at, value & 0xFFFFFFFF)
    elif kind == 4:  # cut the file
        del out[rng.randrange(len(out)) :]
    elif kind == 5:  # delete a run
        del out[at : at + rng.randint(1, 64)]
    elif kind == 6:  # duplicate a run
        n = rng.randint(1, 64)
        out[at:at] = out[at : at + n]
    elif kind == 7:  # a string of the format
        word = rng.choice(DICTIONARY)
        out[at : at + len(word)] = word
    else:  # splice in part of another program
        other = rng.choice(others)
        if other:
            start = rng.randrange(len(other))
            out[at : at + rng.randint(1, 256)] = other[start : start + rng.randint(1, 256)]


def _structural(data: bytes, rng: random.Random) -> bytes | None:
    """The program with one field changed, written again; None when it cannot be read or written."""
    from kiln.errors import KilnError
    from kiln.lower import ethosu_payload
    from kiln.pte.reader import deserialize
    from kiln.pte.schema import (
        Bool,
        DataLocation,
        DataReference,
        DelegateCall,
        DelegateCompileSpec,
        Double,
        Int,
        IntList,
        KernelCall,
        Null,
        Operator,
        PteProgram,
        ScalarType,
        Tensor,
        TensorList,
    )
    from kiln.pte.writer import serialize

    try:
        f = deserialize(data)
        plan = f.forward()
    except KilnError:
        return None
    if not plan.chains:
        return None
    values, chain = list(plan.values), plan.chains[0]
    instructions = list(chain.instructions)
    delegates, payloads = list(plan.delegates), [f.delegate_payload(d) for d in plan.delegates]
    named = f.named()
    cs = f.program.constant_segment
    n_constants = len(cs.offsets) if cs is not None and cs.offsets else len(f.program.constant_buffers)
    constants = [f.constant(i) for i in range(1, n_constants)]
    fields = dict(inputs=list(plan.inputs), outputs=list(plan.outputs), sizes=list(plan.non_const_buffer_sizes))

    def number():
        return rng.choice((0, 1, -1, 2, 3, 255, 256, 65536, 2**31 - 1, -(2**31), 2**40, rng.randint(-8, 64)))

    kind = rng.randrange(8)
    if kind == 0 and values:  # a tensor's shape, type or placement
        i = rng.randrange(len(values))
        v = values[i]
        if isinstance(v, Tensor):
            what = rng.randrange(4)
            if what == 0 and v.sizes:
                sizes = list(v.sizes)
                sizes[rng.randrange(len(sizes))] = rng.choice((0, 1, 2, 7, 1000, 65536, 2**31 - 1))
                values[i] = replace(v, sizes=sizes)
            elif what == 1:
                values[i] = replace(v, scalar_type=rng.choice(list(ScalarType)))
            elif what == 2:
                extra = rng.choice((0, 1, 3))
                values[i] = replace(v, sizes=list(v.sizes) + [extra], dim_order=list(range(len(v.sizes) + 1)))
            else:
                values[i] = replace(v, allocation_info=None, data_buffer_idx=0)
        elif isinstance(v, Int):
            values[i] = Int(rng.choice((number(), -v.value, v.value + 1, 2**62, -(2**63))))
        elif isinstance(v, Double):
            values[i] = Double(rng.choice((0.0, -1.0, 1e300, float("nan"), float("inf"), 1e-45)))
        elif isinstance(v, Bool):
            values[i] = Bool(not v.value)
        elif isinstance(v, (IntList, TensorList)) and len(values) > 1:
            items = list(v.items)
            if items and rng.random() < 0.5:
                del items[rng.randrange(len(items))]
            else:
                items.append(rng.randrange(len(values)))
            values[i] = type(v)(items)
        else:
            values[i] = rng.choice((Null(), Int(number()), Double(1.5), Bool(True)))
    elif kind == 1 and instructions:  # an instruction's arguments
        k = rng.randrange(len(instructions))
        ins = instructions[k]
        if isinstance(ins, (KernelCall, DelegateCall)) and ins.args:
            args = list(ins.args)
            j = rng.randrange(len(args))
            what = rng.randrange(3)
            if what == 0:
                args[j] = rng.randrange(len(values))
            elif what == 1:
                del args[j]
            else:
                args.insert(j, rng.randrange(len(values)))
            instructions[k] = replace(ins, args=args)
    elif kind == 2 and instructions:  # instructions dropped, repeated or swapped
        k = rng.randrange(len(instructions))
        what = rng.randrange(3)
        if what == 0:
            del instructions[k]
        elif what == 1:
            instructions.insert(k, instructions[rng.randrange(len(instructions))])
        else:
            j = rng.randrange(len(instructions))
            instructions[k], instructions[j] = instructions[j], instructions[k]
    elif kind == 3:  # inputs, outputs or buffer sizes
        name = rng.choice(list(fields))
        items = fields[name]
        if items and rng.random() < 0.5:
            j = rng.randrange(len(items))
            items[j] = number() if name == "sizes" else rng.randrange(len(values))
        elif values:
            items.append(rng.randrange(len(values)) if name != "sizes" else rng.choice((16, 2**33)))
    elif kind == 4 and plan.operators:  # another operator
        operators = list(plan.operators)
        from kiln.program.kernels import by_name

        name, overload = rng.choice(sorted(by_name()))
        operators[rng.randrange(len(operators))] = Operator(name, overload)
        plan = replace(plan, operators=operators)
    elif kind == 5 and payloads:  # a delegate payload's fields
        d = rng.randrange(len(payloads))
        try:
            p = ethosu_payload.decode(payloads[d], named)
        except KilnError:
            return None
        ios = list(p.inputs + p.outputs)
        scratch, cmd, weights = p.scratch_size, bytearray(p.cmd_data), p.weight_data
        what = rng.randrange(4)
        if what == 0:
            scratch = rng.choice((0, 1, 2**20, 2**32 - 1))
        elif what == 1 and ios:
            j = rng.randrange(len(ios))
            io = ios[j]
            field = rng.choice(("elem_size", "offset", "region", "shape"))
            if field == "shape":
                shape = list(io.shape)
                shape[rng.randrange(len(shape))] = rng.choice((0, -1, 65536, 2**31 - 1))
                ios[j] = replace(io, shape=shape)
            else:
                ios[j] = replace(io, **{field: rng.choice((-1, 0, 1, 7, 2**31 - 1, 2**20))})
        elif what == 2 and len(cmd) > 8:
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(4, len(cmd) - 3) & ~3
                word = struct.unpack_from("<I", cmd, at)[0]
                choice = rng.randrange(3)
                if choice == 0:  # a command's 16-bit parameter (sizes, strides, regions)
                    word = (word & 0xFFFF) | rng.choice((0, 1, 0xFF, 0x1000, 0x7FFF, 0xFFFF)) << 16
                elif choice == 1:
                    word = rng.choice(INTERESTING)
                else:
                    word ^= 1 << rng.randrange(32)
                struct.pack_into("<I", cmd, at, word)
        else:
            weights = weights[: rng.randrange(len(weights) + 1)]
        try:
            payloads[d] = ethosu_payload.encode(
                bytes(cmd), weights, scratch, ios[: len(p.inputs)], ios[len(p.inputs) :]
            )
        except KilnError:
            return None
    elif kind == 6 and delegates:  # compile specs
        d = rng.randrange(len(delegates))
        specs = list(delegates[d].compile_specs)
        key = rng.choice(
            (
                ethosu_payload.MEMORY_MODE_SPEC,
                ethosu_payload.FAST_SCRATCH_SPEC,
                ethosu_payload.TARGET_SPEC,
                ethosu_payload.COMPILE_FLAGS_SPEC,
            )
        )
        value = rng.choice(
            (
                b"",
                b"Sram_Only",
                b"Dedicated_Sram",
                b"99999999999999",
                b"0",
                b"ethos-u55-64",
                b"--memory-mode=Nowhere --system-config=Ethos_U55_High_End_Embedded",
                b"\xff\xfe",
            )
        )
        specs = [s for s in specs if s.key != key] + [DelegateCompileSpec(key, value)]
        delegates[d] = replace(delegates[d], compile_specs=specs)
    elif kind == 7 and named:  # a reference TOSA graph damaged or dropped
        key = rng.choice(sorted(named))
        blob = bytearray(named[key])
        if blob and rng.random() < 0.8:
            for _ in range(rng.randint(1, 4)):
                blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
            named[key] = bytes(blob)
        else:
            del named[key]
    else:
        return None
    # serialize wants every delegate INLINE, indexing delegate_payloads
    delegates = [replace(d, processed=DataReference(DataLocation.INLINE, i)) for i, d in enumerate(delegates)]
    plan = replace(
        plan,
        values=values,
        chains=[replace(chain, instructions=instructions, stacktrace=None)],
        inputs=fields["inputs"],
        outputs=fields["outputs"],
        non_const_buffer_sizes=fields["sizes"],
        delegates=delegates,
    )
    try:
        return serialize(
            PteProgram([plan], f.program.version), constants=constants, delegate_payloads=payloads, named_data=named
        )
    except (KilnError, struct.error, OverflowError):
        return None


# --- The loop ----------------------------------------------------------------------------------


def _worker(seconds: float, seed: int, state: Path) -> dict:
    """The loop in this process: mutated seeds through `classify` for `seconds`. Before each
    execution the input is written to `state`/current, so a parent can keep what crashed."""
    import resource

    warm_up()  # before the memory bound
    rng = random.Random(seed)
    cached = state / "seeds"  # a restarted worker takes its predecessor's seeds
    if not cached.is_dir():
        cached.with_suffix(".tmp").mkdir()
        for n, data in enumerate(seeds()):
            (cached.with_suffix(".tmp") / f"{n:04}.pte").write_bytes(data)
        cached.with_suffix(".tmp").rename(cached)
    pool = [p.read_bytes() for p in sorted(cached.iterdir())]
    pool += [p.read_bytes() for p in sorted(CORPUS.glob("*.pte"))]
    with open("/proc/self/statm") as statm:
        vm = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY_BOUND_BYTES, resource.RLIM_INFINITY))
    signal.signal(signal.SIGALRM, _raise_hang)
    workdir = state / "work"
    workdir.mkdir(exist_ok=True)
    current = state / "current"
    findings, executions = [], 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        data = mutate(rng.choice(pool), rng, pool)
        current.write_bytes(data)
        what = classify(data, workdir)
        executions += 1
        if what is not None:
            findings.append({"what": what, "input": data.hex()})
    return {"executions": executions, "seconds": time.monotonic() - start, "seeds": len(pool), "findings": findings}


def run(seconds: float, seed: int, findings_dir: Path | None = None) -> dict:
    """Fuzzes for `seconds` from `seed` (the same seed, the same sequence of inputs) and returns
    {"executions", "executions_per_second", "seconds", "seeds", "findings", "restarts"}:
    findings are {"what", "input" (hex)} for inputs that raised anything but a KilnError,
    hung, exhausted the memory bound or killed the worker. `findings_dir`: each finding's
    input is written there as finding-<seed>-<n>.pte too (runs of other seeds may share it).
    The worker's set-up (imports, compiling the seeds: about 10 s) comes on top of `seconds`
    and out of "seconds" and "executions_per_second"."""
    executions, spent, findings, restarts, n_seeds = 0, 0.0, [], 0, 0
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory(prefix="kiln-fuzz-") as d:
        state = Path(d)
        worker_seed = seed
        while True:
            left = deadline - time.monotonic()
            if left <= 0 and restarts + executions > 0:
                break
            result_path = state / "result.json"
            result_path.unlink(missing_ok=True)
            (state / "current").unlink(missing_ok=True)
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                "--seconds",
                f"{max(left, 0.1)}",
                "--seed",
                str(worker_seed),
                "--state",
                str(state),
            ]
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=max(left, 0.1) + 120 + EXECUTION_BOUND_S
            )
            if result_path.is_file():
                result = json.loads(result_path.read_text())
                executions += result["executions"]
                spent += result["seconds"]
                findings += result["findings"]
                n_seeds = result["seeds"]
                break
            restarts += 1  # the worker died: its current input is a finding
            current = state / "current"
            if not current.is_file():
                raise RuntimeError(f"the fuzz worker failed before fuzzing:\n{done.stderr[-4000:]}")
            last = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
            findings.append(
                {"what": f"worker died (status {done.returncode}): {last[:300]}", "input": current.read_bytes().hex()}
            )
            worker_seed = worker_seed * 1_000_003 + 1
    if findings_dir is not None:
        findings_dir.mkdir(parents=True, exist_ok=True)
        for n, finding in enumerate(findings):
            (findings_dir / f"finding-{seed}-{n}.pte").write_bytes(bytes.fromhex(finding["input"]))
    return {
        "executions": executions,
        "executions_per_second": executions / spent if spent else 0.0,
        "seconds": spent,
        "seeds": n_seeds,
        "findings": findings,
        "restarts": restarts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--findings", type=Path, help="write each finding's input here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = _worker(args.seconds, args.seed, args.state)
        (args.state / "result.json").write_text(json.dumps(result))
        return 0
    result = run(args.seconds, args.seed, args.findings)
    for finding in result["findings"]:
        print(f"finding: {finding['what']}")
    print(json.dumps({k: v for k, v in result.items() if k != "findings"} | {"findings": len(result["findings"])}))
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())

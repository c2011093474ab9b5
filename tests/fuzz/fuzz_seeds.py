"""Seed corpora and dictionaries of kiln's libFuzzer targets (tests/fuzz/CMakeLists.txt),
made from kiln itself, so they follow the format wherever it goes.

Seeds of `pte`: programs `kiln compile` writes for ethos-u55-128 (one delegate, two
delegates, CPU-only, `--io int8`, float), without their reference TOSA graphs (run-host's
only: they would triple the inputs) and one with them; one program per CPU kernel case of
the runtime's kernel tests (every CASES of tests/firmware/runtime/test_kernels_*.py, built
by tests/firmware/runtime/helpers.single_kernel); programs of several methods sharing a state
arena (tests/firmware/runtime/state_program.py, toy_lm.py: with a constant method, and decode
alone); ExecuTorch 1.5.1's own .pte files (tests/fixtures/executorch).
Seeds of `bundle`: BundledPrograms of those programs that kiln.reference.bundled makes (a
delegated one and the two-method state program, two cases a method) and ExecuTorch's own
(tests/fixtures/executorch/*.bpte).
Seeds of `payload`: every Ethos-U delegate payload (vela_bin_stream) in those programs;
of `cop1`: the cmd_data (COP1) block of each payload. Both also get each payload's stream
made hostile by every mutation of tests/firmware/runtime/npu_hostile.py (one access moved outside its
buffer), so the runs start at the edges the driver's bounds check decides.
Dictionaries: the format's magic strings and names as kiln's Python modules define them
(the .pte identifier and extended-header magic, the delegate id and compile-spec key, the
method names kiln writes, 'COP1' and its action tags, the payload's block names, the stand-in
NPU's ID and CONFIG words, every operator and overload the runtime has a kernel for).

`write(cache)` makes them once per content (a key over kiln's compiler sources, the kernel
test cases and this file) under `cache/<key>/`: seeds/<target>/<name> and <target>.dict.
"""

from __future__ import annotations

import hashlib
import importlib
import shutil
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL_TESTS = ROOT / "tests" / "firmware" / "runtime"
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
TARGETS = ("pte", "payload", "cop1", "bundle")
# The programs kiln's seeds of `bundle` bundle (of those `write` makes for `pte`).
BUNDLED = ("tiny_cnn_reference.pte", "state_two_methods.pte")
# The stand-in NPU the fuzzers are built for (host_npu.h); the compiled seeds target it.
NPU_TARGET = "ethos-u55-128"
# (seed name, kiln compile options as CompileSpec fields, keep the reference graphs)
MODELS = (
    ("tiny_cnn", {}, True),
    ("tiny_cnn", {}, False),
    ("tiny_cnn_two_delegates", {"exclude_op": "aten.flatten"}, False),
    ("tiny_cnn_cpu_linear", {"exclude_op": "aten.linear"}, False),
    ("tiny_cnn_cpu", {"delegate": False}, False),
    ("tiny_cnn_io_int8", {"io": "int8"}, False),
    ("tiny_cnn_float", {"quantize": False}, False),
)


def npu_registers() -> tuple[int, int]:
    """(ID, CONFIG) of the stand-in NPU: kiln's NPU model's values for NPU_TARGET."""
    from kiln.simulator.npu.config import config_for

    config = config_for(NPU_TARGET)
    return config.id_register, config.config_register


def compiled_programs() -> dict[str, bytes]:
    from kiln import compile as kc
    from kiln.pte.reader import deserialize
    from kiln.pte.writer import without_reference_data
    from kiln.spec import CompileSpec, Exclusions

    made = {}
    for name, options, reference in MODELS:
        options = dict(options)
        excluded = (options.pop("exclude_op"),) if "exclude_op" in options else ()
        spec = CompileSpec(target=NPU_TARGET, exclusions=Exclusions(excluded, (), ()), **options)
        data = kc.compile_model("tiny_cnn", spec, None, log=lambda line: None).pte
        if reference:
            made[f"{name}_reference.pte"] = data
        else:
            made[f"{name}.pte"] = without_reference_data(deserialize(data))
    return made


def kernel_test_modules() -> list:
    """The runtime's kernel test modules (each defines CASES: name -> single_kernel case)."""
    _checkout_on_path()
    package = "tests.firmware.runtime"
    return [
        importlib.import_module(f"{package}.{path.stem}") for path in sorted(KERNEL_TESTS.glob("test_kernels_*.py"))
    ]


def _checkout_on_path() -> None:
    """The checkout's root on sys.path, as pytest puts it there: tests is a package."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def kernel_programs() -> dict[str, bytes]:
    modules = kernel_test_modules()
    from tests.firmware.runtime.helpers import single_kernel

    made = {}
    for module in modules:
        for case_name, (name, overload, args, out_shape, *dtype) in module.CASES.items():
            data, _ = single_kernel(name, overload, args, out_shape, *dtype)
            made[f"kernel_{case_name}.pte"] = data
    return made


def state_programs() -> dict[str, bytes]:
    """Programs of several methods sharing a state arena (memory id 2), written with kiln's writer."""
    _checkout_on_path()
    from tests.firmware.runtime import state_program, toy_lm

    return {
        "state_two_methods.pte": state_program.write(),
        "toy_lm_get_max_seq_len.pte": toy_lm.write(16, max_seq_len=12),
        "toy_lm_decode_alone.pte": toy_lm.write(16, prefill=False),
    }


def bundles(programs: dict[str, bytes]) -> dict[str, bytes]:
    """kiln's bundles of the BUNDLED programs (two cases a method) and ExecuTorch's fixtures."""
    from kiln.reference.bundled import make_bundle

    made = {f"{Path(name).stem}.bpte": make_bundle(programs[name], 2) for name in BUNDLED}
    return made | {path.name: path.read_bytes() for path in sorted(FIXTURES.glob("*.bpte"))}


def payloads(programs: dict[str, bytes]) -> dict[str, bytes]:
    from kiln.lower.ethosu_payload import DELEGATE_ID
    from kiln.pte.reader import deserialize

    found = {}
    for name, data in programs.items():
        f = deserialize(data)
        for i, d in enumerate(f.program.execution_plans[0].delegates):
            if d.id == DELEGATE_ID:
                found[f"{Path(name).stem}_{i}.bin"] = f.delegate_payload(d)
    return found


def cop1s(found: dict[str, bytes]) -> dict[str, bytes]:
    from kiln.lower import ethosu_payload as ep

    return {name: ep.decode(data).cmd_data for name, data in found.items()}


def hostile_payloads(found: dict[str, bytes]) -> dict[str, bytes]:
    """Each payload with its stream mutated by each of npu_hostile.HOSTILE (where it applies)."""
    from kiln.lower import ethosu_payload as ep

    _checkout_on_path()
    from tests.firmware.runtime import npu_hostile

    made = {}
    for name, data in found.items():
        p = ep.decode(data)
        limits = npu_hostile.sizes(len(p.weight_data), p.scratch_size, 0)
        for hostile in npu_hostile.HOSTILE:
            cmd = npu_hostile.mutate(p.cmd_data, hostile, limits)
            if cmd is not None:
                made[f"{Path(name).stem}_{hostile.name}.bin"] = ep.encode(
                    cmd, p.weight_data, p.scratch_size, p.inputs, p.outputs
                )
    return made


def _word(value: int) -> bytes:
    return struct.pack("<I", value)


def dictionaries() -> dict[str, list[bytes]]:
    from kiln.lower import ethosu_payload as ep
    from kiln.program.kernels import by_name
    from kiln.pte.bundle import BUNDLE_IDENTIFIER
    from kiln.pte.schema import EXTENDED_HEADER_MAGIC, FILE_IDENTIFIER
    from kiln.simulator.npu import cop1

    npu_id, npu_config = npu_registers()
    actions = [
        cop1.ACTION_CONFIG,
        cop1.ACTION_CMD_STREAM,
        cop1.ACTION_READ_APB,
        cop1.ACTION_DUMP_SHRAM,
        cop1.ACTION_NOP,
    ]
    cop1_words = [cop1.FOURCC, _word(npu_id), _word(npu_config), *(_word(a) for a in actions)]
    payload_words = [name.encode() for name in ep.BLOCK_ORDER] + cop1_words
    operators = sorted({part.encode() for key in by_name() for part in key if part})
    pte_words = [
        FILE_IDENTIFIER,
        EXTENDED_HEADER_MAGIC,
        ep.DELEGATE_ID.encode(),
        ep.FAST_SCRATCH_SPEC.encode(),
        b"forward",
        b"prefill",
        b"decode",
        *operators,
        *payload_words,
    ]
    bundle_words = [BUNDLE_IDENTIFIER, *pte_words]
    return {"pte": pte_words, "payload": payload_words, "cop1": cop1_words, "bundle": bundle_words}


def dictionary_text(words: list[bytes]) -> str:
    """libFuzzer's dictionary format: one quoted token a line, other bytes as \\xNN."""

    def quoted(word: bytes) -> str:
        return "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}" for b in word)

    return "".join(f'"{quoted(w)}"\n' for w in dict.fromkeys(words))


def content_key() -> str:
    """Changes whenever what the seeds are made from may have changed."""
    h = hashlib.sha256()
    sources = [
        Path(__file__),
        KERNEL_TESTS / "npu_hostile.py",
        KERNEL_TESTS / "helpers.py",
        KERNEL_TESTS / "state_program.py",
        KERNEL_TESTS / "toy_lm.py",
        *sorted(KERNEL_TESTS.glob("test_kernels_*.py")),
        *sorted(FIXTURES.glob("*.pte")),
        *sorted(FIXTURES.glob("*.bpte")),
        *sorted((ROOT / "compiler" / "kiln").rglob("*.py")),
        *sorted((ROOT / "simulator" / "kiln" / "simulator" / "npu").glob("*.py")),
    ]
    for path in sources:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def write(cache: Path) -> Path:
    """The seeds and dictionaries under cache/<content key>/ (made unless already there)."""
    out = cache / content_key()
    if (out / "done").exists():
        return out
    staging = cache / f"{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    programs = {
        **compiled_programs(),
        **state_programs(),
        **kernel_programs(),
        **{path.name: path.read_bytes() for path in sorted(FIXTURES.glob("*.pte"))},
    }
    found = payloads(programs)
    found.update(hostile_payloads(found))
    made = (("pte", programs), ("payload", found), ("cop1", cop1s(found)), ("bundle", bundles(programs)))
    for target, seeds in made:
        directory = staging / "seeds" / target
        directory.mkdir(parents=True)
        for name, data in seeds.items():
            (directory / name).write_bytes(data)
    for target, words in dictionaries().items():
        (staging / f"{target}.dict").write_text(dictionary_text(words))
    (staging / "done").write_text("")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    for stale in cache.iterdir():  # what older sources made
        if stale != out:
            shutil.rmtree(stale, ignore_errors=True)
    return out

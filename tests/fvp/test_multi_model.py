"""Several models in one firmware image (`kiln build --pte A.pte --pte B.pte`): one static memory
plan in which each model keeps its planned buffers and the models share the NPU's scratch, each
model chosen by name at run time (`kiln run --model=NAME --input=...`), every output equal to
`kiln run-host`'s bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from kiln import flow
from kiln.lower import ethosu_payload
from kiln.pte.reader import deserialize
from kiln.pte.schema import NUMPY_DTYPES

from .helpers import compiled, random_samples

TARGET = "ethos-u55-128"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def image(work, builder):
    """tiny_cnn and digits in one image, in that order: (their .pte files, the ELF)."""
    first, second = compiled(work, "tiny_cnn", TARGET), compiled(work, "digits", TARGET)
    return (first, second), builder(first, TARGET, f"--pte={second}")


def _input_file(pte: Path, samples: list[list[np.ndarray]], path: Path) -> Path:
    """The runner's --input file of a one-input program: every sample back to back."""
    (tensor,) = flow.program_io(pte)[0]
    np.concatenate([s[0].astype(NUMPY_DTYPES[tensor.scalar_type]).reshape(-1) for s in samples]).tofile(path)
    return path


def _outputs(pte: Path, folder: Path, prefix: str, count: int) -> list[list[np.ndarray]]:
    """[sample][output] from the runner's <prefix>output_<i>.bin files."""
    outputs = flow.program_io(pte)[1]
    read = [
        np.fromfile(folder / f"{prefix}output_{i}.bin", dtype=NUMPY_DTYPES[t.scalar_type]).reshape(count, *t.sizes)
        for i, t in enumerate(outputs)
    ]
    return [[r[k] for r in read] for k in range(count)]


def test_a_sequence_named_on_the_command_line_runs_each_model_equal_to_run_host(image, tmp_path):
    """digits, then tiny_cnn over two samples, through `kiln run` as a person runs it: the runner
    says whose each inference is, and each model's outputs equal run-host's for its own .pte."""
    (cnn, digits), elf = image
    cnn_samples, digit_samples = random_samples(cnn, 2, seed=7), random_samples(digits, 1, seed=8)
    out = tmp_path / "out"
    command = [
        *(str(Path(sys.executable).parent / "kiln"), "run", f"--elf={elf}", f"--target={TARGET}", "--platform=virtual"),
        *(f"--model={digits.stem}", f"--input={_input_file(digits, digit_samples, tmp_path / 'd.bin')}"),
        *(f"--model={cnn.stem}", f"--input={_input_file(cnn, cnn_samples, tmp_path / 'c.bin')}"),
        f"--output-dir={out}",
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"kiln executor runner: {cnn.stem}+{digits.stem} (Shared_Sram) on corstone-300"
    said = [line.split(":")[0] for line in lines if line.startswith(("model ", "inference "))]
    assert said == [f"model {digits.stem}", "inference 0", f"model {cnn.stem}", "inference 0", "inference 1"]
    assert flow.compare(digits, digit_samples, _outputs(digits, out, f"{digits.stem}_", 1)) == []
    assert flow.compare(cnn, cnn_samples, _outputs(cnn, out, f"{cnn.stem}_", 2)) == []


def test_without_model_options_each_model_runs_once_and_the_transcript_says_whose(image):
    (cnn, digits), elf = image
    result = flow.run(flow.firmware(elf, TARGET), "virtual", timeout=300)
    assert result.status == 0, "\n".join(result.uart)
    assert [i.model for i in result.transcript.inferences] == [cnn.stem, digits.stem]


def test_the_plan_shares_the_scratch_and_keeps_each_models_buffers(image):
    """One Ethos-U scratch, as large as the larger of the two delegates' own (their payloads, as
    Vela sized them), and each model's planned buffers as its .pte plans them, apart in the ELF."""
    (cnn, digits), elf = image
    report = json.loads(elf.with_suffix(".memory_report.json").read_text())
    scratch = []
    for pte in (cnn, digits):
        f = deserialize(pte.read_bytes())
        (delegate,) = f.forward().delegates
        scratch.append(ethosu_payload.decode(f.delegate_payload(delegate), f.named()).scratch_size)
    (shared,) = report["shared"]
    assert shared["what"].startswith("Ethos-U scratch (region 1), shared by the models")
    assert shared["size"] == max(scratch)
    assert [m["name"] for m in report["models"]] == [cnn.stem, digits.stem]
    for model, pte in zip(report["models"], (cnn, digits)):
        planned = deserialize(pte.read_bytes()).forward().non_const_buffer_sizes[1:]
        assert [b["size"] for b in model["planned"]] == list(planned)
    with open(elf, "rb") as stream:  # the buffers' symbols, C++-mangled in an anonymous namespace
        symbols = list(ELFFile(stream).get_section_by_name(".symtab").iter_symbols())

    def named(name: str) -> list:
        return [s for s in symbols if name in s.name and s["st_size"] > 0]

    buffers = [named(n) for n in ("kiln_planned_1", "kiln_m1_planned_1", "kiln_ethosu_scratch")]
    assert [len(b) for b in buffers] == [1, 1, 1] and named("scratch") == buffers[2]
    spans = sorted((b[0]["st_value"], b[0]["st_value"] + b[0]["st_size"]) for b in buffers)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))  # no two overlap
    text = elf.with_suffix(".memory_report.txt").read_text()
    assert f"models: {cnn.stem}, {digits.stem}: the runner binds each once and runs one at a time" in text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model=resnet"], "runner: no model 'resnet' in this image; it has {0} {1}"),
        (["--input=/dev/null"], "runner: this image has 2 models: name the one the inputs are for with --model=NAME"),
        (["--output-dir=/tmp", "--model={0}", "--model={0}"], "runner: --model={0} comes twice; with --output-dir"),
    ],
)
def test_a_sequence_the_image_cannot_run_is_a_usage_error(image, arguments, message):
    (cnn, digits), elf = image
    arguments = [a.format(cnn.stem) for a in arguments]
    message = message.format(cnn.stem, digits.stem)
    result = flow.run(flow.firmware(elf, TARGET, arguments=arguments), "virtual", timeout=120)
    assert result.status == 2
    assert any(line.startswith(message) for line in result.uart), result.uart

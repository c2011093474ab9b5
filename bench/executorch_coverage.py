"""ExecuTorch 1.5.1's side of bench/coverage.py --executorch: what its Arm Ethos-U flow puts on
the NPU, for every named case, in one process. Run it with ExecuTorch's environment:

    .venv-executorch/bin/python bench/executorch_coverage.py --target ethos-u55-128 \
        --names conv2d_3x3,resnet8,... [--output result.json]

Each name is a single-operator case of tests/compiler/operator_cases.py or tests/compiler/operator_cases_more.py
(torch only), or a kiln zoo, architecture or transformer model (kiln.models, imported from the checkout:
the model definitions and kiln.errors, never kiln's compiler), with the example inputs kiln.models.load
gives, as they are (several inputs, int64 token ids and masks alike). Per name, the flow a user of
ExecuTorch's public API writes: torch.export, EthosUQuantizer with the symmetric int8
per-channel config (PT2E prepare, one calibration run on the example inputs, convert),
torch.export again, to_edge_transform_and_lower with an EthosUPartitioner; Vela runs inside
the partitioner's preprocess and its summary (captured from standard output) gives the NPU
cycles, summed over the delegates.

Output (JSON, to --output or standard output): {"target", "executorch", "vela", "results": {name:
{"compiled", "error", "npu_ops", "cpu_ops", "edges", "input_casts", "delegates", "npu_cycles", "seconds"[,
"tosa"]}}} where npu_ops / cpu_ops map an edge op (aten. and .default dropped) to its count, the
float<->int8 quantize/dequantize nodes counted apart in "edges" (those on the CPU) and left
out of npu_ops; "input_casts" counts the CPU ops of cpu_ops that change the dtype of a program
input (the int64 -> int32 casts of token ids and masks); with --tosa-dir, "tosa" lists the
delegates' TOSA files kept there (what bench/coverage.py estimates again with kiln's Vela). "compiled" means lowered:
to_edge_transform_and_lower succeeded (to_executorch is not run; placement and Vela's figures
are known by then). A case that fails has compiled false and its error's first line.
Progress goes to standard error, one line per name.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout: tests.compiler

import torch  # noqa: E402

EDGE_OPS = re.compile(r"quantized_decomposed\.(de)?quantize_per_(tensor|channel)|cortex_m\.(de)?quantize_per_tensor")
SKIPPED = {"getitem", "executorch_call_delegate"}  # plumbing, not ops
CASTS = {"dim_order_ops._to_dim_order_copy", "_to_copy"}  # dtype conversions, as op_name spells them
CYCLES = re.compile(r"^NPU cycles\s+(\d+) cycles/batch", re.MULTILINE)
CASE_SECONDS = 600  # one name may take this long before it counts as failed


def op_name(node) -> str:
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    name = name.removeprefix("aten.")
    return re.sub(r"\.default$", "", name)


def load(name: str):
    """(module in eval mode, example inputs) of a case or a kiln model."""
    from tests.compiler import operator_cases, operator_cases_more

    for cases in (operator_cases.CASES, operator_cases_more.CASES):
        if name in cases:
            make, inputs = cases[name]
            return make().eval(), inputs()
    sys.path.insert(0, str(ROOT / "compiler"))
    import kiln

    if str(ROOT / "models" / "kiln") not in kiln.__path__:
        kiln.__path__.append(str(ROOT / "models" / "kiln"))  # kiln.models lives beside the compiler in a checkout
    from kiln.models import load as load_model

    module, inputs = load_model(name)
    return module.eval(), tuple(inputs)


def count(program) -> tuple[Counter, Counter, int, int, int]:
    """(NPU ops, CPU ops, CPU quantize/dequantize edges, delegates, CPU casts of a program input) of a
    lowered edge program."""
    npu, cpu, edges, delegates, input_casts = Counter(), Counter(), 0, 0, 0
    graph_module, inputs = program.graph_module, set(program.graph_signature.user_inputs)
    for node in graph_module.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module_"):
            delegates += 1
            for inner in getattr(graph_module, node.name).original_module.graph.nodes:
                if inner.op == "call_function" and op_name(inner) not in SKIPPED and not EDGE_OPS.match(op_name(inner)):
                    npu[op_name(inner)] += 1
        elif node.op == "call_function" and op_name(node) not in SKIPPED:
            if EDGE_OPS.match(op_name(node)):
                edges += 1
            else:
                cpu[op_name(node)] += 1
                input_casts += op_name(node) in CASTS and getattr(node.args[0], "name", None) in inputs
    return npu, cpu, edges, delegates, input_casts


class TimedOut(Exception):
    pass


def compile_one(
    name: str, target: str, system_config: str | None, memory_mode: str | None, tosa_dir: Path | None = None
) -> dict:
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    module, inputs = load(name)
    spec = EthosUCompileSpec(
        target, system_config=system_config, memory_mode=memory_mode, extra_flags=["--verbose-cycle-estimate"]
    )
    dump = tempfile.TemporaryDirectory(prefix="et-tosa-") if tosa_dir else None
    with dump or contextlib.nullcontext():  # the dump folder goes however the case ends
        if dump:
            spec.dump_intermediate_artifacts_to(dump.name)
        quantizer = EthosUQuantizer(spec)
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
        exported = torch.export.export(module, inputs)
        prepared = prepare_pt2e(exported.module(), quantizer)
        prepared(*inputs)
        quantized = torch.export.export(convert_pt2e(prepared), inputs)
        vela_output = io.StringIO()
        with contextlib.redirect_stdout(vela_output):
            edge = to_edge_transform_and_lower(
                quantized,
                partitioner=[EthosUPartitioner(spec)],
                compile_config=EdgeCompileConfig(_check_ir_validity=False),
            )
        npu, cpu, edges, delegates, input_casts = count(edge.exported_program())
        cycles = [int(n) for n in CYCLES.findall(vela_output.getvalue())]
        result = {
            "compiled": True,
            "error": None,
            "npu_ops": dict(npu),
            "cpu_ops": dict(cpu),
            "edges": edges,
            "input_casts": input_casts,
            "delegates": delegates,
            "npu_cycles": sum(cycles) if cycles else None,
        }
        if dump:
            result["tosa"] = keep_tosa(Path(dump.name), tosa_dir, name)
    return result


def keep_tosa(dump: Path, tosa_dir: Path, name: str) -> list[str]:
    """The TOSA flatbuffers the partitioner gave Vela (one per delegate: output_TOSA-*.tosa, or
    output_tag<N>_TOSA-*.tosa in delegate order), copied to tosa_dir as <name>.<i>.tosa; their
    file names."""
    tagged = sorted(
        dump.glob("output*_TOSA-*.tosa"), key=lambda p: int(re.match(r"output(?:_tag(\d+))?_TOSA", p.name)[1] or 0)
    )
    tosa_dir.mkdir(parents=True, exist_ok=True)
    kept = []
    for i, path in enumerate(tagged):
        kept.append(f"{name}.{i}.tosa")
        shutil.copyfile(path, tosa_dir / kept[-1])
    return kept


def first_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0].strip() if lines else ''}"[:300]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ethos-u55-128")
    parser.add_argument("--system-config", default=None, help="Vela's system config (default: ExecuTorch's)")
    parser.add_argument("--memory-mode", default=None, help="Vela's memory mode (default: ExecuTorch's)")
    parser.add_argument("--names", required=True, help="comma list of case and model names")
    parser.add_argument("--output", default=None, help="JSON file (default: standard output)")
    parser.add_argument(
        "--tosa-dir",
        default=None,
        type=Path,
        help="keep each name's TOSA flatbuffers here (<name>.<delegate>.tosa; result key tosa)",
    )
    parser.add_argument("--traceback", action="store_true", help="print each failure's traceback to standard error")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)  # ExecuTorch's and torchao's notices: not this driver's output

    def on_alarm(signum, frame):
        raise TimedOut(f"more than {CASE_SECONDS} s")

    signal.signal(signal.SIGALRM, on_alarm)
    import executorch.version

    results: dict[str, dict] = {}
    names = [n for n in args.names.split(",") if n]
    for i, name in enumerate(names, 1):
        start = time.perf_counter()
        signal.alarm(CASE_SECONDS)
        try:
            result = compile_one(name, args.target, args.system_config, args.memory_mode, args.tosa_dir)
        except Exception as error:  # noqa: BLE001 (every failure is a finding: keep going)
            result = {
                "compiled": False,
                "error": first_line(error),
                "npu_ops": {},
                "cpu_ops": {},
                "edges": 0,
                "input_casts": 0,
                "delegates": 0,
                "npu_cycles": None,
            }
            if args.traceback:
                traceback.print_exc()
        finally:
            signal.alarm(0)
        result["seconds"] = round(time.perf_counter() - start, 2)
        results[name] = result
        state = "ok" if result["compiled"] else result["error"]
        print(f"[{i}/{len(names)}] {name}: {state} ({result['seconds']} s)", file=sys.stderr, flush=True)
    from importlib.metadata import version

    document = {
        "target": args.target,
        "executorch": executorch.version.__version__,
        "vela": version("ethos-u-vela"),
        "results": results,
    }
    text = json.dumps(document, indent=1, sort_keys=True)
    if args.output:
        Path(args.output).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

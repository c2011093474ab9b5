"""Language models on the Ethos-U85: cycles per token per NPU configuration, Vela's estimate beside
the virtual platform's PMU count, and how often the quantized program's greedy tokens agree with
the float model's.

    .venv/bin/python bench/llm.py [--models tinylm,smollm2_135m_shape] [--targets ethos-u85-128,...]
                                  [--tokens 16] [--no-platform] [--agreement] [--keep DIR]

Each model is compiled once (`kiln compile`, for ethos-u85-256 on the board's defaults); its TOSA
graphs then go through Vela for each configuration of --targets (one .pte per configuration,
kiln.pte.from_program.write_methods), so the quantization and the graphs are the same everywhere.
Per configuration and method it prints Vela's NPU cycles and total cycles (with the memory
accesses the NPU waits for) and, unless --no-platform, the generation app built for that .pte run
on the virtual platform for --tokens tokens: the PMU's NPU cycles of prefill and of each decode
step (the virtual platform's cycle counts follow Vela's performance model: its per-operation
estimate, not a cycle-accurate NPU), the CPU instructions of each step's execute() (QEMU's
count) and the wall time per token (start-up included, and apart). smollm2_135m_shape is
SmolLM2-135M's shape with random weights, compiled with decode alone (a prompt goes through decode
a token at a time, as ExecuTorch's runner does for a program of one method; its platform run takes
the prompt "Hi", tinylm's 'The "if" statement'): its compile takes minutes.

--per-token A,B (e.g. 4,36): the generation app for --targets' first configuration run twice, for A
and for B tokens (a process each, the NPU model's kept streams and weights not carried over); per
decode token, what the second run took more than the first divided by B - A: the wall time and
its split as the NPU attachment clocks it (kiln.simulator.attach.HostTimes: QEMU, the NPU model,
the attachment), the CPU time beside it (the NPU model's, the attachment's, the simulator's
process in all, QEMU's: bench/virtual_platform.py's cpu_split) and the NPU register accesses; the
tokens per second of wall time follow.

--agreement: over tinylm's PROMPTS, how many of the quantized program's greedy tokens (`kiln
generate`'s arithmetic) equal the float model's, token by token until the first difference and in
all; --int16 (with --agreement) compiles with kiln compile's --int16 (`auto`, `attention,norms`),
and it prints each method's Vela NPU cycles and 16-bit values.

Measured 2026-11-28 (ethos-u85-256, loaded 2-core machine): int8 150 of 192 (78.1 %, measured before; decode
473,729 Vela NPU cycles from this checkout); --int16 auto --int16-sqnr 40: 168 of 192 (87.5 %,
first difference after 20.5 tokens on average), decode 118 ops at 16 bits for 54 values, 657,601
NPU cycles; prefill 4 ops, 758,789 (int8 730,461); 50 minutes of wall time.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kiln import boards, flow
from kiln import compile as kc
from kiln.lower import vela
from kiln.pte import from_program
from kiln.spec import AUTO_POLICY, AutoRule, CompileSpec, Int16Regions

U85 = ["ethos-u85-128", "ethos-u85-256", "ethos-u85-512", "ethos-u85-1024", "ethos-u85-2048"]
COMPILED_FOR = "ethos-u85-256"


def decode_only(name: str):
    """The zoo model `name` with its methods cut to decode (and its calibration to decode's calls)."""
    from kiln.frontend.export import LoadedModel
    from kiln.models import load

    model, inputs = load(name)
    model.kiln_methods = {"decode": model.kiln_methods["decode"]}
    model.kiln_calibration = [call for call in model.kiln_calibration if call[0] == "decode"][:8]
    return LoadedModel(name, model, inputs)


def compile_once(name: str, log) -> kc.ProgramResult:
    model = decode_only(name) if name == "smollm2_135m_shape" else name
    return kc.compile_model(model, CompileSpec(COMPILED_FOR), log=log)


def for_target(result: kc.ProgramResult, target: boards.Target) -> tuple[bytes, dict[str, list[vela.VelaResult]]]:
    """The program of `result` with its delegates compiled by Vela for `target` (its board's defaults)."""
    spec = CompileSpec(target.name).resolved(target)
    compiled = {
        name: r.vela
        if target.name == COMPILED_FOR  # the compile's own
        else [
            vela.compile_tosa(t, f"{name}_{i}", target.name, spec.system_config, spec.memory_mode)
            for i, t in enumerate(r.tosa)
        ]
        for name, r in result.methods.items()
    }
    methods = {name: (r.program, compiled[name], r.tosa) for name, r in result.methods.items()}
    constants = result.report.get("constants", {})
    return from_program.write_methods(methods, target.name, spec.memory_mode, constants), compiled


def on_platform(pte: Path, target: boards.Target, tokens: int, prompt: bytes) -> dict:
    elf = flow.build_runner(pte, target, app="generate", echo=lambda *line, **end: None)
    start = time.monotonic()
    steps = len(prompt) + tokens  # a decode-only program takes the prompt a token at a time
    done = flow.generate(elf, target, prompt, tokens, pte, count_instructions=True, timeout=120 + 60 * steps)
    wall = time.monotonic() - start
    if not done.complete:
        raise RuntimeError(f"the generation app failed on {target.name}:\n{done.log}")
    first, rest = done.tokens[0], done.tokens[1:]
    return {
        "first": (first.method, first.npu_cycles),
        "decode": statistics.fmean(t.npu_cycles for t in rest) if rest else None,
        "instructions": statistics.fmean(done.cpu_instructions) if done.cpu_instructions else None,
        "seconds_per_token": wall / len(done.tokens),
    }


def per_token(pte: Path, target: boards.Target, counts: tuple[int, int]) -> str:
    """The --per-token line of `pte` on `target` (module docstring)."""
    from virtual_platform import cpu_split, per_extra, time_split, two_runs

    elf = flow.build_runner(pte, target, app="generate", echo=lambda *line, **end: None)
    runs = two_runs([sys.executable, __file__, "--token-run", str(elf), target.name, str(pte)], counts)
    if isinstance(runs, str):
        return f"{target.name} failed: {runs}"

    wall = per_extra(runs, counts, "seconds")
    return (
        f"{target.name} per decode token: {wall * 1e3:.1f} ms wall ({1 / wall:.1f} tokens/s): "
        f"{time_split(runs, counts)}; {cpu_split(runs, counts)}; "
        f"{per_extra(runs, counts, 'register_accesses'):.0f} NPU register accesses; "
        f"tokens {runs[1]['tokens']}"
    )


def _token_run(elf: Path, target: str, pte: Path, tokens: int) -> dict:
    """One run of the generation app `elf` for `tokens` tokens: wall time, HostTimes, CPU times and
    the NPU register accesses (the run's NPU summary line)."""
    from virtual_platform import host_figures

    done = flow.generate(elf, target, b'The "if" statement', tokens, pte, platform="virtual")
    if not done.complete:
        sys.exit(done.log[-600:])
    accesses = re.search(r"(\d+) register accesses", done.run.npu_summary or "")
    return {
        **host_figures(done.run.host, done.seconds),
        "register_accesses": int(accesses.group(1)) if accesses else 0,
        "tokens": done.token_ids,
    }


def agreement(int16: Int16Regions) -> None:
    from kiln.models import load, tinylm
    from kiln.reference import generate

    result = kc.compile_model("tinylm", CompileSpec(COMPILED_FOR, int16=int16), log=lambda line: None)
    for name, method in result.report["methods"].items():
        auto = method.get("int16_auto")
        chosen = f"; {kc.autoprecision.format_report(auto)[0].strip()}" if auto else ""
        print(f"{name}: {method['npu_cycles']:,} NPU cycles (Vela), {len(method['int16'])} 16-bit values{chosen}")
    print(f"state: {result.report['state']['bytes']:,} B")
    model, _ = load("tinylm")
    tokens, prefix, same, total = 24, [], 0, 0
    for prompt in tinylm.PROMPTS:
        want = tinylm.generate(model, prompt, tokens)
        got = bytes(s.token for s in generate.generate(result.pte, prompt, tokens))
        first = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), tokens)
        prefix.append(first)
        same += sum(a == b for a, b in zip(want, got))
        total += tokens
        print(f"  {prompt!r:32} float {want!r}\n  {'':32} kiln  {got!r}  (same for {first} tokens)")
    print(
        f"tinylm: {same} of {total} greedy tokens equal the float model's ({100 * same / total:.1f} %); "
        f"the first difference after {statistics.fmean(prefix):.1f} tokens on average"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tinylm")
    parser.add_argument("--targets", default=",".join(U85))
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--no-platform", action="store_true")
    parser.add_argument("--agreement", action="store_true")
    parser.add_argument(
        "--int16", default="", metavar="POLICY", help="with --agreement: kiln compile's --int16 (e.g. auto)"
    )
    parser.add_argument(
        "--int16-sqnr", type=float, default=AutoRule.target_db, metavar="DB", help="--int16 auto's target"
    )
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep each configuration's .pte there")
    parser.add_argument("--per-token", metavar="A,B", help="the decode step's wall time and its split")
    parser.add_argument("--token-run", nargs=4, metavar=("ELF", "TARGET", "PTE", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.token_run:
        import json

        elf, target, pte, tokens = args.token_run
        print(json.dumps(_token_run(Path(elf), target, Path(pte), int(tokens))))
        return 0
    if args.agreement:
        policies = tuple(p for p in args.int16.split(",") if p)
        auto = AutoRule(args.int16_sqnr) if AUTO_POLICY in policies else None
        agreement(Int16Regions(tuple(p for p in policies if p != AUTO_POLICY), auto=auto))
        return 0
    for name in args.models.split(","):
        start = time.monotonic()
        result = compile_once(name, log=lambda line: None)
        print(
            f"{name}: compiled for {COMPILED_FOR} in {time.monotonic() - start:.0f} s; "
            f"state {result.report['state']['bytes']:,} B"
        )
        print(
            f"  {'target':15} {'method':8} {'Vela NPU':>12} {'Vela total':>12} {'PMU NPU':>12} "
            f"{'CPU instr':>10} {'s/token':>8}"
        )
        with tempfile.TemporaryDirectory(prefix="kiln-llm-") as tmp:
            folder = args.keep or Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            for target_name in args.targets.split(","):
                target = boards.target(target_name)
                data, compiled = for_target(result, target)
                pte = folder / f"{name}-{target_name}.pte"
                pte.write_bytes(data)
                if args.per_token:
                    counts = tuple(int(n) for n in args.per_token.split(","))
                    print(f"  {per_token(pte, target, counts)}", flush=True)
                    continue
                prompt = b"Hi" if name == "smollm2_135m_shape" else b'The "if" statement'
                measured = {} if args.no_platform else on_platform(pte, target, args.tokens, prompt)
                for method, results in compiled.items():
                    npu = sum(r.npu_cycles for r in results)
                    total = sum(r.total_cycles for r in results)
                    if not measured:
                        pmu = ""
                    elif method == measured["first"][0] and method != "decode":
                        pmu = f"{measured['first'][1]:,}"  # prefill's one run
                    else:  # a decode step's: the tokens after the first (which, decode-only, takes the prompt too)
                        pmu = f"{measured['decode']:,.0f}" if measured["decode"] is not None else "-"
                    instructions = f"{measured['instructions']:,.0f}" if measured.get("instructions") else ""
                    seconds = f"{measured['seconds_per_token']:.2f}" if measured else ""
                    print(
                        f"  {target_name:15} {method:8} {npu:>12,} {total:>12,} {pmu:>12} "
                        f"{instructions:>10} {seconds:>8}"
                    )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

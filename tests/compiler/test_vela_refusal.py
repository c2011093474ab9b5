"""Vela is a rule too: an op kiln's rules accept but Vela refuses runs on the CPU, the rest is
compiled again, and the report gives Vela's reason; the compile never aborts on it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kiln import compile as kc
from kiln.errors import VelaRefusal
from kiln.frontend import export as frontend
from kiln.frontend.quantizer import EthosUQuantizer, quantize
from kiln.partition import support
from kiln.reference import run_host as host
from kiln.spec import CompileSpec, QuantizationScheme


class MatmulBlock(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(torch.relu(a), b) + a


def _inputs():
    g = torch.Generator().manual_seed(3)
    return torch.randn(1, 8, 8, generator=g), torch.randn(1, 8, 8, generator=g)


def _cpu_reasons(result) -> dict[str, str]:
    return {o["node"]: o["reason"] for o in result.report["ops"] if o["where"] == "cpu"}


def _vela_reasons(result) -> dict[str, str]:
    """The CPU ops' reasons but the I/O conversions'."""
    return {node: why for node, why in _cpu_reasons(result).items() if not node.startswith("quantize_per_tensor")}


def _steps_off(result, ref, inputs) -> float:
    outs = host.run(result.pte, [x.numpy() for x in inputs])
    scale = result.graph.outputs[0].producer.inputs[0].qparams.scale
    want = ref(*inputs).detach().numpy()
    return float(np.max(np.rint(np.abs(outs[0].astype(np.float64) - want) / scale)))


def test_an_op_vela_refuses_runs_on_the_cpu_with_velas_reason(monkeypatch):
    """A 16-bit matmul on Ethos-U55 is refused by Vela 5.2 ("could not run on NPU"); with kiln's own
    rule for it taken out, Vela is the rule that keeps it off the NPU."""
    monkeypatch.setattr(support, "RULES", [r for r in support.RULES if r.name != "int8_matmul_on_u55"])
    inputs = _inputs()
    loaded = frontend.LoadedModel("matmul16", MatmulBlock().eval(), inputs)
    lines = []
    result = kc.compile_model(loaded, CompileSpec("ethos-u55-128", activation_bits=16), log=lines.append)
    cpu = _cpu_reasons(result)
    assert (
        cpu["matmul"] == "Vela could not place it on the NPU: Non-passthrough operation (MatMul) could not run on NPU"
    )
    assert {o["node"] for o in result.report["ops"] if o["where"] == "npu"} == {"relu", "add"}
    assert any(line.startswith("vela: could not place matmul;") for line in lines)
    ref = quantize(
        frontend.export(loaded).module(check_guards=False), [inputs], EthosUQuantizer(QuantizationScheme(16))
    )
    assert _steps_off(result, ref, inputs) <= 1


class Chain(torch.nn.Module):
    """Eight conv + activation + add blocks (17 NPU ops in one partition), the sixth activation a
    sigmoid: the one TABLE operator of the TOSA graph."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(8))

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = conv(x)
            x = torch.sigmoid(x) if i == 5 else torch.relu(x)
            x = x + 0.5
        return x


FAKE_VELA = """#!{python}
import os, signal, sys
from tosa.Op import Op
from tosa.TosaGraph import TosaGraph

names = {{value: name for name, value in vars(Op).items() if not name.startswith("_")}}
block = TosaGraph.GetRootAs(open(sys.argv[-1], "rb").read(), 0).Regions(0).Blocks(0)
kinds = {{names[block.Operators(i).Op()] for i in range(block.OperatorsLength())}}
crash = {crash} <= kinds
with open({log!r}, "a") as log:
    log.write(("crash" if crash else "ok") + "\\n")
if crash:
    print("Warning: No configuration file specified. Using a default of ['vela.ini'].", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
os.execv({vela!r}, [{vela!r}] + sys.argv[1:])
"""


def _crashing_vela(monkeypatch, tmp_path, crash: set[str]) -> Path:
    """Vela through a fake executable that dies by SIGSEGV, after printing Vela's configuration
    warning, on every TOSA graph holding all the operator kinds `crash`, and runs the real Vela
    on any other; returns the file it logs each run to ("crash" or "ok"). A fake because Vela
    crashes for real only on graphs kiln's front end does not make (see
    test_a_real_vela_crash_is_reported_as_a_crash); the crash itself is a real signal."""
    from kiln.lower import vela

    real = vela.vela_command()[0]
    log = tmp_path / "vela_runs.log"
    script = tmp_path / "vela"
    script.write_text(FAKE_VELA.format(python=sys.executable, crash=crash, log=str(log), vela=real))
    script.chmod(0o755)
    monkeypatch.setattr(vela, "vela_command", lambda: [str(script)])
    return log


def _compile_chain(lines: list[str]):
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    loaded = frontend.LoadedModel("chain", Chain().eval(), (x,))
    result = kc.compile_model(loaded, CompileSpec("ethos-u55-128"), log=lines.append)
    ref = quantize(frontend.export(loaded).module(check_guards=False), [(x,)], EthosUQuantizer())
    return result, _steps_off(result, ref, (x,))


def test_an_op_vela_crashes_on_is_found_by_bisection(monkeypatch, tmp_path):
    """Vela crashing on the sigmoid's TABLE: the crash is the reason (never the configuration
    warning), the partition is named in the log, and bisection finds the op in 5 + 2 searching
    runs of Vela (the first search compiled each of the 17 ops alone)."""
    log = _crashing_vela(monkeypatch, tmp_path, {"TABLE"})
    lines = []
    result, off = _compile_chain(lines)
    cpu = _vela_reasons(result)
    assert cpu == {"sigmoid": "Vela could not place it on the NPU: Vela crashed (SIGSEGV)"}
    assert len(result.report["delegates"]) == 2
    assert off <= 1
    assert any(
        line.startswith("vela: Vela crashed (SIGSEGV) on partition 0 (17 ops: conv2d, add, ..., add_7)")
        for line in lines
    )
    (search,) = result.report["vela_failures"]
    assert search["failure"] == "Vela crashed (SIGSEGV)" and len(search["partition_ops"]) == 17
    assert search["cpu_ops"] == cpu
    assert search["vela_runs"] <= (17).bit_length() + 2
    assert len(log.read_text().split()) > search["vela_runs"]  # the runs counted are runs of Vela
    assert not any("configuration file" in line for line in lines)


def test_an_op_vela_fails_on_only_after_others_runs_on_the_cpu(monkeypatch, tmp_path):
    """Vela crashing on any graph holding a CONV2D and a TABLE, while each compiles alone: the
    bisection finds the sigmoid as the op Vela cannot take after the convolutions before it, with
    that reason, and the rest stays on the NPU."""
    _crashing_vela(monkeypatch, tmp_path, {"TABLE", "CONV2D"})
    result, off = _compile_chain([])
    cpu = _vela_reasons(result)
    assert cpu == {
        "sigmoid": "Vela could not compile it after the 11 op(s) before it in its NPU partition "
        "(conv2d ... conv2d_5), though it compiles alone: Vela crashed (SIGSEGV)"
    }
    assert off <= 1


def test_the_search_is_capped_and_then_the_partition_runs_on_the_cpu(monkeypatch, tmp_path):
    """Past SEARCH_VELA_RUNS, the ops the search has not cleared run on the CPU, with the
    partition's failure and the count of runs as their reason; the model still runs within a
    step of the PT2E reference."""
    _crashing_vela(monkeypatch, tmp_path, {"TABLE"})
    monkeypatch.setattr(kc, "SEARCH_VELA_RUNS", 4)
    result, off = _compile_chain([])
    reasons = _cpu_reasons(result)
    assert not result.report["delegates"]
    assert reasons["conv2d"] == (
        "Vela could not compile the NPU partition that held it (Vela crashed (SIGSEGV)); "
        "kiln stopped looking for the ops Vela cannot take after 0 Vela runs"
    )
    assert result.report["warnings"] == [
        "nothing runs on the ethos-u55-128 NPU: all 19 ops run on the CPU (each op's reason is listed)"
    ]
    assert kc.format_report(result.report).splitlines()[1] == "  warning: " + result.report["warnings"][0]
    assert off <= 1


def test_a_real_vela_crash_is_reported_as_a_crash(tmp_path):
    """Vela 5.2 dies by SIGSEGV on a TOSA CONCAT with an operand of shape [0] (what kiln once made
    of torch.cat([torch.tensor([]), x])); built here directly. The reason is the crash, not the
    configuration-file warning, the last line Vela printed."""
    import tosa_serializer as ts

    from kiln.lower import vela
    from kiln.lower.lowerer import attr

    ser = ts.TosaSerializer("", targetMinor=0, targetDraft=False)
    for name, shape in (("empty", [1, 4, 0, 8]), ("x", [1, 4, 3, 8])):
        ser.addInputTensor(ts.TosaSerializerTensor(name, shape, ts.DType.INT8))
    out = ser.addIntermediate([1, 4, 3, 8], ts.DType.INT8)
    ser.addOperator(ts.Op.CONCAT, ["empty", "x"], [out.name], attr("Concat", 2))
    ser.addOutputTensor(out)
    with pytest.raises(VelaRefusal) as caught:
        vela.compile_tosa(
            ser.serialize(), "empty_concat", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram", tmp_path
        )
    assert caught.value.reason == "Vela crashed (SIGSEGV)"
    assert str(caught.value) == "Vela failed on empty_concat for ethos-u55-128: Vela crashed (SIGSEGV)"
    assert "No configuration file specified" in (tmp_path / "empty_concat.vela.log").read_text()


def test_a_vela_exit_without_an_error_names_its_status():
    """A nonzero exit whose output is only warnings: the status is the reason."""
    from kiln.lower import vela

    warning = "Warning: No configuration file specified. Using a default of ['x/vela.ini']."
    assert vela.failure_reason(1, warning + "\n") == "Vela exited with status 1 without an error message"
    assert vela.failure_reason(1, warning + "\nValueError: bad shape\n") == "bad shape"
    assert vela.failure_reason(-6, warning) == "Vela crashed (SIGABRT)"


def test_vela_refusal_is_a_vela_error_with_its_reason(tmp_path):
    """A TOSA graph Vela cannot read is a VelaRefusal whose reason is Vela's own last error line."""
    from kiln.lower import vela

    with pytest.raises(VelaRefusal) as caught:
        vela.compile_tosa(b"not a flatbuffer", "junk", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert caught.value.reason and not caught.value.reason.startswith(("RuntimeError", "ValueError"))
    assert str(caught.value).startswith("Vela failed on junk for ethos-u55-128: ")

"""Vela is a rule too: an op kiln's rules accept but Vela refuses runs on the CPU, the rest is
compiled again, and the report gives Vela's reason; the compile never aborts on it."""

from __future__ import annotations

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


def test_a_partition_vela_refuses_only_as_a_whole_runs_on_the_cpu(monkeypatch):
    """When every op compiles alone but the partition does not, its ops all go to the CPU."""
    from kiln.lower import vela

    real = vela.compile_tosa

    def refuses_partitions(tosa, name, *args, **kwargs):
        if name == "tiny_cnn_0":  # the partition; each op alone is compiled under its own name
            raise VelaRefusal("Vela failed on tiny_cnn_0", "the whole graph is too much")
        return real(tosa, name, *args, **kwargs)

    monkeypatch.setattr(vela, "compile_tosa", refuses_partitions)
    result = kc.compile_model("tiny_cnn", CompileSpec("ethos-u55-128"), log=lambda line: None)
    reasons = _cpu_reasons(result)
    assert not result.report["delegates"]
    assert reasons["conv2d"] == "Vela could not compile the NPU partition that held it: the whole graph is too much"
    loaded = frontend.load_model("tiny_cnn")
    ref = quantize(frontend.export(loaded).module(check_guards=False), [loaded.inputs], EthosUQuantizer())
    assert _steps_off(result, ref, loaded.inputs) <= 1


def test_vela_refusal_is_a_vela_error_with_its_reason(tmp_path):
    """A TOSA graph Vela cannot read is a VelaRefusal whose reason is Vela's own last error line."""
    from kiln.lower import vela

    with pytest.raises(VelaRefusal) as caught:
        vela.compile_tosa(b"not a flatbuffer", "junk", "ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert caught.value.reason and not caught.value.reason.startswith(("RuntimeError", "ValueError"))
    assert str(caught.value).startswith("Vela failed on junk for ethos-u55-128: ")

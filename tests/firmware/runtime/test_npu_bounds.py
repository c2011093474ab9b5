"""The Ethos-U driver's command-stream bounds check (firmware/drivers/ethosu/bounds.cpp)
built for the host under AddressSanitizer and UBSan (`npu_bounds_host`), as the delegate
runs it at init.

References independent of the C++ code: every stream Vela writes for kiln's models must
pass (Vela's own placement is the reference for what a legitimate stream touches), and
each stream of the regression set (tests/npu_hostile.py: one register of a real stream
changed so that one access leaves its buffer) must be refused with the error and access
the mutation was made to cause.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import npu_hostile as nh
from kiln.compile import compile_model
from kiln.lower import ethosu_payload as ep
from kiln.spec import CompileSpec

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "executorch"
# (model, target, memory mode): a conv/pool/elementwise stream, one with weight DMAs and
# depthwise convolutions, and one with a fast scratch (region 2).
STREAMS = [("tiny_cnn", "ethos-u55-128", None), ("ds_cnn", "ethos-u55-128", None),
           ("tiny_cnn", "ethos-u65-256", "Dedicated_Sram_384KB")]


@pytest.fixture(scope="session")
def bounds_host(runtime_host) -> Path:
    tool = runtime_host.parent / "npu_bounds_host"
    done = subprocess.run(["ninja", "-C", str(runtime_host.parent), "npu_bounds_host"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return tool


@pytest.fixture(scope="session")
def payloads(tmp_path_factory) -> dict[tuple, tuple[bytes, int]]:
    """(payload, fast scratch bytes) of each delegate Vela compiled for STREAMS."""
    found = {}
    for model, target, mode in STREAMS:
        spec = CompileSpec(target=target, **({"memory_mode": mode} if mode else {}))
        for i, v in enumerate(compile_model(model, spec).vela):
            data = ep.encode(v.cmd_data, v.weight_data, v.scratch_size, v.inputs, v.outputs)
            found[(model, target, i)] = data, getattr(v, "fast_scratch_size", 0) or 0
    return found


def check(tool: Path, directory: Path, payload: bytes, fast: int = 0) -> subprocess.CompletedProcess:
    path = directory / "payload.bin"
    path.write_bytes(payload)
    done = subprocess.run([str(tool), str(path), *([str(fast)] if fast else [])], capture_output=True, text=True,
                          timeout=60)
    assert "runtime error" not in done.stderr and "AddressSanitizer" not in done.stderr, done.stderr
    return done


def test_every_stream_vela_writes_passes(bounds_host, payloads, tmp_path):
    assert len(payloads) >= len(STREAMS)
    for key, (payload, fast) in payloads.items():
        done = check(bounds_host, tmp_path, payload, fast)
        assert (done.returncode, done.stdout) == (0, "ok\n"), (key, done.stdout + done.stderr)


def test_the_executorch_arm_flow_stream_passes(bounds_host, tmp_path):
    from kiln.pte import schema as pte

    f = pte.deserialize((FIXTURES / "conv_relu_arm_delegate_ethos-u55-128.pte").read_bytes())
    payload = f.delegate_payload(f.program.execution_plans[0].delegates[0])
    done = check(bounds_host, tmp_path, payload)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stdout + done.stderr


def test_a_stream_without_its_fast_scratch_is_refused(bounds_host, payloads, tmp_path):
    payload, fast = payloads[("tiny_cnn", "ethos-u65-256", 0)]
    assert fast > 0
    done = check(bounds_host, tmp_path, payload)  # no region 2 given
    assert done.returncode == 1
    assert done.stdout.startswith("error 0x532 NPU stream accesses a region with no buffer: ")
    done = check(bounds_host, tmp_path, payload, fast - 16)  # 16 bytes short
    assert done.returncode == 1
    assert done.stdout.startswith("error 0x531 NPU stream accesses memory outside its region's buffer: ")


@pytest.mark.parametrize("hostile", nh.HOSTILE, ids=lambda h: h.name)
def test_a_hostile_stream_is_refused_naming_the_access(bounds_host, payloads, tmp_path, hostile):
    refused = 0
    for key, (payload, fast) in payloads.items():
        p = ep.decode(payload)
        cmd = nh.mutate(p.cmd_data, hostile, nh.sizes(len(p.weight_data), p.scratch_size, fast))
        if cmd is None:
            continue  # no operation of the kind in this stream
        bad = ep.encode(cmd, p.weight_data, p.scratch_size, p.inputs, p.outputs)
        done = check(bounds_host, tmp_path, bad, fast)
        assert done.returncode == 1, (key, done.stdout)
        prefix = f"error 0x{hostile.code:x} {nh.TEXT[hostile.code]}: {hostile.access} of the operation at word "
        assert done.stdout.startswith(prefix), (key, done.stdout)
        refused += 1
    assert refused > 0  # every mutation applies to at least one of the streams

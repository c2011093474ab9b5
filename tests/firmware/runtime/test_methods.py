"""Programs of several methods sharing a state arena on kiln's runtime core, built for the host
under AddressSanitizer and UBSan (runtime_host).

References independent of the C++ code: kiln.pte.reader for what the loader lists, the numpy
sequence of tests/firmware/runtime/state_program.py for what the methods compute and leave in
the state arena, ExecuTorch 1.5.1's own runtime (marked `executorch`) running the same program,
and hand-made damage for the loader's errors.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kiln.errors import PteError
from kiln.pte import writer
from kiln.pte.reader import deserialize
from kiln.pte.schema import (
    STATE_MEMORY_ID,
    AllocationInfo,
    Chain,
    ExtraTensorInfoSlot,
    Tensor,
)
from tests.firmware.runtime import state_program, toy_lm
from tests.firmware.runtime.helpers import run_tool

ROOT = Path(__file__).resolve().parents[3]
ET_PYTHON = ROOT / ".venv-executorch" / "bin" / "python"
X = {
    "x1": np.array([1.0, 2.0, 3.0, 4.0], np.float32),
    "x2": np.array([2.0, -1.0, 0.5, 3.0], np.float32),
    "x3": np.array([-1.5, 4.0, 2.0, 0.25], np.float32),
}
CALLS = [("accumulate", "x1"), ("scale", "x2"), ("scale", "x3"), ("accumulate", "x2")]


def _error(done) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout.strip()


@pytest.fixture
def pte(tmp_path) -> Path:
    path = tmp_path / "state.pte"
    path.write_bytes(state_program.write())
    for name, x in X.items():
        x.tofile(tmp_path / f"{name}.bin")
    return path


def _sequence(runtime_host, pte: Path, calls, *options):
    folder = pte.parent
    args = [f"{method}={folder / x}.bin" for method, x in calls]
    return run_tool(runtime_host, "sequence", *options, pte, folder, *args)


def test_load_lists_every_method_its_planned_buffers_and_states(runtime_host, pte):
    done = run_tool(runtime_host, "load", pte)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    plans = deserialize(pte.read_bytes()).program.execution_plans
    expected = []
    for plan in plans:
        states = [
            [v.name, v.allocation_info.offset,
             {"type": int(v.scalar_type), "nbytes": v.nbytes, "value": i, "sizes": list(v.sizes)}]
            for i, v in enumerate(plan.values)
            if isinstance(v, Tensor) and v.allocation_info and v.allocation_info.memory_id == STATE_MEMORY_ID
        ]  # fmt: skip
        expected.append({"name": plan.name, "planned": list(plan.non_const_buffer_sizes[1:]), "states": states})
    assert got["methods"] == expected
    assert [m["name"] for m in got["methods"]] == list(state_program.METHODS)
    assert [s[:2] for s in got["methods"][1]["states"]] == [["acc", 0], ["steps", 16]]
    assert got["planned"] == expected[0]["planned"]  # the handle load returns reads plan 0


def test_a_constant_method_loads_gives_its_number_and_binds_no_method(runtime_host, tmp_path):
    """ExecuTorch's constant method (get_max_seq_len: a plan without inputs whose one output is an
    Int, here 12) beside two methods: the program loads, Program::constant_method reads the number,
    Program::method refuses the plan (its output is not a tensor), and the other methods bind."""
    path = tmp_path / "toy.pte"
    path.write_bytes(toy_lm.write(16, max_seq_len=12))
    done = run_tool(runtime_host, "load", path)
    assert done.returncode == 0, done.stdout + done.stderr
    methods = json.loads(done.stdout)["methods"]
    assert [m["name"] for m in methods] == ["prefill", "decode", "get_max_seq_len"]
    assert methods[2] == {"name": "get_max_seq_len", "constant": 12, "refused": "pte: unsupported feature"}
    assert "constant" not in methods[0] and methods[1]["planned"] == [608, 128]
    assert _error(run_tool(runtime_host, "sequence", path, tmp_path, "get_max_seq_len=")) == (
        "error 0x10c pte: unsupported feature: a program input or output that is not a tensor (0)"
    )


def test_state_carries_from_method_to_method(runtime_host, pte):
    """accumulate, scale, scale, accumulate over one zeroed arena: each output and the arena after
    each call as numpy works them out (acc and the call count steps)."""
    done = _sequence(runtime_host, pte, CALLS)
    assert done.stdout.strip() == "ok methods=2 calls=4", done.stdout + done.stderr
    expected = state_program.expected([(m, X[x]) for m, x in CALLS])
    for k, (y, arena) in enumerate(expected):
        assert np.fromfile(pte.parent / f"call{k}_output_0.bin", np.float32).tolist() == y.tolist()
        assert (pte.parent / f"call{k}_state.bin").read_bytes() == arena
    assert np.frombuffer(expected[-1][1][16:24], np.int64).tolist() == [4]  # steps: every call counted


def test_the_toy_language_model_generates_numpys_tokens_on_the_host(runtime_host, tmp_path):
    """tests/firmware/runtime/toy_lm.py: prefill of a prompt, then decode fed each token numpy
    works out at the next position; every step's token and logits are numpy's, and the cache
    after the last step holds the prompt and the tokens fed back."""
    prompt, n, length = b"Hello", 6, 16
    tokens, logits = toy_lm.generate(prompt, n, length)
    pte = tmp_path / "toy.pte"
    pte.write_bytes(toy_lm.write(length))
    padded = np.zeros((1, length), np.int64)
    padded[0, : len(prompt)] = list(prompt)
    padded.tofile(tmp_path / "tokens.bin")
    np.array([len(prompt)], np.int64).tofile(tmp_path / "length.bin")
    calls = [f"prefill={tmp_path / 'tokens.bin'},{tmp_path / 'length.bin'}"]
    for k in range(1, n):
        np.array([[tokens[k - 1]]], np.int64).tofile(tmp_path / f"token{k}.bin")
        np.array([len(prompt) + k - 1], np.int64).tofile(tmp_path / f"position{k}.bin")
        calls.append(f"decode={tmp_path / f'token{k}.bin'},{tmp_path / f'position{k}.bin'}")
    done = run_tool(runtime_host, "sequence", pte, tmp_path, *calls)
    assert done.stdout.strip() == f"ok methods=2 calls={n}", done.stdout + done.stderr
    for k in range(n):
        assert np.fromfile(tmp_path / f"call{k}_output_0.bin", np.int64).tolist() == [tokens[k]]
        assert (tmp_path / f"call{k}_output_1.bin").read_bytes() == logits[k].tobytes()
    cache = np.fromfile(tmp_path / f"call{n - 1}_state.bin", np.int64)
    assert cache.tolist() == [*prompt, *tokens[:-1], *[0] * (length - len(prompt) - n + 1)]


needs_executorch = pytest.mark.skipif(
    not ET_PYTHON.exists(),
    reason="ExecuTorch 1.5.1 environment .venv-executorch is missing: run ./scripts/executorch_env.sh",
)


@pytest.mark.executorch
@needs_executorch
def test_executorch_runs_the_two_method_program_to_the_same_outputs(pte, tmp_path):
    """ExecuTorch 1.5.1's runtime (portable kernels) loads kiln's two-plan program with its
    memory-id-2 state, shares the arena between the methods, and gives each call the output numpy
    works out."""
    calls = [
        {"method": m, "inputs": [{"dtype": "float32", "shape": [4], "hex": X[x].tobytes().hex()}]} for m, x in CALLS
    ]
    (tmp_path / "calls.json").write_text(json.dumps(calls))
    run = subprocess.run(
        [str(ET_PYTHON), str(ROOT / "tests" / "tools" / "et_run.py"), str(pte), str(tmp_path / "calls.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    outputs = json.loads(run.stdout)
    expected = state_program.expected([(m, X[x]) for m, x in CALLS])
    assert [np.frombuffer(bytes.fromhex(o[0]), np.float32).tolist() for o in outputs] == [
        y.tolist() for y, _ in expected
    ]


@pytest.mark.parametrize(
    "options, calls, expected",
    [
        ([], [("decode", "x1")], "error 0x20d method: no such method: none of that name among 2"),
        (["--buffers=1"], CALLS, "error 0x201 method: planned buffer not supplied: memory id 2 (1 buffers supplied)"),
        (["--state-bytes=16"], CALLS, "error 0x202 method: planned buffer too small: memory id 2 needs 32 bytes"),
    ],
)
def test_a_method_without_its_memory_or_name_is_refused_at_create(runtime_host, pte, options, calls, expected):
    assert _error(_sequence(runtime_host, pte, calls, *options)) == expected


def _state(plan, **changes):
    """plan with its state tensor acc (value 0) changed."""
    return state_program.with_values(plan, v0=replace(plan.values[0], **changes))


# Each a damage to the two plans, or fields written into every state's extra_tensor_info
# (state_program.extra_fields), and the loader's whole report of it.
DAMAGE = {
    "arenas of different sizes": (
        lambda plans: [plans[0], replace(plans[1], non_const_buffer_sizes=[0, 48, 48])],
        (),
        "error 0x10e pte: plans declare state arenas of different sizes: plan 1 declares 48 bytes of memory id 2, "
        "an earlier plan another size",
    ),
    "a state tensor past the arena": (
        lambda plans: [plans[0], _state(plans[1], allocation_info=AllocationInfo.at(STATE_MEMORY_ID, 24))],
        (),
        "error 0x10a pte: malformed tensor: outside its planned buffer (value 0)",
    ),
    "state data outside the file": (
        None,
        [(ExtraTensorInfoSlot.location, "i8", 1)],  # EXTERNAL: found by name elsewhere
        "error 0x10c pte: unsupported feature: tensor data outside the .pte or on another device (0)",
    ),
    "a state tensor on another device": (
        None,
        [(ExtraTensorInfoSlot.device_type, "i8", 1)],  # CUDA
        "error 0x10c pte: unsupported feature: tensor data outside the .pte or on another device (0)",
    ),
    "a second plan of two chains": (
        lambda plans: [plans[0], replace(plans[1], chains=[plans[1].chains[0], Chain([], [], [])])],
        (),
        "error 0x10c pte: unsupported feature: not exactly one chain (2)",
    ),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_state_is_refused_at_load(runtime_host, tmp_path, monkeypatch, damage):
    """kiln's writer and reader refuse each damage too (kiln.pte.validate, reader): written here
    with their checks off."""
    edit, fields, expected = DAMAGE[damage]
    for check in ("check_plan", "check_state"):
        monkeypatch.setattr(writer, check, lambda *args, **kwargs: None)
    state_program.extra_fields(monkeypatch, *fields)
    path = tmp_path / "bad.pte"
    path.write_bytes(state_program.write(edit))
    assert _error(run_tool(runtime_host, "load", path)) == expected
    if "chains" not in damage:  # two chains are valid ExecuTorch; kiln's runtime runs one
        with pytest.raises(PteError):
            deserialize(path.read_bytes())


def test_every_truncation_and_byte_flip_of_the_state_program_ends_in_an_error_or_a_run(runtime_host, pte):
    done = run_tool(runtime_host, "corrupt", pte, "--execute")
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = json.loads(done.stdout)
    assert "loaded" not in outcomes["truncations"]
    assert sum(outcomes["flips"].values()) == 3 * pte.stat().st_size
    assert outcomes["flips"].get("executed", 0) > 0

"""kiln.reference.etdump's host side: the layer table the ETDump runner is built with, and the
ETDump taken back from the runner's UART lines (the runs themselves: tests/fvp/test_etdump.py)."""

from __future__ import annotations

import base64

import pytest

from kiln import cli
from kiln.errors import RunnerError
from kiln.reference import etdump
from kiln.reference.profile import Delegate, Layer, Profile


def _profile(layers: list[Layer]) -> Profile:
    delegate = Delegate(0, sum(x.npu_cycles or 0 for x in layers), 0, 0, 0, 0, [], [])
    return Profile("m", "ethos-u55-128", "sc", "mm", layers, [delegate], [], [], 0)


def _npu(name, op, module, cycles, start, commands=1) -> Layer:
    return Layer(name, op, module, "npu", delegate=0, npu_cycles=cycles, commands=commands, start_cycle=start)


def test_labels_are_module_and_op_in_run_order_and_unique_per_delegate():
    p = _profile(
        [
            _npu("add_1", "aten.add", "blocks.0", 30, 100),
            _npu("conv", "aten.conv2d", "stem", 100, 0),
            _npu("add", "aten.add", "blocks.0", 20, 130),
            _npu("mean", "aten.mean", "", 5, 150),
            _npu("view", "aten.view", "stem", 0, 155, commands=0),  # ran no commands: no event
            Layer("q", "quantized_decomposed.quantize_per_tensor", "", "cpu"),
        ]
    )
    assert etdump.layer_labels(p) == {
        0: [
            ("stem aten.conv2d", 100),
            ("blocks.0 aten.add [add_1]", 30),
            ("blocks.0 aten.add [add]", 20),
            ("mean aten.mean", 5),
        ]
    }


def test_the_layer_table_names_the_delegate_calls_instruction():
    p = _profile([_npu("conv", "aten.conv2d", 'say "hi"', 7, 0)])
    source = etdump.layers_source(p, [("cpu", "q"), ("npu", 0), ("cpu", "dq")])
    assert r'const Layer kLayers0[] = {{"say \042hi\042 aten.conv2d", 7u}};' in source
    assert "const Delegate kDelegates[] = {{1, kLayers0, 1u, 7u}};" in source
    assert "const uint32_t kDelegateCount = 1;" in source
    with pytest.raises(RunnerError, match="2\\^32 - 1"):
        etdump.layers_source(_profile([_npu("a", "aten.mm", "x", 2**32, 0)]), [("npu", 0)])


def _printed(data: bytes, announced: int | None = None) -> list[str]:
    text = base64.b64encode(data).decode()
    lines = [text[i : i + 76] for i in range(0, len(text), 76)]
    n = len(data) if announced is None else announced
    return ["kiln executor runner: m", f"ETDump: {n} bytes, 1 run(s), times in NPU cycles (base64 follows)", *lines]


def test_collect_takes_the_bytes_between_the_lines():
    data = bytes(range(256)) * 2
    assert etdump.collect([*_printed(data), "ETDump end", "[kiln] exit 0"]) == data


@pytest.mark.parametrize(
    "lines, message",
    [
        (["inference 0: NPU cycles 1 (1 stream(s)), CPU cycles 2"], "printed no ETDump"),
        (_printed(b"abc"), "printed no ETDump"),  # no end line
        ([*_printed(b"abcd", announced=5), "ETDump end"], "announced a 5-byte ETDump and printed 4"),
        ([*_printed(b"abc")[:2], "not base64!", "ETDump end"], "not base64"),
        (["runner: ETDump: more than 32 inferences", *_printed(b"abc"), "ETDump end"], "incomplete"),
    ],
)
def test_collect_refuses_what_is_not_a_whole_etdump(lines, message):
    with pytest.raises(RunnerError, match=message):
        etdump.collect(lines)


def test_kiln_profile_refuses_etdump_for_a_pte(capsys):
    assert cli.main(["profile", "m.pte", "--target=ethos-u55-128", "--etdump=out.etdp"]) == 2
    assert "--etdump needs the model" in capsys.readouterr().err

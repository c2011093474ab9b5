"""The UART protocol's one parser (kiln.simulator.protocol) on lines written by hand, as the
apps print them (docs/running.md): the executor runner's inferences and the generation app's
prompt, tokens and text, each PMU line given to the run before it."""

from kiln.simulator import protocol
from kiln.simulator.protocol import Banner, Generation, Inference, Pmu, Token

PMU = "NPU PMU: total 8480 active 8480 idle 0 cycles, axi0_rd 272 axi0_wr 266 axi1_rd 4838 axi1_wr n/a beats"
PMU_READ = Pmu(8480, 8480, 0, {"axi0_rd": 272, "axi0_wr": 266, "axi1_rd": 4838, "axi1_wr": None})
NOT_COUNTED = "not counted (no DWT on this platform)"


def test_generation_lines_give_the_prompt_every_token_and_the_text():
    lines = [
        "kiln generate: tinylm (Shared_Sram) on corstone-320",
        r"prompt: 7 byte(s) 'It\x27s a\x0a', 4 token(s), prefill takes 32, the cache 128 positions",
        f"token 0: 101 'e' at 7 by prefill, NPU cycles 123456 (3 stream(s)), CPU cycles {NOT_COUNTED}",
        PMU,
        r"token 1: 92 '\x5c' at 8 by decode, NPU cycles 2000 (1 stream(s)), CPU cycles 7890",
        "token 2: 40000 at 9 by decode, NPU cycles 0 (0 stream(s)), CPU cycles 12",  # no byte: no quote
        r"token 3: 0 '\x00' at 10 by decode, NPU cycles 0 (0 stream(s)), CPU cycles 13",
        r"generated: 'e\x5c<40000>\x00'",
        "[kiln] exit 0",
    ]
    t = protocol.read(lines)
    assert t.banner == Banner("tinylm", "Shared_Sram", "corstone-320", "generate")
    assert t.generation == Generation(
        b"It's a\n",
        4,
        32,
        128,
        [
            Token(0, 101, 7, "prefill", 123456, 3, None, PMU_READ),
            Token(1, 92, 8, "decode", 2000, 1, 7890),
            Token(2, 40000, 9, "decode", 0, 0, 12),
            Token(3, 0, 10, "decode", 0, 0, 13),
        ],
        b"e\\<40000>\x00",
    )
    assert t.inferences == [] and t.exit_status == 0


def test_runner_lines_still_read_as_inferences_with_their_pmu():
    lines = [
        "kiln executor runner: digits (Shared_Sram) on corstone-300",
        "inference 0: NPU cycles 9020 (1 stream(s)), CPU cycles 1500",
        PMU,
        "  output 0: float32 [1, 10], 40 bytes, argmax 4",
        f"inference 1: NPU cycles 0 (0 stream(s)), CPU cycles {NOT_COUNTED}",
    ]
    t = protocol.read(lines)
    assert t.banner == Banner("digits", "Shared_Sram", "corstone-300")
    assert t.banner.app == "executor runner"
    assert [(i.index, i.npu_cycles, i.cpu_cycles, i.pmu) for i in t.inferences] == [
        (0, 9020, 1500, PMU_READ),
        (1, 0, None, None),
    ]
    assert isinstance(t.inferences[0], Inference) and t.generation is None


def test_token_lines_need_the_prompt_line_and_malformed_ones_are_left_alone():
    """A token line before any prompt line belongs to no generation; a quote with an unescaped
    apostrophe or a bad escape is no token line."""
    t = protocol.read(
        [
            "token 0: 101 'e' at 7 by prefill, NPU cycles 1 (1 stream(s)), CPU cycles 2",
            "prompt: 1 byte(s) 'a', 2 token(s), prefill takes 4, the cache 8 positions",
            "token 0: 39 ''' at 1 by prefill, NPU cycles 1 (1 stream(s)), CPU cycles 2",
            r"token 0: 39 '\x2' at 1 by prefill, NPU cycles 1 (1 stream(s)), CPU cycles 2",
            "generated: '\\'",
        ]
    )
    assert t.generation == Generation(b"a", 2, 4, 8)


def test_unescape_reads_every_byte_back():
    every = bytes(range(256))
    printed = "".join(
        chr(b) if 0x20 <= b < 0x7F and chr(b) not in "'\\" else f"\\x{b:02x}" for b in every
    )  # as generate.cpp's print_byte writes them
    assert protocol.unescape(printed) == every
    assert protocol.GENERATED_LINE.match(f"generated: '{printed}'")

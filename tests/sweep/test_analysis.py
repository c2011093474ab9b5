"""kiln.sweep.analysis on rows whose answers are worked out by hand."""

from kiln.sweep import analysis


def _row(model, target, mode, latency, sram, flash, status="ok"):
    return {
        "key": f"{model}{target}{mode}",
        "model": model,
        "target": target,
        "board": None,
        "memory_mode": mode,
        "activation_bits": 8,
        "status": status,
        "latency_ms": latency,
        "sram_bytes": sram,
        "flash_bytes": flash,
    }


ROWS = [
    _row("a", "ethos-u55-128", "Shared_Sram", 2.0, 100, 50),  # front: fastest of the small ones
    _row("a", "ethos-u55-256", "Shared_Sram", 1.0, 200, 50),  # front: fastest
    _row("a", "ethos-u55-64", "Shared_Sram", 3.0, 100, 40),  # front: least flash
    _row("a", "ethos-u55-32", "Shared_Sram", 4.0, 100, 50),  # beaten by u55-128 (slower, same memory)
    _row("a", "ethos-u65-256", "Shared_Sram", None, None, None, status="refused"),
    _row("b", "ethos-u55-128", "Shared_Sram", 5.0, 10, 10),
    _row("b", "ethos-u55-256", "Shared_Sram", 0.5, 10, 10),  # beats every other point of b
    _row("b", "ethos-u55-64", "Shared_Sram", 6.0, 10, 10),
]


def test_pareto_keeps_exactly_the_unbeaten_points():
    front = analysis.pareto(ROWS)
    assert [r["target"] for r in front["a"]] == ["ethos-u55-256", "ethos-u55-128", "ethos-u55-64"]
    assert [r["target"] for r in front["b"]] == ["ethos-u55-256"]


def test_smallest_configuration_meeting_the_budget_for_every_model():
    # 5.5 ms: u55-128 (a 2.0, b 5.0) and u55-256 (1.0, 0.5) meet it; u55-64 fails b (6.0); u55-32 lacks b.
    choice, why = analysis.smallest(ROWS, 5.5)
    assert choice.configuration == ("ethos-u55-128", None, "Shared_Sram", 8)
    assert choice.macs == 128 and choice.worst_latency_ms == 5.0
    assert "2 configurations" in why
    choice, _ = analysis.smallest(ROWS, 4.0)
    assert choice.configuration[0] == "ethos-u55-256"


def test_no_configuration_meets_a_budget_too_tight():
    choice, why = analysis.smallest(ROWS, 0.1)
    assert choice is None
    assert "the fastest, ethos-u55-256" in why and "1 ms" in why


def test_bottlenecks_are_the_costliest_layers_with_their_share():
    layers = [
        {"name": "conv", "vela_npu_cycles": 600},
        {"name": "pool", "vela_npu_cycles": 300},
        {"name": "add", "vela_npu_cycles": 100},
        {"name": "softmax", "vela_npu_cycles": None},  # on the CPU
    ]
    top = analysis.bottlenecks(layers, 2)
    assert [(x["name"], x["share"]) for x in top] == [("conv", 0.6), ("pool", 0.3)]

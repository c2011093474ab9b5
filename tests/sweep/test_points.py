"""kiln.sweep.points and kiln.sweep.cache: the grid, the content hash, the cache's files."""

import json

import pytest
import torch

from kiln.errors import UsageError
from kiln.sweep import ALL, ZOO, Grid, Point, key, load, points
from kiln.sweep.cache import Cache

MODEL = """
from pathlib import Path

import torch

ModelUnderTest = torch.nn.Linear(8, 4)
ModelUnderTest.load_state_dict(torch.load(Path(__file__).parent / "weights.pt"))
ModelInputs = (torch.ones(1, 8),)
"""


def test_grid_points_in_order_with_all_memory_modes():
    grid = Grid(models=("m",), targets=("ethos-u55-128", "ethos-u65-256"), memory_modes=(ALL,), activation_bits=(8, 16))
    got = [(p.target, p.memory_mode, p.activation_bits) for p in points(grid)]
    # corstone-300 (boards/corstone-300/board.toml): the U55 has 2 modes, the U65 6; each at 8 and 16 bits
    assert len(got) == 2 * 2 + 6 * 2
    assert got[:4] == [
        ("ethos-u55-128", "Shared_Sram", 8),
        ("ethos-u55-128", "Shared_Sram", 16),
        ("ethos-u55-128", "Sram_Only", 8),
        ("ethos-u55-128", "Sram_Only", 16),
    ]


def test_a_board_without_the_target_makes_no_point():
    grid = Grid(models=("m",), targets=("ethos-u55-128", "ethos-u85-256"), boards=("corstone-320",))
    assert [p.target for p in points(grid)] == ["ethos-u85-256"]


def test_zoo_and_all_stand_for_every_model_and_target():
    grid = Grid(models=("digits", ZOO), targets=(ALL, "ethos-u55-128"))
    # the zoo's image and audio models (README's table), each once, the first given first; not the
    # language models or the transformer architectures
    assert grid.models[0] == "digits" and len(grid.models) == len(set(grid.models))
    assert {"digits", "ds_cnn", "fc_autoencoder", "mobilenet_v1_025", "resnet8", "tiny_cnn"} <= set(grid.models)
    assert not {"tinylm", "deit_tiny", "llama_block"} & set(grid.models)
    u55 = [f"ethos-u55-{m}" for m in (32, 64, 128, 256)]
    u85 = [f"ethos-u85-{m}" for m in (128, 256, 512, 1024, 2048)]
    assert grid.targets[:4] == tuple(u55) and set(u85 + ["ethos-u65-256", "ethos-u65-512"]) <= set(grid.targets)
    assert len(grid.targets) == 11 and not {"cortex-m4", "cortex-m55"} & set(grid.targets)  # NPU targets only


def test_unknown_target_is_refused():
    with pytest.raises(UsageError, match="unknown target 'ethos-u99'"):
        Grid(models=("m",), targets=("ethos-u99",))


def test_toml_file_and_flags(tmp_path):
    f = tmp_path / "sweep.toml"
    f.write_text('models = ["tiny_cnn"]\ntargets = ["ethos-u55-128"]\nactivation_bits = [8, 16]\nbudget_ms = 2.5\n')
    grid, settings = load(f)
    assert grid.models == ("tiny_cnn",) and grid.activation_bits == (8, 16) and settings == {"budget_ms": 2.5}
    grid, _ = load(f, targets=["ethos-u85-256"], models=[])  # a flag replaces the file's list; an empty one does not
    assert grid.targets == ("ethos-u85-256",) and grid.models == ("tiny_cnn",)
    f.write_text('models = ["tiny_cnn"]\ntarget = ["ethos-u55-128"]\n')
    with pytest.raises(UsageError, match="unknown key 'target'"):
        load(f)


def test_key_changes_with_options_source_and_weights(tmp_path):
    base = Point("tiny_cnn", "ethos-u55-128")
    assert key(base) == key(Point("tiny_cnn", "ethos-u55-128"))
    others = [Point("tiny_cnn", "ethos-u55-256"), Point("tiny_cnn", "ethos-u55-128", memory_mode="Sram_Only")]
    others += [Point("tiny_cnn", "ethos-u55-128", activation_bits=16), Point("digits", "ethos-u55-128")]
    assert len({key(p) for p in [base, *others]}) == 5
    a, b = tmp_path / "a" / "m.py", tmp_path / "b" / "m.py"
    for path, seed in ((a, 0), (b, 1)):  # the same source, weights read from a file beside it
        path.parent.mkdir()
        path.write_text(MODEL)
        torch.manual_seed(seed)
        torch.save(torch.nn.Linear(8, 4).state_dict(), path.parent / "weights.pt")
    assert a.read_bytes() == b.read_bytes()
    assert key(Point(str(a), "ethos-u55-128")) != key(Point(str(b), "ethos-u55-128"))


def test_cache_round_trip_and_damaged_files(tmp_path):
    cache = Cache(tmp_path)
    k = "ab" * 32
    assert cache.get(k) is None
    path = cache.put(k, {"status": "ok"})
    assert path == tmp_path / "ab" / f"{k}.json" and cache.get(k) == {"status": "ok"}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    path.write_text("{")  # a torn file reads as missing
    assert cache.get(k) is None
    path.write_text(json.dumps({"key": "cd" * 32, "record": {}}))  # another point's file
    assert cache.get(k) is None


def test_a_model_file_that_cannot_load_still_has_a_key(tmp_path):
    """Its point is a result (the compile fails and says why), so hashing it must not stop the sweep."""
    bad = tmp_path / "bad.py"
    bad.write_text("raise ImportError('no such weights')\n")
    assert len(key(Point(str(bad), "ethos-u55-128"))) == 64

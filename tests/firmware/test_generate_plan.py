"""kiln.firmware.generate_plan: the positions a program's cache holds, which the generation app
sizes its prompt and tokens by, read from programs written with kiln's own .pte writer whose cache
is known by construction (tests/firmware/runtime/toy_lm.py: the cache [1, 1, T, 1]). The app's run
with the header it writes: tests/fvp/test_generate.py."""

from __future__ import annotations

import re

from kiln.firmware import generate_plan
from kiln.pte.reader import deserialize
from tests.firmware.runtime import state_program, toy_lm


def test_the_caches_dim_2_bounds_a_program_without_get_max_seq_len():
    assert generate_plan.cache_length(deserialize(toy_lm.write(16))) == 16
    assert generate_plan.cache_length(deserialize(toy_lm.write(24, prefill=False))) == 24


def test_get_max_seq_len_comes_first():
    """ExecuTorch's constant method, as kiln generate reads it, even below the caches' 16 rows."""
    assert generate_plan.cache_length(deserialize(toy_lm.write(16, max_seq_len=12))) == 12


def test_a_program_without_decode_has_no_bound():
    """The app refuses it at bind; the build still gets a header (the app's own maxima)."""
    assert generate_plan.cache_length(deserialize(state_program.write())) == 0xFFFF_FFFF


def test_the_header_holds_the_length_for_the_app():
    text = generate_plan.header(toy_lm.write(16, max_seq_len=12))
    assert re.findall(r"constexpr uint32_t kCacheLength = (\d+)u;", text) == ["12"]
    assert "namespace kiln::generate::plan" in text

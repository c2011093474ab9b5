"""The architecture models (kiln.models.ARCHITECTURES) on the virtual platform: each compiled
for ethos-u55-128, built into kiln's executor runner and run on two random samples, must give
`kiln run-host`'s outputs bit for bit (run-host: numpy kernels and tosa_reference_model,
independent of the firmware)."""

from __future__ import annotations

import pytest

from kiln import models

from .helpers import assert_matches_host, compiled, random_samples

pytestmark = pytest.mark.fvp


@pytest.mark.parametrize("name", list(models.ARCHITECTURES))
def test_architecture_equals_run_host_bit_for_bit(work, builder, tmp_path, name):
    pte_path = compiled(work, name)
    elf = builder(pte_path)
    assert_matches_host(pte_path, elf, "ethos-u55-128", random_samples(pte_path, 2, seed=5), tmp_path)

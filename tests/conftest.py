from pathlib import Path

import pytest

from kiln.firmware import build as firmware
from tests.helpers import once, run_folder


@pytest.fixture(scope="session")
def firmware_build(tmp_path_factory) -> Path:
    """corstone-300 firmware with the test apps, built once per test run."""
    return once(run_folder(tmp_path_factory, "fw"), lambda out: firmware.build("corstone-300", out, test_apps=True))


@pytest.fixture(scope="session")
def corstone320_build(tmp_path_factory) -> Path:
    """corstone-320 firmware (Cortex-M85, clang 19), built once per test run. Without the test
    apps: tests/fvp/apps/npu_run.cpp fills the sram region, which holds corstone-320's data too."""
    return once(run_folder(tmp_path_factory, "fw320"), lambda out: firmware.build("corstone-320", out))


def pytest_collection_modifyitems(items):
    """The end-to-end files (tests/fvp/) first, the rest in their order: they are the longest,
    and pytest-xdist hands out whole files in collection order, so a long file started last
    would leave one worker running it alone at the end."""
    items.sort(key=lambda item: not item.nodeid.startswith("tests/fvp/"))

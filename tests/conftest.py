from pathlib import Path

import pytest

from kiln.firmware import build as firmware


@pytest.fixture(scope="session")
def firmware_build(tmp_path_factory) -> Path:
    """corstone-300 firmware with the test apps, built once per session."""
    return firmware.build("corstone-300", tmp_path_factory.mktemp("fw"), test_apps=True)


@pytest.fixture(scope="session")
def corstone320_build(tmp_path_factory) -> Path:
    """corstone-320 firmware (Cortex-M85, clang 19), built once per session. Without the test
    apps: tests/fvp/apps/npu_run.cpp fills the sram region, which holds corstone-320's data too."""
    return firmware.build("corstone-320", tmp_path_factory.mktemp("fw320"))

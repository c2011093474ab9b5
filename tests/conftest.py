import shutil
from pathlib import Path

import pytest

from kiln import firmware

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def firmware_build(tmp_path_factory) -> Path:
    """corstone-300 firmware with the test apps, built once per session."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.fail("arm-none-eabi-gcc missing: ./scripts/test.sh runs ./scripts/setup.sh first")
    return firmware.build("corstone-300", tmp_path_factory.mktemp("fw"), test_apps=True)

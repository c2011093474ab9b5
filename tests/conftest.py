from pathlib import Path

import pytest

from kiln.firmware import build as firmware


@pytest.fixture(scope="session")
def firmware_build(tmp_path_factory) -> Path:
    """corstone-300 firmware with the test apps, built once per session."""
    return firmware.build("corstone-300", tmp_path_factory.mktemp("fw"), test_apps=True)

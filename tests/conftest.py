import shutil
from pathlib import Path

import pytest

from kiln.firmware import build as firmware
from tests.helpers import once, run_folder


@pytest.fixture(scope="session", autouse=True)
def compiler_cache(tmp_path_factory):
    """One ccache of C/C++ objects per test run, which every worker shares (ccache locks its own
    files), for every CMake tree the run configures: the firmware, each runner build (the
    runtime, kernels and driver are the same objects for every model of a board and build type;
    only the model's generated sources differ), the host and fuzz builds. CMake reads
    CMAKE_<LANG>_COMPILER_LAUNCHER from the environment when it configures a new tree. Paths
    under the run's temporary root are hashed relative to the build directory, so two trees
    there share objects; the sources of the checkout keep their absolute paths. Without ccache
    on PATH (scripts/setup.sh installs it), every build compiles everything, as before."""
    ccache = shutil.which("ccache")
    if ccache is None:
        yield None
        return
    folder = run_folder(tmp_path_factory, "ccache")
    settings = {
        "CCACHE_DIR": str(folder),
        "CCACHE_BASEDIR": str(folder.parents[1]),  # the run's root: each worker's folders and run/
        "CMAKE_C_COMPILER_LAUNCHER": ccache,
        "CMAKE_CXX_COMPILER_LAUNCHER": ccache,
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in settings.items():
            patch.setenv(name, value)
        yield folder


@pytest.fixture(scope="session")
def firmware_build(tmp_path_factory) -> Path:
    """corstone-300 firmware with the test apps, built once per test run."""
    return once(run_folder(tmp_path_factory, "fw"), lambda out: firmware.build("corstone-300", out, test_apps=True))


@pytest.fixture(scope="session")
def corstone320_build(tmp_path_factory) -> Path:
    """corstone-320 firmware (Cortex-M85, clang 19), built once per test run. Without the test
    apps: tests/fvp/apps/npu_run.cpp fills the sram region, which holds corstone-320's data too."""
    return once(run_folder(tmp_path_factory, "fw320"), lambda out: firmware.build("corstone-320", out))


# The longest test files, longest first: CPU seconds of each in one run of the suite
# (docs/development.md has the figures). scripts/test.sh hands whole files to its workers in
# collection order (--dist loadfile --no-loadscope-reorder: pytest-xdist's default order, the
# files with the most tests first, started these last), so the longest start first and the
# short ones fill in beside them at the end.
LONGEST = (
    "tests/fvp/test_language_model.py",
    "tests/fvp/test_executor_runner.py",
    "tests/compiler/test_transformer_compiles.py",
    "tests/compiler/test_compile.py",
    "tests/fvp/test_memory_modes.py",
    "tests/fvp/test_mlperf_tiny_cpus.py",
    "tests/fvp/test_executorch_cortex_m.py",
    "tests/compiler/test_architecture_compiles.py",
    "tests/fuzz/test_fuzz.py",
    "tests/fvp/test_integer_kernels_on_device.py",
    "tests/fvp/test_cpu_targets.py",
)


def pytest_collection_modifyitems(items):
    """The files of LONGEST first, in its order, then the other end-to-end files (tests/fvp/,
    long too), then the rest in their order."""
    rank = {name: k for k, name in enumerate(LONGEST)}

    def order(item) -> tuple[int, bool]:
        file = item.nodeid.split("::")[0]
        return rank.get(file, len(LONGEST)), not file.startswith("tests/fvp/")

    items.sort(key=order)

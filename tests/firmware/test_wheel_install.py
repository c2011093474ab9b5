"""kiln installed the way a user installs it: `pip install <checkout>` (a wheel, not editable)
into a fresh environment, then used from a directory outside the checkout to compile a zoo
model, build the executor runner for it and run that on the virtual platform.

The wheel is built from a copy of the folders pyproject.toml maps into the package (so the
checkout gets no build/ or egg-info from it) and installed into a throwaway venv. To stay
quick the venv reuses this environment's dependencies (torch, Vela, ...) through a .pth line
naming this environment's site-packages: that puts the folder on sys.path without running the
folder's own .pth files, so the checkout's editable kiln (a finder those files install) is
not imported. The dependencies' console scripts (vela) get launchers in the venv's bin/, as
pip writes them. The tests check that `kiln` does come from the venv's site-packages.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = "ethos-u55-128"
MODEL = "tiny_cnn"
SHARED = ("boards", "firmware", "cmake")  # shipped as kiln/_share/<folder>
TIMEOUT_S = 300


@dataclass
class Venv:
    path: Path
    python: Path
    site_packages: Path
    env: dict[str, str]

    def run(self, *command, cwd: Path) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [str(c) for c in command], cwd=cwd, env=self.env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout}{done.stderr}"
        return done


def _copy_sources(dest: Path) -> Path:
    """The files a wheel build reads: pyproject.toml, the readme and every package-dir folder."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dest.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", dest)
    shutil.copy2(ROOT / project["project"]["readme"], dest)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in project["tool"]["setuptools"]["package-dir"].values():
        shutil.copytree(ROOT / folder, dest / folder, ignore=ignore)
    return dest


def _launchers(bin_dir: Path, site_packages: str) -> None:
    """A console-script launcher in bin_dir for each entry point of the reused distributions
    (kiln's own excepted: the wheel's install writes that one)."""
    for dist in importlib.metadata.distributions(path=[site_packages]):
        if dist.metadata["Name"].lower() == "kiln":
            continue
        for entry in dist.entry_points.select(group="console_scripts"):
            script = bin_dir / entry.name
            if script.exists():
                continue
            head = entry.attr.split(".")[0]
            script.write_text(
                f"#!{bin_dir / 'python'}\nimport sys\nfrom {entry.module} import {head}\nsys.exit({entry.attr}())\n"
            )
            script.chmod(0o755)


def _environment(bin_dir: Path) -> dict[str, str]:
    """This process's environment with the venv's bin/ first on PATH and nothing that would
    lead back to the checkout or to this environment's kiln."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "KILN_BUILD_DIR")
    }
    ours = (Path(sys.prefix).resolve(), ROOT)
    kept = [
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and not any(Path(p).resolve().is_relative_to(prefix) for prefix in ours)
    ]
    env["PATH"] = os.pathsep.join([str(bin_dir), *kept])
    return env


def _venv(path: Path, *pip_install: str) -> Venv:
    """A venv reusing this environment's packages, with `pip install --no-deps *pip_install`."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=TIMEOUT_S)
    python = path / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_packages = Path(
        subprocess.run([str(python), "-c", purelib], capture_output=True, text=True, check=True).stdout.strip()
    )
    ours = sysconfig.get_paths()["purelib"]
    (site_packages / "reused_dependencies.pth").write_text(ours + "\n")
    _launchers(path / "bin", ours)
    venv = Venv(path, python, site_packages, _environment(path / "bin"))
    # pip comes from the reused packages; --ignore-installed: this environment's editable kiln is
    # visible on sys.path, and pip must neither count it as installed nor uninstall it.
    venv.run(
        python,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-index",
        "--ignore-installed",
        "--no-build-isolation",
        *pip_install,
        cwd=path,
    )
    return venv


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return _copy_sources(tmp_path_factory.mktemp("wheel") / "source")


@pytest.fixture(scope="module")
def wheel(source) -> Path:
    dist = source.parent / "dist"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = dist.glob("kiln-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Venv:
    return _venv(tmp_path_factory.mktemp("installed") / "venv", str(wheel))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The user's directory: outside the checkout."""
    path = tmp_path_factory.mktemp("user")
    assert not path.resolve().is_relative_to(ROOT)
    return path


@dataclass
class TinyCnn:
    pte: Path
    input: Path
    host_output: Path
    elf: Path


@pytest.fixture(scope="module")
def tiny_cnn(installed, work) -> TinyCnn:
    """MODEL compiled by the installed `kiln compile`, run by `kiln run-host` on a random input
    and built into the executor runner by the installed `kiln build`."""
    pte = work / f"{MODEL}.pte"
    installed.run("kiln", "compile", MODEL, "--target", TARGET, "--output", pte, cwd=work)
    sample = np.random.default_rng(7).uniform(-1.0, 1.0, size=(1, 1, 8, 8)).astype("<f4")
    (work / "input_0.bin").write_bytes(sample.tobytes())
    installed.run("kiln", "run-host", pte, "--input", work / "input_0.bin", "--output-dir", work / "host", cwd=work)
    done = installed.run("kiln", "build", f"--pte={pte}", f"--target={TARGET}", f"--output={work / 'runner'}", cwd=work)
    elf = Path(done.stdout.strip().splitlines()[-1])
    return TinyCnn(pte, work / "input_0.bin", work / "host" / "output_0.bin", elf)


def test_the_wheel_ships_the_firmware_boards_and_cmake_helpers_but_no_tests(source, wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in SHARED:
        expected = {
            f"kiln/_share/{folder}/{p.relative_to(source / folder).as_posix()}"
            for p in (source / folder).rglob("*")
            if p.is_file() and not p.name.startswith(".")
        }
        assert expected and expected <= names, sorted(expected - names)
    assert "kiln/_share/firmware/runtime/gen_kernel_table.py" in names
    assert {"kiln/simulator/qemu_plugin/insn_count.c", "kiln/simulator/qemu_plugin/qemu_plugin_api.h"} <= names
    assert not [n for n in names if "tests/" in n or n.endswith(".pyc")]


def test_kiln_runs_from_the_venv_not_the_checkout(installed, work):
    assert shutil.which("kiln", path=installed.env["PATH"]) == str(installed.path / "bin" / "kiln")
    done = installed.run(
        installed.python,
        "-c",
        "import json, kiln, kiln.paths as p; print(json.dumps("
        "[kiln.__file__, str(p.CHECKOUT), str(p.SOURCE_ROOT), str(p.build_root())]))",
        cwd=work,
    )
    package, checkout, source_root, build_root = json.loads(done.stdout)
    assert Path(package) == installed.site_packages / "kiln" / "__init__.py"
    assert checkout == "None"
    assert Path(source_root) == installed.site_packages / "kiln" / "_share"
    assert Path(build_root) == work.resolve() / "build"


def test_installed_kiln_builds_the_runner_from_its_own_files(installed, tiny_cnn):
    assert tiny_cnn.pte.is_file() and tiny_cnn.pte.with_suffix(".json").is_file()
    assert tiny_cnn.host_output.stat().st_size == 4 * 4  # float32 [1, 4]
    assert tiny_cnn.elf.is_file() and tiny_cnn.elf.is_relative_to(tiny_cnn.pte.parent)
    cmake = tiny_cnn.elf.parent
    assert f"KILN_PYTHON:STRING={installed.python}\n" in (cmake / "CMakeCache.txt").read_text()
    # Sources, board files, CMake helpers and the board generator all from the installed package.
    ninja = (cmake / "build.ninja").read_text()
    assert f"{ROOT}/" not in ninja
    assert f"{installed.site_packages}/kiln/_share/firmware/runtime/src/program.cpp" in ninja
    assert f"{installed.site_packages}/kiln/boards/generators.py" in ninja
    assert (
        "// Generated by firmware/runtime/gen_kernel_table.py"
        in (tiny_cnn.elf.parent.parent / "generated" / "kernel_table.cpp").read_text()
    )


@pytest.mark.fvp
def test_installed_runner_equals_run_host_on_the_virtual_platform(installed, tiny_cnn, work):
    out = work / "virtual"
    done = installed.run(
        "kiln",
        "run",
        f"--elf={tiny_cnn.elf}",
        f"--target={TARGET}",
        "--platform=virtual",
        f"--input={tiny_cnn.input}",
        f"--output-dir={out}",
        "--count-instructions",
        cwd=work,
    )
    assert "[kiln] exit 0" in done.stdout
    assert (out / "output_0.bin").read_bytes() == tiny_cnn.host_output.read_bytes()
    # The instruction-count plugin, compiled from the installed sources into the user's build/.
    assert "kiln: instructions executed in the whole run:" in done.stderr
    assert list((work / "build" / "qemu_plugin").glob("insn_count-*.so"))


def test_installed_kiln_builds_the_firmware_and_asks_for_a_checkout_for_test_apps(installed, work):
    done = installed.run(
        installed.python, "-c", "from kiln.firmware import build; print(build.build('corstone-300'))", cwd=work
    )
    assert Path(done.stdout.strip()) == work.resolve() / "build" / "firmware" / "corstone-300"
    assert (work / "build" / "firmware" / "corstone-300" / "hello.elf").is_file()
    script = (
        "from kiln.firmware import build\n"
        "try:\n    build.build('corstone-300', 'test-apps', test_apps=True)\n"
        "except build.BuildError as error:\n    print(error)\n"
    )
    done = installed.run(installed.python, "-c", script, cwd=work)
    assert "KILN_TEST_APPS needs a checkout of kiln" in done.stdout


def test_an_editable_install_reads_the_checkout(tmp_path):
    source = _copy_sources(tmp_path / "checkout")
    venv = _venv(tmp_path / "venv", "--editable", str(source))
    done = venv.run(
        venv.python,
        "-c",
        "import json, kiln, kiln.paths as p; print(json.dumps([kiln.__file__, str(p.CHECKOUT), str(p.FIRMWARE_DIR)]))",
        cwd=tmp_path,
    )
    package, checkout, firmware = json.loads(done.stdout)
    assert Path(package) == source / "compiler" / "kiln" / "__init__.py"
    assert Path(checkout) == source
    assert Path(firmware) == source / "firmware"

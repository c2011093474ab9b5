"""`kiln pack` (kiln.firmware.pack): kiln's runtime as a CMSIS-Pack. Its .pdsc is valid against the
published PACK.xsd (tests/firmware/schemas/, validated offline with lxml); the zip holds exactly
the files the .pdsc names, with firmware/'s bytes, under the spec's file name; and the sources
compile from the pack alone with the include folders the .pdsc gives (arm-none-eabi-g++)."""

from __future__ import annotations

import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import pytest
from lxml import etree

from kiln import boards, cli, paths

SCHEMA = Path(__file__).parent / "schemas" / "PACK.xsd"


@pytest.fixture(scope="module")
def schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(SCHEMA)))


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    """The pack `kiln pack` writes (its one line of output: the path)."""
    out = tmp_path_factory.mktemp("pack")
    assert cli.main(["pack", "--output", str(out)]) == 0
    (written,) = out.iterdir()
    return written


def pdsc(pack: Path) -> etree._Element:
    with zipfile.ZipFile(pack) as z:
        return etree.fromstring(z.read("Kiln.Runtime.pdsc"))


def test_the_pdsc_is_valid_against_pack_xsd(pack, schema):
    description = pdsc(pack)
    schema.assertValid(description)
    assert description.get("schemaVersion") == "1.7.60"  # the schema's own revision (its header)


def test_pack_xsd_refuses_a_pdsc_without_what_it_requires(pack, schema):
    """The validation is real: the schema's required elements and attributes, each taken away."""
    for path, attribute in (
        ("url", None),
        ("releases", None),
        ("components/component", "Cclass"),
        ("components/component/files/file", "category"),
    ):
        description = pdsc(pack)
        element = description.find(path)
        if attribute is None:
            element.getparent().remove(element)
        else:
            del element.attrib[attribute]
        assert not schema.validate(description), (path, attribute)


def test_the_pack_is_named_for_its_description_and_holds_exactly_its_files(pack):
    description = pdsc(pack)
    vendor, name = description.findtext("vendor"), description.findtext("name")
    version = description.find("releases/release").get("version")
    assert version == metadata.version("kiln")
    assert pack.name == f"{vendor}.{name}.{version}.pack"  # the spec's <vendor>.<name>.<version>.pack
    named = {f.get("name") for f in description.iter("file") if f.get("category") != "include"}
    with zipfile.ZipFile(pack) as z:
        assert set(z.namelist()) == named | {f"{vendor}.{name}.pdsc"}
        for member in named - {"config/kiln_board.h", "runtime/kernel_table_all.cpp"}:
            assert z.read(member) == (paths.FIRMWARE_DIR / member).read_bytes(), member
        assert z.read("config/kiln_board.h").decode() == boards.c_header(boards.load("corstone-300"))
    for folder in (f.get("name") for f in description.iter("file") if f.get("category") == "include"):
        assert (paths.FIRMWARE_DIR / folder).is_dir(), folder


def test_every_source_compiles_from_the_pack_alone(pack, tmp_path):
    """Unzipped, each C++ source of every component compiles (syntax and types) with the .pdsc's
    include folders and the config folder, as a CMSIS-Toolbox project adds them."""
    with zipfile.ZipFile(pack) as z:
        z.extractall(tmp_path)
    description = pdsc(pack)
    includes = [f"-I{tmp_path / f.get('name')}" for f in description.iter("file") if f.get("category") == "include"]
    includes.append(f"-I{tmp_path / 'config'}")
    sources = [f.get("name") for f in description.iter("file") if f.get("category") == "sourceCpp"]
    assert len(sources) > 20

    def compile_one(source: str) -> tuple[str, subprocess.CompletedProcess]:
        command = ["arm-none-eabi-g++", "-std=c++17", "-mcpu=cortex-m55", "-mfloat-abi=hard", "-mthumb",
                   "-fno-exceptions", "-fno-rtti", "-fsyntax-only", "-Wall", "-Werror", *includes,
                   str(tmp_path / source)]  # fmt: skip
        return source, subprocess.run(command, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=2) as pool:
        failed = [(s, r.stderr) for s, r in pool.map(compile_one, sources) if r.returncode != 0]
    assert failed == []


def test_an_output_that_is_a_file_or_an_unknown_board_is_a_usage_error(tmp_path, capsys):
    """Status 2 and one error line each (after the usage line, as every kiln usage error)."""
    file = tmp_path / "file"
    file.write_text("")
    assert cli.main(["pack", "--output", str(file)]) == 2
    assert cli.main(["pack", "--output", str(tmp_path / "out"), "--board", "no-such-board"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kiln: error: ")]
    assert len(errors) == 2 and "a file, not a folder" in errors[0] and "no-such-board" in errors[1], errors

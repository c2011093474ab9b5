"""`kiln pack --output DIR`: kiln's runtime as a CMSIS-Pack for CMSIS-Toolbox users
(docs/embedding.md), written as DIR/Kiln.Runtime.<version>.pack: a zip of the pack description
Kiln.Runtime.pdsc and kiln's firmware sources, at their paths under firmware/.

Components (Cclass "Machine Learning", Cgroup "kiln"), each a Csub:

    Runtime        the loader, executor and CPU kernels (kiln/runtime/*.h)
    Ethos-U        the Ethos-U driver, the EthosUBackend delegate and the public API kiln/kiln.h
    Platform       the console over the application's sink (kiln_console_put), the CPU services
                   (D-cache, NVIC, SysTick, DWT) and the board's facts: config/kiln_board.h, a
                   config file the project copies and the application edits (KILN_NPU_IRQ,
                   KILN_CPU_CLOCK_HZ, KILN_CPU_HAS_DCACHE; written for --board's values)
    Kernel table   kiln::runtime::kKernelTable with every kernel (a project may replace it with
                   one for its program: gen_kernel_table.py --pte, in the pack beside it)

The fields are those of the Open-CMSIS-Pack specification's PACK.xsd (schemaVersion below);
tests/firmware/test_pack.py validates the .pdsc against that schema. The version is kiln's own
(the distribution's). Written with the standard library's ElementTree and zipfile.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from xml.etree import ElementTree

from kiln import boards, paths
from kiln.errors import BuildError, UsageError

VENDOR = "Kiln"
NAME = "Runtime"
SCHEMA_VERSION = "1.7.60"  # PACK.xsd's revision the .pdsc is written for (and tested against)
URL = ""  # where the pack is published: nowhere yet (installed from the file; PACK.xsd allows "")
DEFAULT_BOARD = "corstone-300"  # whose facts config/kiln_board.h holds unless asked for another
CCLASS = "Machine Learning"
CGROUP = "kiln"
KERNEL_TABLE = "runtime/kernel_table_all.cpp"  # generated into the pack
BOARD_HEADER = "config/kiln_board.h"
# Compiled with -ffp-contract=off by kiln's CMake (float32 equal to numpy's): CMSIS-Toolbox takes
# it in the project's misc flags, as kiln export --csolution writes them.
DESCRIPTION = (
    "kiln's heap-free C++17 runtime for programs (.pte) kiln compiles from PyTorch models: loader, "
    "executor, CPU kernels, the Ethos-U55/U65/U85 driver and delegate. Compile the Runtime "
    "component with -ffp-contract=off, and C++ with -fno-exceptions -fno-rtti."
)


@dataclass(frozen=True)
class Component:
    csub: str
    description: str
    folders: tuple[str, ...]  # under firmware/: every source and header in them
    files: tuple[str, ...] = ()  # single files under firmware/
    includes: tuple[str, ...] = ()  # include folders under firmware/
    condition: str | None = None


# Runtime needs Platform (its error text prints through kiln::print); Ethos-U and the kernel
# table need both (the driver reads the board's facts, config/kiln_board.h).
PLATFORM = "kiln Platform"
CONDITION = "kiln Runtime"
COMPONENTS = (
    Component(
        "Runtime",
        "kiln's loader, executor and CPU kernels",
        ("runtime/src", "runtime/kernels"),
        includes=("runtime/include",),
        condition=PLATFORM,
    ),
    Component(
        "Ethos-U",
        "kiln's Ethos-U driver, EthosUBackend delegate and public API (kiln/kiln.h)",
        ("drivers/ethosu", "delegates/ethosu"),
        files=("embed/embed.cpp",),
        includes=("drivers/ethosu/include", "delegates/ethosu/include", "embed/include"),
        condition=CONDITION,
    ),
    Component(
        "Platform",
        "kiln's console over the application's kiln_console_put, the CPU services, the board's facts",
        (),
        files=(
            "platform/console.cpp",
            "embed/console_sink.cpp",
            "platform/semihosting.cpp",
            "platform/cpu.cpp",
            "platform/armv8m.h",
            "platform/platform_internal.h",
        ),
        includes=("platform/include",),
    ),
    Component("Kernel table", "kiln::runtime::kKernelTable with every CPU kernel", (), condition=CONDITION),
)
SUFFIXES = {".cpp": "sourceCpp", ".h": "header"}


def version() -> str:
    return metadata.version("kiln")


def file_name() -> str:
    return f"{VENDOR}.{NAME}.{version()}.pack"


def _component_files(c: Component) -> list[str]:
    """The component's files under firmware/, in a stable order."""
    found = []
    for folder in c.folders:
        found += sorted(
            p.relative_to(paths.FIRMWARE_DIR).as_posix()
            for p in (paths.FIRMWARE_DIR / folder).rglob("*")
            if p.is_file() and p.suffix in SUFFIXES and "/include/" not in f"/{p.relative_to(paths.FIRMWARE_DIR)}"
        )
    return found + list(c.files)


def _headers(folder: str) -> list[str]:
    return sorted(p.relative_to(paths.FIRMWARE_DIR).as_posix() for p in (paths.FIRMWARE_DIR / folder).rglob("*.h"))


def pdsc(board: boards.Board) -> ElementTree.Element:
    """The pack description: package, releases, conditions, components and their files."""
    package = ElementTree.Element(
        "package",
        {
            "schemaVersion": SCHEMA_VERSION,
            "xmlns:xs": "http://www.w3.org/2001/XMLSchema-instance",
            "xs:noNamespaceSchemaLocation": "PACK.xsd",
        },
    )
    for tag, text in (("vendor", VENDOR), ("name", NAME), ("description", DESCRIPTION), ("url", URL)):
        ElementTree.SubElement(package, tag).text = text
    releases = ElementTree.SubElement(package, "releases")
    ElementTree.SubElement(releases, "release", {"version": version()}).text = f"kiln {version()}"
    conditions = ElementTree.SubElement(package, "conditions")
    for identifier, needs in ((PLATFORM, ("Platform",)), (CONDITION, ("Runtime", "Platform"))):
        condition = ElementTree.SubElement(conditions, "condition", {"id": identifier})
        ElementTree.SubElement(condition, "description").text = f"kiln's {' and '.join(needs)} components"
        for csub in needs:
            ElementTree.SubElement(condition, "require", {"Cclass": CCLASS, "Cgroup": CGROUP, "Csub": csub})
    components = ElementTree.SubElement(package, "components")
    for c in COMPONENTS:
        attributes = {"Cclass": CCLASS, "Cgroup": CGROUP, "Csub": c.csub, "Cversion": version()}
        if c.condition:
            attributes["condition"] = c.condition
        component = ElementTree.SubElement(components, "component", attributes)
        ElementTree.SubElement(component, "description").text = c.description
        files = ElementTree.SubElement(component, "files")
        for folder in c.includes:
            ElementTree.SubElement(files, "file", {"category": "include", "name": f"{folder}/"})
            for header in _headers(folder):
                ElementTree.SubElement(files, "file", {"category": "header", "name": header})
        for name in _component_files(c):
            ElementTree.SubElement(files, "file", {"category": SUFFIXES[Path(name).suffix], "name": name})
        if c.csub == "Platform":
            ElementTree.SubElement(files, "file", {"category": "header", "name": BOARD_HEADER, "attr": "config"})
        if c.csub == "Kernel table":
            ElementTree.SubElement(files, "file", {"category": "sourceCpp", "name": KERNEL_TABLE})
            ElementTree.SubElement(files, "file", {"category": "utility", "name": "runtime/gen_kernel_table.py"})
    ElementTree.indent(package)
    return package


def _kernel_table() -> str:
    """Every kernel's table, as gen_kernel_table.py --all writes it."""
    script = paths.FIRMWARE_DIR / "runtime" / "gen_kernel_table.py"
    with tempfile.TemporaryDirectory(prefix="kiln-pack-") as tmp:
        out = Path(tmp) / "kernel_table.cpp"
        result = subprocess.run([sys.executable, str(script), "--all", "--output", str(out)], capture_output=True)
        if result.returncode != 0:
            raise BuildError(f"kiln pack: the kernel table: {result.stderr.decode(errors='replace').strip()}")
        return out.read_text()


def write(output: Path, board: str = DEFAULT_BOARD) -> Path:
    """Writes output/Kiln.Runtime.<version>.pack with config/kiln_board.h holding `board`'s facts;
    returns its path. A UsageError for an unknown board or an output that is a file."""
    described = boards.load(board)
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {output}: a file, not a folder")
    output.mkdir(parents=True, exist_ok=True)
    description = pdsc(described)
    path = output / file_name()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        xml = ElementTree.tostring(description, encoding="unicode")
        z.writestr(f"{VENDOR}.{NAME}.pdsc", f'<?xml version="1.0" encoding="UTF-8"?>\n{xml}\n')
        for element in description.iter("file"):
            name = element.get("name")
            if element.get("category") == "include":
                continue
            if name == KERNEL_TABLE:
                z.writestr(name, _kernel_table())
            elif name == BOARD_HEADER:
                z.writestr(name, boards.c_header(described))
            else:
                z.write(paths.FIRMWARE_DIR / name, name)
    return path

"""kiln export --csolution (issue 16, item 5): the CMSIS-Toolbox project kiln writes, checked
against the fields CMSIS-Toolbox's published schemas define, and against itself (every file it
names exists, every source kiln copied is compiled once, the linker script is the board's).

SCHEMA below encodes what Open-CMSIS-Pack/devtools tools/projmgr/schemas (csolution.schema.json,
cproject.schema.json and their common.schema.json, schema version 2.14.0) say of every field
kiln writes: which fields each node allows (`additionalProperties: false` there too), which are
required, and the patterns and enumerations of the values, copied from common.schema.json's
definitions named beside each. KILN_CMSIS_SCHEMAS=DIR (a folder holding those three files)
also validates against the published schemas themselves. About 3 s."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kiln import boards
from kiln.errors import UsageError
from kiln.firmware import csolution

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
PTE = ROOT / "tests" / "fixtures" / "executorch" / "conv_relu_arm_delegate_ethos-u55-128.pte"

STRINGS = {"type": "array", "items": {"type": "string"}}  # ArrayOfStrings
ADD_PATH = {"type": "array", "uniqueItems": True, "minItems": 1, "items": {"type": "string"}}  # AddpathsType
MISC = {
    "type": "object",
    "additionalProperties": False,  # MiscType (kiln's subset of its keys)
    "properties": {"C": STRINGS, "CPP": STRINGS, "C-CPP": STRINGS, "ASM": STRINGS, "Link": STRINGS},
}
MISCS = {"oneOf": [{"type": "array", "uniqueItems": True, "minItems": 1, "items": MISC}, MISC]}  # MiscTypes
NAME = {"type": "string", "pattern": r"^([a-zA-Z0-9_-]{1,32})$"}  # TargetType / BuildType "type"
VERSION = r"[0-9]+\.[0-9]+\.[0-9]+((\+|\-)[a-zA-Z0-9_\.\+-]+)?"
SCHEMA = {
    "definitions": {
        "solution": {
            "type": "object",
            "additionalProperties": False,
            "required": ["target-types"],  # SolutionDescType
            "properties": {
                "description": {"type": "string"},
                "created-for": {
                    "type": "string",  # CreatedInfoType
                    "pattern": r"^.*@[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?"
                    r"(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$",
                },
                "cdefault": {"type": "null"},
                "compiler": {
                    "type": "string",  # CompilerType
                    "pattern": rf"^(GCC|CLANG|AC6|IAR|CLANG_TI|XC)(@(>=)?({VERSION}))?$",
                },
                "language-C": {
                    "enum": ["c90", "gnu90", "c99", "gnu99", "c11", "gnu11", "c17", "gnu17", "c23", "gnu23"]
                },
                "language-CPP": {
                    "enum": [
                        "c++98",
                        "gnu++98",
                        "c++03",
                        "gnu++03",
                        "c++11",
                        "gnu++11",
                        "c++14",
                        "gnu++14",
                        "c++17",
                        "gnu++17",
                        "c++20",
                        "gnu++20",
                        "c++23",
                        "gnu++23",
                    ]
                },
                "packs": {
                    "type": "array",
                    "uniqueItems": True,
                    "items": {  # PacksType / PackType
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["pack"],
                        "properties": {
                            "pack": {
                                "type": "string",  # PackID
                                "pattern": r"^([a-zA-Z0-9_ \.-]+)((::[a-zA-Z0-9_ \.\*-]+)"
                                rf"(@(>=|\~|\^)?({VERSION}))?)?$",
                            }
                        },
                    },
                },
                "target-types": {
                    "type": "array",
                    "items": {  # TargetTypes / TargetType
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type"],
                        "properties": {
                            "type": NAME,
                            "device": {
                                "type": "string",  # DeviceType
                                "pattern": r"^(([ -9;-~]+::)?[ -9;-~]+)?(:[ -9;-~]+)?$",
                            },
                        },
                    },
                },
                "build-types": {
                    "type": "array",
                    "items": {  # BuildTypes / BuildType
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type"],
                        "properties": {
                            "type": NAME,
                            "debug": {"enum": ["on", "off"]},  # DebugType
                            "optimize": {"enum": ["size", "speed", "balanced", "none", "debug"]},
                        },
                    },
                },
                "projects": {
                    "type": "array",
                    "uniqueItems": True,
                    "minItems": 1,
                    "items": {  # ProjectsType
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["project"],
                        "properties": {
                            "project": {
                                "type": "string",
                                "pattern": r"^.*[/]([^.+]*\.cproject\.(yml|yaml))$"
                                r"|^([^.+]+)\.cproject\.(yml|yaml)$",
                            }
                        },
                    },
                },
            },
        },
        "project": {
            "type": ["object", "null"],
            "additionalProperties": False,  # ProjectDescType
            "properties": {
                "description": {"type": "string"},
                "add-path": ADD_PATH,
                "misc": MISCS,
                "groups": {"$ref": "#/definitions/groups"},
                "linker": {
                    "type": "array",
                    "uniqueItems": True,
                    "items": {  # LinkersType / LinkerType
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"script": {"type": "string"}},
                    },
                },
            },
        },
        "groups": {
            "type": "array",
            "uniqueItems": True,
            "minItems": 1,
            "items": {  # GroupsType / GroupType
                "type": "object",
                "additionalProperties": False,
                "required": ["group"],
                "properties": {
                    "group": {"type": "string"},
                    "add-path": ADD_PATH,
                    "misc": MISCS,
                    "groups": {"$ref": "#/definitions/groups"},
                    "files": {
                        "type": "array",
                        "uniqueItems": True,
                        "items": {  # FilesType / FileType
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["file"],
                            "properties": {"file": {"type": "string"}},
                        },
                    },
                },
            },
        },
    }
}
CSOLUTION = {
    **SCHEMA,
    "type": "object",
    "additionalProperties": False,
    "required": ["solution"],
    "properties": {"solution": {"$ref": "#/definitions/solution"}},
}
CPROJECT = {
    **SCHEMA,
    "type": "object",
    "additionalProperties": False,
    "required": ["project"],
    "properties": {"project": {"$ref": "#/definitions/project"}},
}


def errors(schema: dict, document) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(document)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The runner for ExecuTorch's conv+relu .pte (ethos-u55-128) exported for mps3-an552."""
    out = tmp_path_factory.mktemp("csolution")
    solution, project = csolution.export(PTE, "ethos-u55-128", "mps3-an552", out)
    return out, yaml.safe_load(solution.read_text()), yaml.safe_load(project.read_text())


def test_the_files_have_only_the_schemas_fields(exported):
    out, solution, project = exported
    assert errors(CSOLUTION, solution) == []
    assert errors(CPROJECT, project) == []
    s = solution["solution"]
    board = boards.load("mps3-an552")
    assert s["target-types"] == [{"type": "mps3-an552", "device": board.cmsis.device}]
    assert s["packs"] == [{"pack": board.cmsis.pack}]
    assert (out / s["projects"][0]["project"]).is_file()
    # the checks catch what the schemas refuse
    assert errors(CSOLUTION, {"solution": {**s, "target": "x"}}) and errors(CSOLUTION, {"solution": {}})
    bad_group = {**project["project"], "groups": [{"group": "g", "sources": []}]}
    assert errors(CPROJECT, {"project": bad_group})
    assert errors(CSOLUTION, {"solution": {**s, "compiler": "gcc12"}})


@pytest.mark.skipif(not os.environ.get("KILN_CMSIS_SCHEMAS"), reason="KILN_CMSIS_SCHEMAS names no schema folder")
def test_the_published_schemas(exported):
    from referencing import Registry, Resource

    folder = Path(os.environ["KILN_CMSIS_SCHEMAS"])
    common = json.loads((folder / "common.schema.json").read_text())
    _, solution, project = exported
    for name, document in (("csolution", solution), ("cproject", project)):
        schema = json.loads((folder / f"{name}.schema.json").read_text())
        base = schema["$id"].rsplit("/", 1)[0]
        registry = Registry().with_resource(f"{base}/common.schema.json", Resource.from_contents(common))
        found = list(jsonschema.Draft201909Validator(schema, registry=registry).iter_errors(document))
        assert [e.message for e in found] == []


def test_the_project_builds_what_the_runner_build_compiles(exported):
    out, _, project = exported
    p = project["project"]
    named = [f["file"] for g in p["groups"] for f in g["files"]]
    assert len(named) == len(set(named)) and all((out / f).is_file() for f in named)
    copied = {q.relative_to(out).as_posix() for q in (out / "kiln").rglob("*") if q.suffix in (".cpp", ".c", ".S")}
    other_uarts = {f"kiln/platform/{f}" for f in boards.UART_DRIVERS.values()} - {"kiln/platform/uart_cmsdk.cpp"}
    variants = {f"kiln/apps/executor_runner/{f}" for f in csolution.RUNNER_VARIANTS}
    assert variants <= copied and copied - other_uarts - variants == {f for f in named if f.startswith("kiln/")}
    assert {"generated/model_pte.S", "generated/model_memory.cpp", "generated/kernel_table.cpp"} <= set(named)
    assert all((out / d).is_dir() for d in p["add-path"])
    (script,) = (entry["script"] for entry in p["linker"])
    assert (out / script).read_text() == boards.linker_script(boards.load("mps3-an552"))


def test_boards_it_cannot_target(tmp_path):
    with pytest.raises(UsageError, match=r"board alif-e8 names no CMSIS device \(\[cmsis\] in its board.toml\)"):
        csolution.export(PTE, "ethos-u85-256", "alif-e8", tmp_path)
    with pytest.raises(UsageError, match="corstone-320's firmware is built with clang-arm-none-eabi"):
        csolution.export(PTE, "ethos-u85-256", None, tmp_path)
    with pytest.raises(UsageError, match="a file, not a folder"):
        csolution.export(PTE, "ethos-u55-128", None, Path(__file__))


def test_yaml_reads_back_as_written():
    value = {
        "a": [
            {"b": "on", "c": None, "d": ["-Wl,--gc-sections", "x: y", "12", "ARM::SSE-300-MPS3", ""]},
            {"e": {"f": "c++17"}},
        ],
        "g": "./kiln.cproject.yml",
        "h": "it's #1",
        "i": 3,
    }
    assert yaml.safe_load(csolution.to_yaml(value)) == value

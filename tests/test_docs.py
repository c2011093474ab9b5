"""The README and the manual (docs/) against the tree they describe: every link, repository path,
`kiln` command and option, script, `python -m` module and `kiln.` name they mention exists, so a
rename or a removed option that the docs still name fails here. The README stays a front page."""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import itertools
import re
from pathlib import Path

import pytest

from kiln import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = {ROOT / "docs" / "OPS.md", ROOT / "docs" / "SUPPORTED_OPS.md"}  # checked by their own tests
WRITTEN = [p for p in PAGES if p not in GENERATED]
TOP_FOLDERS = ("compiler", "simulator", "models", "firmware", "boards", "cmake", "scripts", "tests", "bench", "docs")
SCRIPTS = {"run.sh": "deploy", "build_executor_runner.sh": "build", "run_fvp.sh": "run", "flash.sh": "flash"}
FRONT_PAGE_LINES = 150

CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FILE_NAME = re.compile(r"\.(ya?ml|json|toml|txt|md|pte|elf)$")  # kiln.csolution.yml is a file, not a module


def _ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


def _snippets(text: str) -> list[str]:
    """The page's code: each line of its fenced blocks, and each inline code span."""
    fenced = [line for block in FENCE.findall(text) for line in block.splitlines()]
    return fenced + CODE_SPAN.findall(FENCE.sub("", text))


def _expand(pattern: str) -> list[str]:
    """A documented path as globs: `{a,b}` alternatives, `<name>` and `...` placeholders."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return [re.sub(r"<[^<>]*>|\.\.\.", "*", "".join(c)) for c in itertools.product(*choices)]


def _paths(text: str) -> set[str]:
    found = set()
    for snippet in _snippets(text):
        for token in re.split(r"[\s=(),;]+", snippet):
            token = token.strip("'\".:").removeprefix("./")
            if "/" in token and token.split("/")[0] in TOP_FOLDERS and "::" not in token:
                found.add(token)
    return found


@functools.cache
def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser(None)
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """(subcommand, options) of every command line the page shows, `kiln SUB ...` or
    `./scripts/X.sh ...` (a script stands for the subcommand it wraps); a command starts its
    line or code span, and an upper-case SUB is a placeholder (`kiln COMMAND --help`)."""
    found = []
    for snippet in _snippets(text):
        m = re.match(r"\s*(?:\S*/)?(?:kiln (\S+)|scripts/(\w+\.sh))(.*)", snippet)
        if m is None or (m.group(2) and m.group(2) not in SCRIPTS) or (m.group(1) or "").isupper():
            continue  # not a command; setup.sh and test.sh take no kiln options
        sub = m.group(1) or SCRIPTS[m.group(2)]
        options = [o.split("=")[0].rstrip(".,;:)]") for o in re.findall(r"--[\w-]+(?:=\S*)?", m.group(3))]
        found.append((sub, [o.replace("_", "-") for o in options]))
    return found


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_links_resolve(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{page.name} links to what does not exist: {broken}"


@pytest.mark.parametrize("page", WRITTEN, ids=_ids(WRITTEN))
def test_paths_exist(page):
    missing = [p for p in sorted(_paths(page.read_text())) if not any(ROOT.glob(g) for g in _expand(p))]
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", WRITTEN, ids=_ids(WRITTEN))
def test_commands_and_options_exist(page):
    subcommands = _subcommands()
    wrong = []
    for sub, options in _commands(page.read_text()):
        if sub not in subcommands:
            wrong.append(f"kiln {sub}")
            continue
        known = set(subcommands[sub]._option_string_actions)
        wrong += [f"kiln {sub} {o}" for o in options if o not in known]
    assert not wrong, f"{page.name} names commands or options kiln does not have: {wrong}"


@pytest.mark.parametrize("page", WRITTEN, ids=_ids(WRITTEN))
def test_modules_and_names_exist(page):
    text = page.read_text()
    missing = [m for m in re.findall(r"python -m ([\w.]+)", text) if importlib.util.find_spec(m) is None]
    for span in CODE_SPAN.findall(text):
        name = re.fullmatch(r"(kiln(?:\.\w+)+)(?:\(\))?", span)  # a span that names a kiln object
        if name and not FILE_NAME.search(span) and not _resolves(name.group(1)):
            missing.append(name.group(1))
    assert not missing, f"{page.name} names modules or objects that do not exist: {missing}"


def test_every_manual_page_is_linked_from_the_front_page():
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in readme]
    assert not unlinked, f"README.md does not link to {unlinked}"


def test_the_readme_is_a_front_page():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= FRONT_PAGE_LINES, f"README.md has {lines} lines; the manual belongs in docs/"


def test_the_checks_find_what_is_wrong(tmp_path):
    """Each check, given a page with one fault of its kind, reports it."""
    page = "See [x](nowhere.md), `compiler/kiln/nothing.py`, `kiln compile --no-such-flag`, `kiln frobnicate`,\n"
    page += "`./scripts/run_fvp.sh --elf=x --bogus`, `python -m kiln.nothing` and `kiln.lower.no_module`.\n"
    page += "```sh\n.venv/bin/kiln build --pte=F --output_dir=D\n```\n"
    assert _paths(page) == {"compiler/kiln/nothing.py"}
    assert _commands(page) == [
        ("build", ["--pte", "--output-dir"]),
        ("compile", ["--no-such-flag"]),
        ("frobnicate", []),
        ("run", ["--elf", "--bogus"]),
    ]
    assert not _resolves("kiln.lower.no_module") and _resolves("kiln.lower.tosa.lower")
    assert importlib.util.find_spec("kiln.nothing") is None
    assert _expand("npu/{u55,u85}/<x>.py") == ["npu/u55/*.py", "npu/u85/*.py"]


def _resolves(name: str) -> bool:
    """`name` is a kiln module, or an attribute of one (a function, class or constant)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        obj = importlib.import_module(module)
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False

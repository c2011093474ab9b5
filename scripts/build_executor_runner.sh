#!/usr/bin/env bash
# Build kiln's executor runner firmware for one .pte (or, with --pte repeated, one image of
# several models): `kiln build`. Reads the program, sizes and places every buffer for the memory
# mode, links only the kernels the program names,
# builds it with CMake and the toolchain of the target's board (board.toml), writes
# memory_report.txt/.json beside the build and prints the ELF's path as its last line.
#   ./scripts/build_executor_runner.sh --pte=FILE --target=ethos-u55-128 [--system_config=NAME]
#       [--memory_mode=NAME] [--build_type=Release|Debug] [--output=DIR] [--default-input=FILE]...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -x "$ROOT/.venv/bin/kiln" ] || "$ROOT/scripts/setup.sh" >&2
exec "$ROOT/.venv/bin/kiln" --as=build_executor_runner.sh build "$@"

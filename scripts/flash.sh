#!/usr/bin/env bash
# Put a firmware ELF on a board: `kiln flash` (./scripts/flash.sh --help for its options).
#   ./scripts/flash.sh --board=mps3-an552 --elf=build/.../executor_runner.elf --drive=/media/$USER/V2M-MPS3
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -x "$ROOT/.venv/bin/kiln" ] || "$ROOT/scripts/setup.sh" >&2
exec "$ROOT/.venv/bin/kiln" --as=flash.sh flash "$@"

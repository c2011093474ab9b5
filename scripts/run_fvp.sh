#!/usr/bin/env bash
# Run a firmware ELF on Arm's FVP when one is on PATH, else on kiln's virtual platform.
#   ./scripts/run_fvp.sh --elf=FILE --target=ethos-u55-128 [--timeout=S] [--platform=auto|fvp|virtual]
# Exit status: the firmware's own; 134 fault; 124 timeout; 2 usage; 127 no platform.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -x "$ROOT/.venv/bin/python" ] || "$ROOT/scripts/setup.sh" >&2
exec "$ROOT/.venv/bin/python" -m kiln.simulator.run "$@"

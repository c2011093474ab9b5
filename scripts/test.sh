#!/usr/bin/env bash
# The whole test suite: set up what is missing, then pytest (arguments pass through).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest "$@"

#!/usr/bin/env bash
# The whole test suite: set up what is missing (kiln's environment, and ExecuTorch's for the
# cross-checks), then pytest (arguments pass through).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
# ExecuTorch 1.5.1 in a throwaway environment: the independent reader the `executorch` tests use.
"$ROOT/scripts/executorch_env.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest "$@"

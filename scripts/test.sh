#!/usr/bin/env bash
# The whole test suite: set up what is missing (kiln's environment, and ExecuTorch's for the
# cross-checks), then pytest (arguments pass through, after the defaults they may override):
# one worker per core (pytest-xdist; KILN_TEST_WORKERS=N sets another count, 0 runs in this
# process), each test file whole on one worker, so a module's fixtures are made once, handed out
# in collection order (tests/conftest.py puts the longest files first). Test files
# run side by side: one that writes outside its own temporary folders must write where no other
# file's tests do (the run.sh test alone writes build/digits.* and build/runner/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
# ExecuTorch 1.5.1 in a throwaway environment: the independent reader the `executorch` tests use.
"$ROOT/scripts/executorch_env.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest -n "${KILN_TEST_WORKERS:-auto}" --dist loadfile --no-loadscope-reorder "$@"

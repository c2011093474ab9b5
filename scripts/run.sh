#!/usr/bin/env bash
# kiln's main job end to end on defaults: `kiln deploy` (compiler/kiln/cli.py) after setting
# up what is missing. Compiles the model for the target (the report on the terminal, .pte
# and .json in build/), builds kiln's executor runner firmware for that .pte (as
# ./scripts/build_executor_runner.sh) and runs it on Arm's FVP if installed, else on kiln's
# virtual platform (as ./scripts/run_fvp.sh). For the digits model it prints the predicted
# digit beside the true label for held-out images, with the NPU and CPU cycles per
# inference; other models run once on the runner's built-in inputs.
#   ./scripts/run.sh [--model=digits|NAME|FILE.py] [--target=ethos-u55-128] [--count=8]
#       [--memory_mode=NAME] [--system_config=NAME] [--platform=auto|fvp|virtual] [--timeout=S]
# `./scripts/run.sh --help` lists the options (setting up only a missing .venv first, as the
# other wrappers do); the exit status is kiln deploy's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELP=0
for arg in "$@"; do
  case "$arg" in
    --) break ;;
    -h|--help) HELP=1 ;;
  esac
done
if [ "$HELP" = 1 ]; then
  [ -x "$ROOT/.venv/bin/kiln" ] || "$ROOT/scripts/setup.sh" >&2
else
  "$ROOT/scripts/setup.sh"
fi
exec "$ROOT/.venv/bin/kiln" --as=run.sh deploy "$@"

#!/usr/bin/env bash
# kiln's main job end to end on defaults: set up what is missing, compile the
# model for the target (report on the terminal, .pte and .json in build/), build
# kiln's executor runner firmware for that .pte (./scripts/build_executor_runner.sh)
# and run it on Arm's FVP if installed, else on kiln's virtual platform. For the
# digits model it prints the predicted digit beside the true label for held-out
# images, with the NPU cycles and CPU time per inference; other models run once on
# the runner's built-in inputs and their outputs are summarised.
#   ./scripts/run.sh [--model=digits|NAME|FILE.py] [--target=ethos-u55-128] [--count=8]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

TARGET="ethos-u55-128"
MODEL="digits"
COUNT=8
for arg in "$@"; do
  case "$arg" in
    --target=*) TARGET="${arg#--target=}" ;;
    --model=*) MODEL="${arg#--model=}" ;;
    --count=*) COUNT="${arg#--count=}" ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

"$ROOT/scripts/setup.sh"
NAME="$(basename "${MODEL%.py}")"
PTE="$ROOT/build/$NAME.pte"
echo "run: compiling $MODEL for $TARGET"
mkdir -p "$ROOT/build"
"$ROOT/.venv/bin/kiln" compile "$MODEL" --target "$TARGET" --output "$PTE"
echo "run: building the executor runner for $NAME on $TARGET"
ELF="$("$ROOT/scripts/build_executor_runner.sh" --pte="$PTE" --target="$TARGET" | tee /dev/stderr | tail -n 1)"
echo "run: running $ELF"
if [ "$NAME" = "digits" ]; then
  exec "$ROOT/.venv/bin/python" -m kiln.firmware.runner_run digits --elf="$ELF" --pte="$PTE" --target="$TARGET" --count="$COUNT"
fi
exec "$ROOT/scripts/run_fvp.sh" --elf="$ELF" --target="$TARGET"

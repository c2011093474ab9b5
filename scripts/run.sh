#!/usr/bin/env bash
# kiln's main job end to end on defaults: set up what is missing, compile the
# model for the target (report on the terminal, .pte and .json in build/), build
# the firmware for the target's board, and run it on Arm's FVP if installed, else
# on kiln's virtual platform. (Until the runtime lands the firmware is the
# platform's hello app, which does not run the .pte yet.)
#   ./scripts/run.sh [--model=digits] [--target=ethos-u55-128]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

TARGET="ethos-u55-128"
MODEL="digits"
for arg in "$@"; do
  case "$arg" in
    --target=*) TARGET="${arg#--target=}" ;;
    --model=*) MODEL="${arg#--model=}" ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

"$ROOT/scripts/setup.sh"
echo "run: compiling $MODEL for $TARGET"
mkdir -p "$ROOT/build"
"$ROOT/.venv/bin/kiln" compile "$MODEL" --target "$TARGET" --output "$ROOT/build/$(basename "${MODEL%.py}").pte"
echo "run: building the firmware for $TARGET"
ELF="$("$ROOT/.venv/bin/kiln" build-firmware --target "$TARGET")"
echo "run: running $ELF"
exec "$ROOT/scripts/run_fvp.sh" --elf="$ELF" --target="$TARGET"

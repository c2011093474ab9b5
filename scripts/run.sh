#!/usr/bin/env bash
# kiln's main job end to end on defaults: set up what is missing, build the
# firmware for the target's board, and run it on Arm's FVP if installed, else
# on kiln's virtual platform. (Today the firmware is the platform's hello app;
# compiling a model joins this flow with the AOT compiler.)
#   ./scripts/run.sh [--target=ethos-u55-128]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

TARGET="ethos-u55-128"
for arg in "$@"; do
  case "$arg" in
    --target=*) TARGET="${arg#--target=}" ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

"$ROOT/scripts/setup.sh"
echo "run: building the firmware for $TARGET"
ELF="$("$ROOT/.venv/bin/kiln" build-firmware --target "$TARGET")"
echo "run: running $ELF"
exec "$ROOT/scripts/run_fvp.sh" --elf="$ELF" --target="$TARGET"

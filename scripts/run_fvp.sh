#!/usr/bin/env bash
# Run a firmware ELF on Arm's FVP when one is on PATH, else on kiln's virtual platform
# (QEMU mps3-an547, also for corstone-320 ELFs, with kiln's model of the target's Ethos-U
# attached): `kiln run`.
#   ./scripts/run_fvp.sh --elf=FILE --target=ethos-u55-128 [--timeout=S] [--platform=auto|fvp|virtual]
#       [--input=FILE]... [--output-dir=DIR] [--npu-timeout-ms=N]
#       [--count-instructions[=FUNCTION] [--profile-instructions]]
#       [--profile=PTE [--profile-output=DIR]]
# --profile: the .pte the ELF was built from; runs it on the virtual platform and prints kiln
# profile's per-layer table (README "Profiling a model").
# --count-instructions: on the virtual platform, the instructions the whole run and each
# call of FUNCTION executed (kiln's QEMU plugin, simulator/kiln/simulator/qemu_plugin/), on stderr.
# Exit status: the firmware's own; 134 fault; 124 timeout; 125 the platform stopped
# without an exit (e.g. the NPU model refused an access); 2 usage; 127 no platform.
# KILN_VP_NPU_HANG=1: the virtual NPU never finishes a stream (tests firmware timeouts).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -x "$ROOT/.venv/bin/kiln" ] || "$ROOT/scripts/setup.sh" >&2
exec "$ROOT/.venv/bin/kiln" --as=run_fvp.sh run "$@"

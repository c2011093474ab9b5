#!/usr/bin/env bash
# Creates .venv-executorch: a throwaway Python environment with ExecuTorch 1.5.1, used
# only as an independent check of kiln's .pte files (tests marked `executorch`) and to
# make the fixtures in tests/fixtures/executorch/. It is not part of kiln's runtime.
#   torch==2.13.0 first (the CPU wheel), then executorch[ethos-u]==1.5.1 constrained to
#   that torch, so pip can neither pull another torch nor any CUDA package (checked
#   afterwards). The ethos-u extra brings the Vela and TOSA versions ExecuTorch 1.5.1
#   pins (ethos-u-vela 5.1.0, tosa-tools 2026.5.0), which its Arm flow needs.
# Idempotent: a stamp file records what was installed; a second run returns at once.
# Prints the time taken and the size of the environment when it installs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-executorch"
STAMP="$VENV/.kiln-executorch-env"
WANT="torch==2.13.0 executorch[ethos-u]==1.5.1"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; then
  echo "executorch_env: $VENV up to date"
  exit 0
fi

PYTHON="${KILN_PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "executorch_env: needs Python 3.11 (set KILN_PYTHON)" >&2; exit 1; }

# pip's notes about index locations that do not exist here are noise.
quiet_pip() { "$VENV/bin/pip" install -q "$@" 2>&1 | { grep -v "^WARNING: Location .* is ignored" || true; }; }

start=$(date +%s)
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "executorch_env: installing torch==2.13.0 (CPU)"
quiet_pip "torch==2.13.0"
echo "executorch_env: installing $WANT"
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
echo "torch==2.13.0" > "$pins"
quiet_pip -c "$pins" "executorch[ethos-u]==1.5.1"

# The torch must still be the one installed first, and nothing CUDA may have come along.
# torchao prints warnings on import, so the output is shown only when the check fails.
check_script='
import importlib.metadata as md, sys
import torch, executorch.exir._serialize._program  # the deserializer loads
import ethosu.vela, tosa_serializer                 # the Arm flow tools load
names = [d.metadata["Name"].lower() for d in md.distributions()]
cuda = [n for n in names if n.startswith(("nvidia-", "triton", "cuda"))]
problems = []
if not torch.__version__.startswith("2.13.0"):
    problems.append(f"torch is {torch.__version__}, not 2.13.0")
if md.version("executorch") != "1.5.1":
    problems.append("executorch is " + md.version("executorch") + ", not 1.5.1")
if cuda:
    problems.append("CUDA packages were installed: " + ", ".join(sorted(cuda)))
if problems:
    sys.exit("executorch_env: " + "; ".join(problems))
print(f"executorch_env: {len(names)} packages, torch {torch.__version__}, no CUDA")
'
check="$("$VENV/bin/python" -c "$check_script" 2>&1)" || { echo "$check" >&2; exit 1; }
echo "$check" | grep '^executorch_env:'

echo "$WANT" > "$STAMP"
echo "executorch_env: done in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1) in $VENV"

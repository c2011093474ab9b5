#!/usr/bin/env bash
# Installs everything kiln needs, and only what is missing; a second run takes seconds.
#   1. Debian packages: the Arm bare-metal toolchain, QEMU, CMake, Ninja, the host
#      C++ compiler for the runtime's sanitizer tests, and clang 19 (corstone-320's
#      Cortex-M85 firmware compiler) with its runtime (libFuzzer, ASan, UBSan) for the
#      fuzz targets of tests/fuzz, clang-format 19 for the style check, and ccache (the test
#      suite's compiler cache, one per run: tests/conftest.py) (apt, as root).
#   2. .venv at the repository root: Python 3.11 with the pinned dependencies
#      (torch==2.13.0 exactly, scripts/constraints.txt for the rest) and kiln, editable.
#   3. Arm's ML Inference Advisor 0.12.3 wheel, downloaded (not installed: its pins clash with
#      kiln's) into .venv/share/mlia: the sweep tests validate kiln's MLIA JSON against the
#      output schema it publishes.
# Stops at the first failure and names the step.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
CONSTRAINTS="$ROOT/scripts/constraints.txt"
STAMP="$VENV/.kiln-setup"
APT_PACKAGES=(gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib
              qemu-system-arm cmake ninja-build g++ clang-19 libclang-rt-19-dev clang-format-19 ccache)

STEP="start"
say() { echo "setup: $*"; }
trap 'echo "setup: FAILED during: $STEP (see the output above); fix it and run ./scripts/setup.sh again" >&2' ERR

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "setup: '$*' needs root; run ./scripts/setup.sh as root or install sudo" >&2; return 1
  fi
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# A Python 3.11 that can make virtual environments (the torch wheel is for CPython 3.11).
find_python() {
  local candidate
  for candidate in "${KILN_PYTHON:-}" python3.11 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null \
      && { command -v "$candidate"; return 0; }
  done
  return 1
}

STEP="checking Debian packages"
missing=()
for package in "${APT_PACKAGES[@]}"; do installed "$package" || missing+=("$package"); done
PYTHON="$(find_python || true)"
[ -n "$PYTHON" ] || missing+=(python3 python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || { echo "setup: apt-get not found; kiln's set-up needs Debian or a derivative (missing: ${missing[*]})" >&2; false; }
  STEP="apt-get update"
  say "installing Debian packages: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  STEP="apt-get install ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  PYTHON="$(find_python || true)"
else
  say "Debian packages present"
fi
STEP="finding Python 3.11"
[ -n "$PYTHON" ] || { echo "setup: no Python 3.11 with venv found (set KILN_PYTHON to one)" >&2; false; }

install_python_environment() {
  if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
    STEP="creating .venv with $PYTHON"
    say "creating $VENV with $PYTHON"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  export PIP_DISABLE_PIP_VERSION_CHECK=1
  # torch first and exactly: a looser request lets pip fetch a newer CUDA build.
  STEP="pip install torch==2.13.0"
  say "installing torch==2.13.0 (CPU)"
  "$VENV/bin/pip" install -q "torch==2.13.0"
  STEP="pip install kiln and its pinned dependencies"
  say "installing kiln (editable) and its pinned dependencies"
  "$VENV/bin/pip" install -q -c "$CONSTRAINTS" -e "$ROOT[test,flash,ray]"
  STEP="checking the installed environment"
  # torchao prints warnings about CUDA kernels on import: show the output only on failure.
  check_output="$("$VENV/bin/python" -c 'import torch, torchao, ethosu.vela, tosa_serializer, kiln.boards
assert torch.__version__.startswith("2.13.0"), torch.__version__' 2>&1)" || { echo "$check_output" >&2; false; }
  echo "$want" > "$STAMP"
}

STEP="checking the Python environment"
want="$(cat "$ROOT/pyproject.toml" "$CONSTRAINTS" | sha256sum | cut -d' ' -f1) $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ] \
   && "$VENV/bin/python" -c 'import kiln.boards' 2>/dev/null; then
  say "Python environment .venv up to date"
else
  install_python_environment
fi

STEP="downloading MLIA's wheel (its published JSON schemas)"
MLIA_WHEEL="$VENV/share/mlia/mlia-0.12.3-py3-none-any.whl"
if [ -f "$MLIA_WHEEL" ]; then
  say "MLIA's wheel present"
else
  say "downloading mlia==0.12.3 (for its JSON schemas)"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" download -q --no-deps "mlia==0.12.3" -d "$VENV/share/mlia"
fi
say "done"

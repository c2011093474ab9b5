#!/usr/bin/env bash
# Writes ExecuTorch 1.5.1's Cortex-M programs of zoo models as bundles, with its own Arm flow
# (aot_arm_compiler -t cortex-m55 --quantize --bundleio: no delegate; the compute ops are
# ExecuTorch's cortex_m:: operators, activations channels-last), in the throwaway environment
# of scripts/executorch_env.sh (created if missing):
#   make_executorch_cortex_m_fixtures.sh OUTDIR [MODEL...]     (default: ds_cnn resnet8)
# OUTDIR/<model>_arm_cortex-m55.bpte: the program with one case, the model's example input and
# the output of ExecuTorch's quantized reference model (PT2E, in PyTorch). A MODEL with a file
# tests/fixtures/executorch/<MODEL>.py is that file's model (ops: one that makes the flow write
# most of its operators); any other is kiln's zoo's (tests/fixtures/executorch/zoo.py loads it
# without kiln installed). The tests make them (tests/fvp/test_executorch_cortex_m.py, about
# 25 s each): 17 kB and more, too large to keep.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv-executorch/bin/python"
OUT="$(mkdir -p "${1:?usage: make_executorch_cortex_m_fixtures.sh OUTDIR [MODEL...]}" && cd "$1" && pwd)"
shift
"$ROOT/scripts/executorch_env.sh" >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(ds_cnn resnet8)
for name in "${models[@]}"; do
  bpte="$OUT/${name}_arm_cortex-m55.bpte"
  source="$ROOT/tests/fixtures/executorch/$name.py"
  [ "$name" != zoo ] && [ -f "$source" ] || source="$ROOT/tests/fixtures/executorch/zoo.py"
  (cd "$work" && KILN_ZOO_MODEL="$name" "$PY" -m executorch.backends.arm.scripts.aot_arm_compiler \
      --model_name "$source" --target cortex-m55 --quantize --bundleio \
      --output "$bpte" > "$work/log.txt" 2>&1) \
    || { cat "$work/log.txt" >&2; echo "make_executorch_cortex_m_fixtures: $name failed" >&2; exit 1; }
  rm -f "${bpte%.bpte}_etrecord.bin"  # ExecuTorch's record of the compile, which nothing reads
  echo "make_executorch_cortex_m_fixtures: $bpte ($(wc -c < "$bpte") bytes)"
done

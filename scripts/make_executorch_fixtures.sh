#!/usr/bin/env bash
# Regenerates tests/fixtures/executorch/*.pte with ExecuTorch 1.5.1's own Arm flow, in the
# throwaway environment of scripts/executorch_env.sh (created if missing). The model is
# tests/fixtures/executorch/conv_relu.py (conv 1->4, 3x3, + relu on a 1x1x8x8 input, fixed
# seeds). kiln's tests read these files to check that kiln.pte.reader reads what ExecuTorch writes.
#   conv_relu_arm_delegate_ethos-u55-128.pte  --delegate --quantize: one EthosUBackend
#       delegate (payload inline, as aot_arm_compiler writes it) between the cortex_m
#       quantize/dequantize kernels; no extended header.
#   conv_relu_arm_ethos-u55-128.pte  --quantize only: CPU kernels with constant tensors in
#       the constant segment, behind an eh00 extended header.
#   conv_relu_arm_delegate_ethos-u55-128.bpte  --delegate --quantize --bundleio: the delegated
#       program as a BundledProgram (BP08) with one case, the example input and the eager
#       model's output (kiln's runner runs and checks it: tests/fvp/test_bundle.py).
# Running it twice gives the same bytes (checked below).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FIXTURES="$ROOT/tests/fixtures/executorch"
PY="$ROOT/.venv-executorch/bin/python"
"$ROOT/scripts/executorch_env.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
compile() {  # compile OUTDIR [flags...]: runs the Arm flow from a scratch directory
  local out="$1"; shift
  mkdir -p "$out"
  (cd "$work" && "$PY" -m executorch.backends.arm.scripts.aot_arm_compiler \
      --model_name "$FIXTURES/conv_relu.py" --target ethos-u55-128 --output "$out" "$@" \
      > "$out/log.txt" 2>&1) || { cat "$out/log.txt" >&2; echo "make_executorch_fixtures: aot_arm_compiler $* failed" >&2; exit 1; }
}
for run in a b; do
  compile "$work/$run" --delegate --quantize
  compile "$work/$run" --quantize
  compile "$work/$run/bundle" --delegate --quantize --bundleio
  mv "$work/$run/bundle/conv_relu_arm_delegate_ethos-u55-128.bpte" "$work/$run/"
done
for name in conv_relu_arm_delegate_ethos-u55-128.pte conv_relu_arm_ethos-u55-128.pte \
            conv_relu_arm_delegate_ethos-u55-128.bpte; do
  cmp -s "$work/a/$name" "$work/b/$name" \
    || { echo "make_executorch_fixtures: $name differs between two runs" >&2; exit 1; }
  cp "$work/a/$name" "$FIXTURES/$name"
  echo "make_executorch_fixtures: $FIXTURES/$name ($(wc -c < "$FIXTURES/$name") bytes)"
done

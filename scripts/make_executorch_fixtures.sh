#!/usr/bin/env bash
# Regenerates tests/fixtures/executorch/*.pte and *.bpte with ExecuTorch 1.5.1's own Arm flow, in
# the throwaway environment of scripts/executorch_env.sh (created if missing). The model is
# tests/fixtures/executorch/conv_relu.py (conv 1->4, 3x3, + relu on a 1x1x8x8 input, fixed
# seeds), and add2.py for a bundle. kiln's tests read these files to check that kiln reads what
# ExecuTorch writes (kiln.pte.reader, kiln.pte.bundle) and that kiln's runner runs it.
#   conv_relu_arm_delegate_ethos-u55-128.pte  --delegate --quantize: one EthosUBackend
#       delegate (payload inline, as aot_arm_compiler writes it) between the cortex_m
#       quantize/dequantize kernels; no extended header.
#   conv_relu_arm_ethos-u55-128.pte  --quantize only: CPU kernels with constant tensors in
#       the constant segment, behind an eh00 extended header.
#   conv_relu_arm_delegate_ethos-u55-128.bpte  --delegate --quantize --bundleio: the delegated
#       program as a BundledProgram (BP08) with one case: the example input and the output of
#       the quantized reference model (PT2E, in PyTorch); kiln's runner runs and checks it
#       (tests/fvp/test_bundle.py).
#   add2_arm_delegate_ethos-u55-128.bpte  the same of tests/fixtures/executorch/add2.py (two
#       inputs, three outputs: ExecuTorch's example qadd2 with seeded inputs).
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
      --model_name "$FIXTURES/${MODEL:-conv_relu}.py" --target ethos-u55-128 --output "$out" "$@" \
      > "$out/log.txt" 2>&1) || { cat "$out/log.txt" >&2; echo "make_executorch_fixtures: aot_arm_compiler $* failed" >&2; exit 1; }
}
for run in a b; do
  compile "$work/$run" --delegate --quantize
  compile "$work/$run" --quantize
  compile "$work/$run/bundle" --delegate --quantize --bundleio
  MODEL=add2 compile "$work/$run/bundle" --delegate --quantize --bundleio
  mv "$work/$run/bundle/"*.bpte "$work/$run/"
done
for name in conv_relu_arm_delegate_ethos-u55-128.pte conv_relu_arm_ethos-u55-128.pte \
            conv_relu_arm_delegate_ethos-u55-128.bpte add2_arm_delegate_ethos-u55-128.bpte; do
  cmp -s "$work/a/$name" "$work/b/$name" \
    || { echo "make_executorch_fixtures: $name differs between two runs" >&2; exit 1; }
  cp "$work/a/$name" "$FIXTURES/$name"
  echo "make_executorch_fixtures: $FIXTURES/$name ($(wc -c < "$FIXTURES/$name") bytes)"
done

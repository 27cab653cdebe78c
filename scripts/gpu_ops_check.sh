#!/usr/bin/env bash
# One device call for the op library: the [gpu] tests (every op's reference and seeds),
# then every seed of every op and dtype at its default and a few random parameter
# assignments on all tune shapes (kevolve eval), so seeds can be tuned from the numbers.
#   scripts/gpu_ops_check.sh [OPS] [VARIANTS]     e.g. scripts/gpu_ops_check.sh rmsnorm,matmul 4
# Run from the repository root after `source .gpu/env.sh`. Logs go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/kevolve-ops}
ops=${1:-softmax,rmsnorm,layernorm,matmul} variants=${2:-3}
mkdir -p "$out"
export KEVOLVE_HOME=$PWD KEVOLVE_BIN=$(command -v kevolve)
start=$(date +%s)
timeout 400 kevolve_tests "[gpu]" -d yes > "$out/gpu_tests.log" 2>&1
echo "[gpu] tests rc=$? in $(( $(date +%s) - start )) s"; grep -E "^[0-9.]+ s:|passed|failed" "$out/gpu_tests.log" | tail -12
for op in ${ops//,/ }; do
  for dt in $(python3 -c "import json,re,sys; t=open('configs/ops/$op/op.json').read(); t=re.sub(r'(?m)^\s*//.*$','',t); t=re.sub(r'\s//[^\"\n]*$','',t,flags=re.M); print(' '.join(json.loads(t)['dtypes']))"); do
    timeout 300 kevolve eval --op "$op" --dtype "$dt" --variants "$variants" --db "$out/eval.db" configs/ops/$op/seeds/*.cu \
      > "$out/eval-$op-$dt.log" 2>&1
    echo "== $op $dt rc=$? ($(( $(date +%s) - start )) s)"
    grep -iE " sm_90|\[fitness\]|fail" "$out/eval-$op-$dt.log" | cut -c1-150 | head -40
  done
done

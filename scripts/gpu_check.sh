#!/usr/bin/env bash
# Runs on the GPU machine from the repository root, after `source .gpu/env.sh`:
# the [gpu] tests, `kevolve eval` on every softmax seed and dtype, and PyTorch's softmax
# in the same call. Logs go to $OUT (or /tmp/kevolve-gpu) and a short table to stdout.
set -uo pipefail
out=${OUT:-/tmp/kevolve-gpu}
mkdir -p "$out"
export KEVOLVE_HOME=$PWD KEVOLVE_BIN=$(command -v kevolve)
nvidia-smi --query-gpu=index,name,uuid,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$out/gpus.txt"
echo "== devices"
timeout 120 kevolve devices --calibrate 2>&1 | tee "$out/devices.log"
echo "== [gpu] tests"
timeout 400 kevolve_tests "[gpu]" -d yes > "$out/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"
tail -n 40 "$out/gpu_tests.log"
for dt in f32 bf16 f16; do
  echo "== kevolve eval softmax $dt"
  timeout 200 kevolve eval --op softmax --dtype "$dt" --db "$out/kevolve.db" configs/ops/softmax/seeds/*.cu > "$out/eval_$dt.log" 2>&1
  echo "rc=$?"; cat "$out/eval_$dt.log"
done
if [ -f .gpu/torch_baselines.py ]; then
  echo "== torch"
  timeout 200 python3 .gpu/torch_baselines.py --ops softmax --dtypes f32,bf16,f16 --json "$out/torch.json" 2>&1 | tee "$out/torch.log"
fi

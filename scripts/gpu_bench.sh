#!/usr/bin/env bash
# Evaluation benchmarks on the GPU machine (run from the repository root after
# `source .gpu/env.sh`): [gpu] tests, evaluation throughput, timing fidelity against
# ncu, CUPTI and a PyTorch-style events loop, and the spread of repeated evaluations.
# Full logs go to $OUT; a summary to stdout.
set -uo pipefail
out=${OUT:-/tmp/kevolve-bench}
mkdir -p "$out"
export KEVOLVE_HOME=$PWD KEVOLVE_BIN=$(command -v kevolve)
db="$out/bench.db"
seeds=(configs/ops/softmax/seeds/*.cu)
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$out/gpus.txt"
echo "== [gpu] tests"
timeout 200 kevolve_tests "[gpu]" > "$out/gpu_tests.log" 2>&1; echo "gpu tests rc=$?"; tail -n 4 "$out/gpu_tests.log"
echo "== the main job: 4 generations, then export"
timeout 120 kevolve --op softmax --gens 4 --population 16 --db "$out/run.db" > "$out/run.log" 2>&1; echo "rc=$?"; tail -n 14 "$out/run.log"
ls runs/*/best 2>/dev/null | head; cat runs/*/best/README.md 2>/dev/null | head -8
echo "== compile-only diagnostics"
kevolve compile --op softmax --json "${seeds[@]}" tests/kernels/infinite_loop.cu > "$out/compile.json" 2>&1
grep -o '"regs": [-0-9]*' "$out/compile.json" | tr '\n' ' '; echo
echo "== throughput: 32 variants per seed, f32"
timeout 90 kevolve eval --op softmax --variants 32 --db "$db" "${seeds[@]}" > "$out/throughput.log" 2>&1
echo "rc=$?"; tail -n 2 "$out/throughput.log"
echo "== fidelity: ncu (--profile)"
timeout 120 kevolve eval --op softmax --profile --profile-dir "$out/profiles" --db "$db" "${seeds[@]}" > "$out/profile.log" 2>&1
echo "rc=$?"; grep -A 11 "^shape " "$out/profile.log"; grep "\[profile\]" "$out/profile.log"
echo "== fidelity: cupti"
timeout 60 kevolve eval --op softmax --timer cupti "${seeds[@]}" > "$out/cupti.log" 2>&1
echo "rc=$?"; grep -o "cupti/events=[0-9.]*" "$out/cupti.log" | sort | uniq -c | head -20
echo "== spread: 5 repeated evaluations"
for i in 1 2 3 4 5; do
  timeout 40 kevolve eval --op softmax --json --seed $i "${seeds[@]}" > "$out/repeat_$i.json" 2>/dev/null
done
python3 - "$out" <<'PY'
import json, sys, statistics as st
out = sys.argv[1]
runs = [json.load(open(f"{out}/repeat_{i}.json")) for i in range(1, 6)]
for c in range(len(runs[0])):
    name = runs[0][c]["file"]
    spreads = []
    for s in range(len(runs[0][c]["timings"])):
        meds = [r[c]["timings"][s]["median_us"] for r in runs]
        spreads.append((max(meds) - min(meds)) / st.median(meds))
    print(f"{name}: spread of the median over 5 evaluations: median {100*st.median(spreads):.2f}%, worst {100*max(spreads):.2f}% over {len(spreads)} shapes")
PY
echo "== torch (events loop, L2 flushed)"
timeout 90 python3 .gpu/torch_baselines.py --ops softmax --dtypes f32 --json "$out/torch.json" > "$out/torch.log" 2>&1; tail -n 10 "$out/torch.log"
grep "^  \[timing\]" "$out/profile.log" | head -20

#!/usr/bin/env bash
# Search efficiency on the GPU machine: the softmax f32 parameter space evaluated
# exhaustively once, then evolution under a budget of about 15% of it, for three seeds.
# Also a compile diagnostic (ptxas resource report with and without a visible GPU).
set -uo pipefail
out=${OUT:-/tmp/kevolve-search}
mkdir -p "$out"
export KEVOLVE_HOME=$PWD
seeds=(configs/ops/softmax/seeds/*.cu)
echo "== compile diagnostics"
kevolve compile --op softmax --json "${seeds[@]}" | grep -o '"regs": [-0-9]*' | tr '\n' ' '; echo " (GPU visible)"
CUDA_VISIBLE_DEVICES= kevolve compile --op softmax --json "${seeds[@]}" | grep -o '"regs": [-0-9]*' | tr '\n' ' '; echo " (no GPU visible)"
kevolve compile --op softmax --json -j 1 "${seeds[@]}" | grep -o '"regs": [-0-9]*' | tr '\n' ' '; echo " (one thread)"
kevolve_tests "[compile]" 2>&1 | tail -n 2
echo "== exhaustive"
timeout 200 kevolve eval --op softmax --variants 400 --json --db "$out/exhaustive.db" "${seeds[@]}" > "$out/exhaustive.json" 2> "$out/exhaustive.err"
echo "rc=$?"
for s in 1 2 3; do
  timeout 90 kevolve --op softmax --gens 3 --seed $s --config scripts/search_bench.json --db "$out/evo_$s.db" --no-export > "$out/evo_$s.log" 2>&1
  echo "seed $s rc=$?"; grep -E "^gen|^run" "$out/evo_$s.log"
done
python3 - "$out" <<'PY'
import json, sqlite3, sys
out = sys.argv[1]
ex = json.load(open(f"{out}/exhaustive.json"))
fits = sorted(((c.get("fitness") or 0.0), c["file"], json.dumps(c["params"], sort_keys=True)) for c in ex if c["ok"])
print(f"exhaustive: {len(ex)} assignments, {len(fits)} pass every rung; optimum {fits[-1][0]:.4f} {fits[-1][1]} {fits[-1][2]}")
print("top 5:", [(round(f, 4), n, p) for f, n, p in fits[-5:]])
for s in (1, 2, 3):
    db = sqlite3.connect(f"{out}/evo_{s}.db")
    n = db.execute("select count(*) from candidates").fetchone()[0]
    best = db.execute("select max(fitness) from candidates where status='ok'").fetchone()[0] or 0
    print(f"seed {s}: {n} evaluations ({100*n/len(ex):.0f}% of the space), best {best:.4f} = {100*best/fits[-1][0]:.1f}% of the optimum")
PY

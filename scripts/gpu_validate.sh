#!/usr/bin/env bash
# One device call that exercises what has not yet run on a GPU (see the README's Status):
#   - the [gpu] tests, timing the planted infinite loop (it should cost ~2 s, not minutes);
#   - a search with LLM operators through the replay provider (children, repairs, llm_calls);
#   - Ctrl-C (SIGINT) in the middle of a run, then --resume;
#   - kill -9 in the middle of a run, then --resume (no duplicate rows, nothing lost);
#   - export --profile;
#   - on a 2-GPU machine, both GPUs taking evaluations;
#   - occupancy in `kevolve eval` and `kevolve show`;
#   - Ctrl-C while an LLM call hangs (a command provider running `sleep 120`): the run
#     must stop within seconds, its calls recorded as cancelled.
# Run from the repository root after `source .gpu/env.sh`. Logs go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/kevolve-validate}
mkdir -p "$out"
export KEVOLVE_HOME=$PWD KEVOLVE_BIN=$(command -v kevolve)
# The GPU host has no sqlite3 command; Python's module reads the database.
sq() { python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for stmt in sys.argv[2].split(";"):
    if stmt.strip():
        for row in db.execute(stmt): print("|".join(map(str, row)))' "$@"; }
nvidia-smi -L
# Sections run: all by default, or those named (tests llm interrupt kill export occupancy
# cancel), e.g. `gpu_validate.sh tests occupancy cancel`.
sections=" ${*:-all} "
want() { [[ "$sections" == *" all "* || "$sections" == *" $1 "* ]]; }
if want tests; then
echo "== [gpu] tests"
start=$(date +%s)
timeout 300 kevolve_tests "[gpu]" -d yes > "$out/gpu_tests.log" 2>&1; echo "rc=$? in $(( $(date +%s) - start )) s"
grep -E "s: planted|s: every GPU|passed|failed" "$out/gpu_tests.log" | tail -8
# A crash outside a test case (the nineteenth session's SIGSEGV at exit) prints a backtrace.
grep -A 24 "kevolve_tests: fatal signal" "$out/gpu_tests.log"
fi

if want llm; then
echo "== LLM operators in the search (replay provider)"
mkdir -p "$out/replies"
cat > "$out/replies/r0.txt" <<'R'
<<<<<<< SEARCH
// @kevolve param   WARPS  4 2 8 1
=======
// @kevolve param   WARPS  8 4 2 1
>>>>>>> REPLACE
R
printf '{"providers": {"rec": {"kind": "replay", "replay_dir": "%s/replies"}}}\n' "$out" > "$out/llm.json"
timeout 150 kevolve --op softmax --gens 4 --population 8 --db "$out/llm.db" --llm-config "$out/llm.json" --no-export \
  > "$out/llm_run.log" 2>&1; echo "rc=$?"; tail -n 6 "$out/llm_run.log"
sq "$out/llm.db" "SELECT operator, outcome, count(*), count(candidate_id) FROM llm_calls GROUP BY 1, 2;"
sq "$out/llm.db" "SELECT operator, status, count(*) FROM candidates GROUP BY 1, 2;"
fi

if want interrupt || want export; then
echo "== Ctrl-C, then --resume"
kevolve --op softmax --gens 200 --population 8 --db "$out/int.db" --no-export > "$out/int.log" 2>&1 &
pid=$!; sleep 12; kill -INT $pid; wait $pid; echo "rc=$? (130 expected)"; tail -n 3 "$out/int.log"
timeout 150 kevolve --resume 1 --gens 8 --db "$out/int.db" --no-export > "$out/int_resume.log" 2>&1; echo "resume rc=$?"
tail -n 4 "$out/int_resume.log"
fi

if want kill; then
echo "== kill -9, then --resume"
kevolve --op softmax --gens 200 --population 8 --db "$out/kill.db" --no-export > "$out/kill.log" 2>&1 &
# Kill in the middle of generation 2 (once generation 1 has reported), not during startup.
pid=$!; for i in $(seq 120); do grep -q "gen 1/" "$out/kill.log" && break; sleep 0.5; done; sleep 2; kill -9 $pid; wait $pid 2>/dev/null; sleep 1
pgrep -f "kevolve worker" && echo "ORPHAN WORKERS LEFT" || echo "no orphan workers"
before=$(sq "$out/kill.db" "SELECT count(*) FROM candidates")
timeout 150 kevolve --resume 1 --gens 8 --db "$out/kill.db" --no-export > "$out/kill_resume.log" 2>&1; echo "resume rc=$?"
sq "$out/kill.db" "SELECT count(*), count(DISTINCT hash), max(generation) FROM candidates; SELECT generations_done, status FROM runs;"
echo "candidates before resume: $before"
fi

if want export; then
echo "== export --profile"
timeout 150 kevolve export --run 1 --top 1 --profile --out "$out/export" --db "$out/int.db" > "$out/export.log" 2>&1
echo "rc=$?"; ls -la "$out"/export/*/ | head -20

echo "== kevolve's median against a plain events loop (do_bench style) for the exported kernel"
timeout 120 python3 scripts/events_loop.py "$out"/export/*/ 2>&1 | tail -n 12
fi

if want occupancy; then
echo "== occupancy in eval and show (bulk_row at its defaults: clusters of 16 at 256x262144)"
timeout 120 kevolve eval --op softmax --db "$out/occ.db" configs/ops/softmax/seeds/bulk_row.cu > "$out/occ_eval.log" 2>&1
echo "eval rc=$?"; grep -E "256x262144|65536x256" "$out/occ_eval.log" | cut -c1-200
kevolve show 1 --db "$out/occ.db" | grep -E "occupancy|256x262144" | cut -c1-160
fi

if want cancel; then
echo "== Ctrl-C with an LLM call hanging: the run must stop within seconds (outcome cancelled)"
printf '{"providers": {"slow": {"kind": "command", "command": "sleep 120", "timeout_s": 600}}}\n' > "$out/slow_llm.json"
kevolve --op softmax --gens 200 --population 8 --db "$out/cancel.db" --llm-config "$out/slow_llm.json" --no-export > "$out/cancel.log" 2>&1 &
pid=$!; for i in $(seq 120); do grep -q "gen 2/" "$out/cancel.log" && break; sleep 0.5; done
t0=$(date +%s.%N); kill -INT $pid; wait $pid; rc=$?; t1=$(date +%s.%N)
echo "rc=$rc (130 expected) $(python3 -c "print(f'{$t1 - $t0:.1f} s after Ctrl-C')")"
sq "$out/cancel.db" "SELECT operator, outcome, count(*) FROM llm_calls GROUP BY 1, 2;"
fi

#!/usr/bin/env bash
# The op-library benchmark (issue 6): kevolve against PyTorch, side by side, in one call.
#
#   scripts/bench_ops.sh [--ops softmax,rmsnorm,layernorm,matmul] [--dtypes f32,bf16,f16]
#                        [--time 60s | --gens N] [--population P] [--flush memset|read]
#                        [--out DIR] [--copy-to DIR]
#
# For each op and dtype (matmul: bf16 only) it runs `kevolve --op OP --dtype DT` under the
# stated budget into DIR/OP-DT.db, exports the best kernel and the fastest kernel of every
# tune shape (each re-checked on the held-out shapes) to DIR/export/OP-DT, then times
# PyTorch on the same shapes in the same call (torch_baselines.py, run first) and writes DIR/table.md.
# --flush read times kevolve (`kevolve --flush read`), PyTorch and the copies
# (scripts/flush_bench.py) with an L2 flush that reads instead of triton do_bench's memset,
# which leaves dirty lines each timed launch pays about 3.4 us to write back; the default,
# memset, is do_bench's protocol, the one issue 6's targets were stated in. DIR/flush.txt
# records it, and bench_table.py keeps the two protocols' rows apart.
# Run it on the GPU host after `source .gpu/env.sh`; when one call's 10 minutes is not
# enough, split the ops across calls (each call re-runs PyTorch). It also writes DIR.tgz
# (no databases); with the device tool use --out /tmp/b --copy-to "$OUT": DIR.tgz is copied
# there after every op and dtype, so that a call cut short by its time limit still brings
# back what it finished (the eighteenth session lost a finished layernorm bf16 run that way).
# Merge the results here: keep the folder's small files under docs/bench/DATE (committed, so
# that the table can be regenerated from the repository), then regenerate the table from all
# of them:
#   mkdir b && tar xzf b.tgz -C b && d=docs/bench/$(tr : - < b/date.txt) && mkdir -p $d &&
#   cp b/*.json b/*.txt $d/ && rm -f $d/*.log && python3 scripts/bench_table.py docs/bench/*/ --update docs/BENCHMARKS.md
# (docs/bench's folders before 2026-12-01 were rebuilt from the table by scripts/bench_recover.py.)
set -uo pipefail
ops=softmax,rmsnorm,layernorm,matmul dtypes=f32,bf16,f16 budget=(--time 60s) out=${OUT:-bench-out} copy_to= flush=memset
while [ $# -gt 0 ]; do
  case $1 in
    --ops) ops=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --time) budget=(--time "$2"); shift 2 ;;
    --gens) budget=(--gens "$2"); shift 2 ;;
    --population) budget+=(--population "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --copy-to) copy_to=$2; shift 2 ;;
    --flush) flush=$2; shift 2 ;;
    *) echo "bench_ops.sh: unknown argument '$1' (see the header of this script)" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
export KEVOLVE_HOME=${KEVOLVE_HOME:-$here}
torch_py=${TORCH_BASELINES:-$here/.gpu/torch_baselines.py}
[ -f "$torch_py" ] || torch_py=$here/../shared/gpu/torch_baselines.py
case $flush in memset|read) ;; *) echo "bench_ops.sh: --flush must be memset or read" >&2; exit 2 ;; esac
if [ -n "$copy_to" ] && [ ! -d "$copy_to" ]; then echo "bench_ops.sh: --copy-to $copy_to is not a directory" >&2; exit 2; fi
mkdir -p "$out/export"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader > "$out/device.txt" 2>&1
date -u +%Y-%m-%dT%H:%MZ > "$out/date.txt"
echo "${budget[*]}" > "$out/budget.txt"
echo "$flush" > "$out/flush.txt"
py_bench=(python3 "$here/scripts/flush_bench.py" --flush "$flush")
# PyTorch in the same call, on the same GPU: first, so that a call cut short still has it.
"${py_bench[@]}" "$torch_py" --ops "$ops" --dtypes "$dtypes" --json "$out/torch.json" > "$out/torch.log" 2>&1 || echo "torch_baselines.py failed: $(tail -n 3 "$out/torch.log")"
# The copy ceiling at each size moved (a 64 MiB copy reaches far less than a 1 GiB one).
"${py_bench[@]}" "$here/scripts/copy_sizes.py" --json "$out/copy_sizes.json" > "$out/copy_sizes.txt" 2>&1 || echo "copy_sizes.py failed: $(tail -n 3 "$out/copy_sizes.txt")"
# Everything but the databases and binaries, in one file (the device tool returns at most
# 8 files), with summary.json standing in for the databases: unpack it here and run
# bench_table.py on the folder.
pack() {
  python3 "$here/scripts/bench_table.py" --summarize "$out" > "$out/summary.json.tmp" && mv "$out/summary.json.tmp" "$out/summary.json"
  tar czf "$out.tgz" --exclude='*.db' --exclude='*.db-*' --exclude='*.cubin' --exclude='*.ncu-rep' \
    --exclude='*.ptx' --exclude='*.sass' -C "$out" .
  if [ -n "$copy_to" ]; then
    cp "$out.tgz" "$copy_to/" || echo "bench_ops.sh: could not copy $out.tgz to $copy_to"
    # The device tool returns the first 8 files under $OUT in name order: with more there,
    # this tarball may be left behind (the twentieth session lost one that way).
    local n
    n=$(find "$copy_to" -type f | wc -l)
    if [ "$n" -gt 8 ]; then
      echo "bench_ops.sh: warning: $n files under $copy_to; the device tool brings back at most 8, so $(basename "$out").tgz may not come back (keep other files in one tarball)" >&2
    fi
  fi
}
for op in ${ops//,/ }; do
  for dt in ${dtypes//,/ }; do
    if [ "$op" = matmul ] && [ "$dt" != bf16 ]; then continue; fi
    name=$op-$dt
    rm -f "$out/$name.db"*
    start=$(date +%s)
    kevolve --op "$op" --dtype "$dt" "${budget[@]}" --flush "$flush" --db "$out/$name.db" --no-export > "$out/$name.log" 2>&1
    rc=$?
    kevolve export --run 1 --top 1 --per-shape --out "$out/export/$name" --db "$out/$name.db" > "$out/$name.export.log" 2>&1
    echo "$name: search rc=$rc, export rc=$?, $(( $(date +%s) - start )) s; $(grep -m1 -E '^best|best fitness' "$out/$name.log" | head -c 200)"
    tail -n 2 "$out/$name.log"
    pack  # after every op and dtype: a call cut short keeps what it finished
  done
done
python3 "$here/scripts/bench_table.py" "$out" > "$out/table.md" && cat "$out/table.md"
pack && echo "results: $out.tgz"

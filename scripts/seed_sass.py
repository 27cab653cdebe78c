#!/usr/bin/env python3
"""Dumps the SASS of every seed of the rowwise and matmul ops, in every dtype, for the
default parameters and a few random valid assignments, so that a refactor of the seeds or
of kevolve.h can be checked to leave the machine code unchanged (no GPU needed).

  scripts/seed_sass.py OUT_DIR [--ops softmax,rmsnorm] [--variants 4] [--seed 7]
  diff -r BEFORE_DIR AFTER_DIR

Each file OUT_DIR/<op>-<seed>-<dtype>-<params>.sass holds the kernel's SASS with addresses
and the ELF header stripped. Needs `kevolve` on PATH (or KEVOLVE) and nvdisasm (NVDISASM,
or the CUDA toolkit's bin folder).
"""
import argparse, json, os, re, shutil, sqlite3, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--ops", default="softmax,rmsnorm,layernorm,matmul")
ap.add_argument("--variants", type=int, default=4)
ap.add_argument("--seed", type=int, default=7)
a = ap.parse_args()

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
kevolve = os.environ.get("KEVOLVE") or shutil.which("kevolve") or f"{root}/build/cli/kevolve"
nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm") or "/usr/local/cuda/bin/nvdisasm"
if not os.path.exists(nvdisasm):
    sys.exit(f"seed_sass.py: nvdisasm not found (set NVDISASM): {nvdisasm}")
os.makedirs(a.out, exist_ok=True)
ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/")
for op in a.ops.split(","):
    text = open(f"{root}/configs/ops/{op}/op.json").read()  # JSON with // comments
    spec = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
    seeds = sorted(f for f in os.listdir(f"{root}/configs/ops/{op}/seeds") if f.endswith(".cu"))
    for dtype in spec["dtypes"]:
        with tempfile.TemporaryDirectory() as tmp:
            db = f"{tmp}/c.db"
            files = [f"{root}/configs/ops/{op}/seeds/{s}" for s in seeds]
            r = subprocess.run([kevolve, "compile", "--op", op, "--dtype", dtype, "--variants", str(a.variants),
                                "--seed", str(a.seed), "--db", db] + files, capture_output=True, text=True)
            if r.returncode not in (0, 1):
                sys.exit(f"seed_sass.py: kevolve compile failed for {op} {dtype}:\n{r.stderr}")
            con = sqlite3.connect(db)
            rows = con.execute("SELECT s.name, c.params_json, a.data FROM candidates c JOIN sources s ON s.id = c.source_id "
                               "JOIN artifacts a ON a.candidate_id = c.id AND a.kind = 'cubin'").fetchall()
            for path, params, cubin in rows:
                p = json.loads(params)
                tag = "_".join(f"{k}{v}" for k, v in sorted(p.items())) or "none"
                name = f"{op}-{os.path.basename(path or 'x')[:-3]}-{dtype}-{tag}"
                with open(f"{tmp}/k.cubin", "wb") as f:
                    f.write(cubin)
                d = subprocess.run([nvdisasm, "-c", f"{tmp}/k.cubin"], capture_output=True, text=True)
                lines = [ADDR.sub("", l).rstrip() for l in d.stdout.splitlines() if not l.lstrip().startswith(".")]
                with open(f"{a.out}/{name}.sass", "w") as f:
                    f.write("\n".join(lines) + "\n")
            print(f"{op} {dtype}: {len(rows)} kernels", file=sys.stderr)

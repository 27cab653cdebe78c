#!/usr/bin/env python3
"""Turns scripts/bench_ops.sh result folders into the markdown table of docs/BENCHMARKS.md.

  python3 scripts/bench_table.py DIR [DIR ...]                 # print the table
  python3 scripts/bench_table.py DIR ... --update docs/BENCHMARKS.md
  python3 scripts/bench_table.py --summarize DIR > DIR/summary.json   # DIR's runs, no databases needed
  python3 scripts/bench_table.py --check docs/BENCHMARKS.md docs/bench  # exit 1 unless the block is
                                                                        # what docs/bench/*/ gives

Each DIR holds OP-DT.db (one kevolve run) or, instead of the databases, summary.json, export/OP-DT/dispatch.json (the fastest
held-out-checked kernel per tune shape), torch.json (PyTorch timed in the same call),
device.txt, date.txt and budget.txt. kevolve's number per shape is the exported per-shape
winner; "one kernel" is the run's best by fitness (the geometric mean over the shapes).
Fractions of the copy ceiling use the larger of PyTorch's and kevolve's measured copy.
With DIR/copy_sizes.json (scripts/copy_sizes.py: a plain copy of each size moved), the
table adds kevolve's fraction of a copy of the same size: small shapes cannot reach a
large fraction of the 1 GiB copy, since a copy of their own size does not.
DIR/flush.txt (bench_ops.sh --flush) names the L2 flush the folder was timed with (memset
when absent); rows of the two flushes never replace each other, and each gets its own targets.
The block starts with issue 6's targets counted over the latest row of every (op, dtype,
shape): a later DIR's rows replace an earlier DIR's for the same op and dtype.
"""
import glob, json, math, os, re, sqlite3, sys

BEGIN, END = "<!-- bench_ops:begin -->", "<!-- bench_ops:end -->"
SIZEOF = {"f32": 4, "bf16": 2, "f16": 2}
# The standard shapes, in torch_baselines.py's order.
ORDER = ["4096x1024", "16384x4096", "8192x8192", "32768x4096", "4096x32768", "1024x131072", "65536x256",
         "16384x16384", "256x262144", "4096x4096x4096", "8192x8192x8192", "16384x1024x4096", "1024x16384x4096",
         "4096x4096x512"]


def shape_key(kv):
    return (ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER), kv[0])


def read(path, default=""):
    try:
        return open(path).read().strip()
    except OSError:
        return default


def load_dir(d):
    torch = json.load(open(os.path.join(d, "torch.json"))) if os.path.exists(os.path.join(d, "torch.json")) else None
    runs = []
    summary = os.path.join(d, "summary.json")
    if not glob.glob(os.path.join(d, "*.db")) and os.path.exists(summary):
        runs = json.load(open(summary))  # written by --summarize where the databases were
    for db_path in sorted(glob.glob(os.path.join(d, "*.db"))):
        name = os.path.basename(db_path)[:-3]
        op, dt = name.rsplit("-", 1)
        db = sqlite3.connect(db_path)
        best = db.execute("SELECT id, fitness FROM candidates WHERE status = 'ok' ORDER BY fitness DESC LIMIT 1").fetchone()
        single = {}
        if best:
            for shape, med in db.execute("SELECT shape, median_us FROM timings WHERE candidate_id = ?", (best[0],)):
                single[shape] = med
        counts = db.execute("SELECT count(*), sum(status = 'ok') FROM candidates").fetchone()
        copy = db.execute("SELECT max(copy_gbps) FROM devices").fetchone()[0]
        dispatch_path = os.path.join(d, "export", name, "dispatch.json")
        dispatch = json.load(open(dispatch_path)) if os.path.exists(dispatch_path) else {"shapes": {}}
        runs.append(dict(op=op, dtype=dt, fitness=best[1] if best else None, single=single, candidates=counts[0],
                         passed=counts[1] or 0, copy=copy, per_shape={k: v["median_us"] for k, v in dispatch["shapes"].items()},
                         searched={k: v["search_median_us"] for k, v in dispatch["shapes"].items() if v.get("retimed")}))
    flush = read(os.path.join(d, "flush.txt"), "memset")
    if flush not in ("memset", "read"):
        sys.exit(f"{d}/flush.txt: '{flush}' is no L2 flush bench_ops.sh uses (memset or read)")
    sizes_path = os.path.join(d, "copy_sizes.json")
    sizes = json.load(open(sizes_path)) if os.path.exists(sizes_path) else None
    return dict(dir=d, torch=torch, runs=runs, sizes=sizes, device=read(os.path.join(d, "device.txt")),
                date=read(os.path.join(d, "date.txt")), budget=read(os.path.join(d, "budget.txt")),
                flush=flush)


def torch_us(torch, op, dt, shape):
    for r in (torch or {}).get("rows", []):
        if r["op"] == op and r["dtype"] == dt and "x".join(map(str, r["shape"])) == shape:
            return r["us"]
    return None


def same_size_copy(sizes, mib):
    """GB/s of a plain copy moving `mib` MiB (the nearest size measured), or None."""
    if not sizes:
        return None
    by = {int(k): v for k, v in sizes["GBps_by_MiB_moved"].items()}
    return by[min(by, key=lambda m: abs(math.log(m / mib)))]


def retimed_note(r):
    """How the re-timed per-shape picks (export --confirm) compare with their search medians."""
    if isinstance(r.get("retimed_note"), str):  # kept verbatim by scripts/bench_recover.py
        return r["retimed_note"]
    ratios = [r["per_shape"][k] / v for k, v in r.get("searched", {}).items() if v and k in r["per_shape"]]
    if not ratios:
        return ""
    return (f"; {len(ratios)} per-shape picks timed again at {min(ratios):.3f}x to {max(ratios):.3f}x "
            f"their search medians")


def fmt(v, f="%.1f"):
    return "-" if v is None else f % v


TITLES = {
    "memset": "**Targets over the latest rows** (a later folder's op and dtype replace an earlier one's):",
    "read": "**Targets over the latest rows timed with the read L2 flush** (kevolve, PyTorch and the copies all "
            "timed with `--flush read`, which leaves the timed kernel no dirty lines of the flush buffer to write "
            "back; a later folder's op and dtype replace an earlier one's):",
}


def targets(latest, matmul, flush="memset"):
    """Issue 6's targets over the latest row of every (op, dtype, shape): a later folder
    replaces an earlier one's rows for the same op and dtype."""
    rows = list(latest.values())
    big = [r for r in rows if r["nbytes"] >= 64 << 20 and r["frac"] is not None]
    timed = [r for r in rows if r["sp"] is not None]
    out = [TITLES[flush], ""]
    if timed:
        lo = min(timed, key=lambda r: r["sp"])
        out.append(f"- Faster than PyTorch: {sum(r['sp'] > 1 for r in timed)}/{len(timed)} rowwise rows "
                   f"({lo['sp']:.2f}x at least: {lo['op']} {lo['dtype']} {lo['shape']}; "
                   f"{max(r['sp'] for r in timed):.2f}x at most).")
    if big:
        same = [r for r in big if r["sfrac"] is not None]
        out.append(f"- At least 90% of the 1 GiB copy, on rows moving 64 MiB or more: {sum(r['frac'] >= 0.9 for r in big)}/{len(big)}"
                   + (f"; of a same-size copy: {sum(r['sfrac'] >= 0.9 for r in same)}/{len(same)}." if same else "."))
        miss = sorted((r for r in big if r["frac"] < 0.9), key=lambda r: (shape_key((r["shape"], 0)), r["op"], r["dtype"]))
        if miss:
            # Truncated, not rounded: 89.99% must not print as 90.0% in a list of misses.
            out.append("  Below 90%: " + "; ".join(f"{r['op']} {r['dtype']} {r['shape']} {math.floor(1000 * r['frac']) / 10:.1f}%"
                                                   for r in miss) + ".")
        smiss = sorted((r for r in same if r["sfrac"] < 0.9), key=lambda r: (shape_key((r["shape"], 0)), r["op"], r["dtype"]))
        if smiss:
            out.append("  Below 90% of a same-size copy: " + "; ".join(
                f"{r['op']} {r['dtype']} {r['shape']} {math.floor(1000 * r['sfrac']) / 10:.1f}%" for r in smiss) + ".")
    for dt, gm in sorted(matmul.items()):
        out.append(f"- matmul {dt}: {fmt(gm and 100 * gm, '%.1f%%')} of cuBLAS throughput (geometric mean).")
    if rows:
        # One row per (op, dtype, shape), from the folder that last ran that op and dtype: the
        # table to read first. Bold marks a row moving 64 MiB or more below 90% of the 1 GiB copy.
        out += ["", "Latest row of every rowwise op, dtype and shape (the run it comes from in the last column; in bold, "
                "rows moving 64 MiB or more below 90% of the 1 GiB copy, truncated like the lists above):", "",
                "| op | dtype | shape | MiB moved | kevolve (us) | PyTorch (us) | speedup | kevolve % copy | kevolve % same-size copy | run |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for r in sorted(rows, key=lambda r: (r["op"], r["dtype"], shape_key((r["shape"], 0)))):
            miss = r["frac"] is not None and r["nbytes"] >= 64 << 20 and r["frac"] < 0.9
            # a miss truncated, as in the lists above (89.99% must not print as 90.0%); the rest rounded
            pct = f"{math.floor(1000 * r['frac']) / 10:.1f}%" if miss else fmt(r["frac"] and 100 * r["frac"], "%.1f%%")
            out.append(f"| {r['op']} | {r['dtype']} | {r['shape']} | {r['nbytes'] / 2**20:.0f} | {r['us']:.1f} | "
                       f"{fmt(r['torch_us'])} | {fmt(r['sp'], '%.2fx')} | {'**' + pct + '**' if miss else pct} | "
                       f"{fmt(r['sfrac'] and 100 * r['sfrac'], '%.1f%%')} | {r['date']} |")
    return out + [""]


def table(dirs):
    out = [BEGIN, "", "Generated by `scripts/bench_table.py` from `scripts/bench_ops.sh` result folders.", ""]
    # Each L2 flush keeps its own latest rows: medians under memset and read do not mix.
    latest, matmul = {"memset": {}, "read": {}}, {"memset": {}, "read": {}}
    for res in dirs:
        torch = res["torch"]
        copy_t = torch["copy_GBps"] if torch else None
        device = (res["device"].splitlines() or ["device ?"])[0].split(",")[0]
        flush_note = "" if res["flush"] == "memset" else f", L2 flush `{res['flush']}`"
        out.append(f"### {res['date']}: {device}, budget `{res['budget']}` per op and dtype{flush_note}")
        out.append("")
        out.append(f"nvidia-smi: {'; '.join(res['device'].splitlines())}")
        out.append("")
        out.append(f"PyTorch {torch['torch'] if torch else '?'}; copy ceiling {fmt(copy_t, '%.0f')} GB/s (PyTorch copy, same call).")
        sizes = res["sizes"]
        if sizes:
            out.append("Same-size copy (scripts/copy_sizes.py, " + sizes.get("source", "same call") + "): " +
                       ", ".join(f"{k} MiB {v:.0f}" for k, v in sizes["GBps_by_MiB_moved"].items()) + " GB/s.")
        out.append("")
        rowwise = [r for r in res["runs"] if r["op"] != "matmul"]
        if rowwise:
            extra = " kevolve % same-size copy |" if sizes else ""
            out.append("| op | dtype | shape | MiB moved | kevolve (us) | one kernel (us) | PyTorch (us) | speedup | kevolve % copy | PyTorch % copy |" + extra)
            out.append("|---|---|---|---|---|---|---|---|---|---|" + ("---|" if sizes else ""))
        summary = []
        for r in rowwise:
            ceiling = max(x for x in (copy_t, r["copy"]) if x) if (copy_t or r["copy"]) else None
            wins, n, worst_big, worst_same = 0, 0, None, None
            for shape, kev in sorted(r["per_shape"].items(), key=shape_key):
                rows, cols = map(int, shape.split("x"))
                nbytes = 2 * rows * cols * SIZEOF[r["dtype"]]
                t = torch_us(torch, r["op"], r["dtype"], shape)
                frac = nbytes / (kev * 1e-6) / 1e9 / ceiling if ceiling else None
                tfrac = nbytes / (t * 1e-6) / 1e9 / ceiling if (ceiling and t) else None
                sp = t / kev if t else None
                n += 1
                wins += 1 if (sp and sp > 1) else 0
                same = same_size_copy(sizes, nbytes / 2**20)
                sfrac = nbytes / (kev * 1e-6) / 1e9 / same if same else None
                if nbytes >= 64 << 20 and frac is not None:
                    worst_big = frac if worst_big is None else min(worst_big, frac)
                    if sfrac is not None:
                        worst_same = sfrac if worst_same is None else min(worst_same, sfrac)
                latest[res["flush"]][(r["op"], r["dtype"], shape)] = {"op": r["op"], "dtype": r["dtype"], "shape": shape, "nbytes": nbytes,
                                                        "frac": frac, "sfrac": sfrac, "sp": sp, "us": kev, "torch_us": t,
                                                        "date": res["date"]}
                out.append(f"| {r['op']} | {r['dtype']} | {shape} | {nbytes / 2**20:.0f} | {kev:.1f} | {fmt(r['single'].get(shape))} | "
                           f"{fmt(t)} | {fmt(sp, '%.2fx')} | {fmt(frac and 100 * frac, '%.1f%%')} | {fmt(tfrac and 100 * tfrac, '%.1f%%')} |"
                           + (f" {fmt(sfrac and 100 * sfrac, '%.1f%%')} |" if sizes else ""))
            summary.append(f"- {r['op']} {r['dtype']}: faster than PyTorch on {wins}/{n} shapes; worst fraction of the copy "
                           f"ceiling on shapes moving 64 MiB or more: {fmt(worst_big and 100 * worst_big, '%.1f%%')}"
                           + (f" ({fmt(worst_same and 100 * worst_same, '%.1f%%')} at worst of a same-size copy)" if sizes else "") + "; "
                           f"{r['candidates']} candidates, {r['passed']} passed every rung, best fitness {fmt(r['fitness'], '%.3f')}"
                           + retimed_note(r) + ".")
        for r in [r for r in res["runs"] if r["op"] == "matmul"]:
            out.append("")
            out.append("| op | dtype | M x N x K | kevolve (us) | kevolve TFLOP/s | PyTorch (us) | PyTorch TFLOP/s | kevolve / cuBLAS |")
            out.append("|---|---|---|---|---|---|---|---|")
            ratios = []
            for shape, kev in sorted(r["per_shape"].items(), key=shape_key):
                m, n_, k = map(int, shape.split("x"))
                fl = 2 * m * n_ * k
                t = torch_us(torch, "matmul", r["dtype"], shape)
                ratio = t / kev if t else None
                if ratio:
                    ratios.append(ratio)
                out.append(f"| matmul | {r['dtype']} | {shape} | {kev:.1f} | {fl / kev / 1e6:.0f} | {fmt(t)} | "
                           f"{fmt(t and fl / t / 1e6, '%.0f')} | {fmt(ratio and 100 * ratio, '%.1f%%')} |")
            gm = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
            matmul[res["flush"]][r["dtype"]] = gm
            summary.append(f"- matmul {r['dtype']}: {fmt(gm and 100 * gm, '%.1f%%')} of cuBLAS throughput (geometric mean over "
                           f"{len(ratios)} shapes); {r['candidates']} candidates, {r['passed']} passed every rung.")
        out.append("")
        out += summary
        out.append("")
    heads = targets(latest["memset"], matmul["memset"])
    if latest["read"] or matmul["read"]:
        heads += targets(latest["read"], matmul["read"], "read")
    out[4:4] = heads
    out.append(END)
    return "\n".join(out) + "\n"


def main(argv):
    if argv[:1] == ["--summarize"]:  # the runs of DIR as JSON: the table without the databases
        json.dump(load_dir(argv[1])["runs"], sys.stdout, indent=1)
        return
    if argv[:1] == ["--check"]:  # the generated block of DOC against the folders under ROOT, in name order
        if len(argv) != 3:
            sys.exit("usage: bench_table.py --check DOC ROOT")
        doc = open(argv[1]).read()
        if BEGIN not in doc or END not in doc:
            sys.exit(f"{argv[1]}: no generated block ({BEGIN} ... {END})")
        have = doc[doc.index(BEGIN): doc.index(END) + len(END)].splitlines()
        dirs = sorted(d for d in glob.glob(os.path.join(argv[2], "*", "")) if os.path.isdir(d))
        if not dirs:
            sys.exit(f"{argv[2]}: no result folders")
        want = table([load_dir(d) for d in dirs]).rstrip("\n").splitlines()
        diff = [(i + 1, a, b) for i, (a, b) in enumerate(zip(have, want)) if a != b]
        if len(have) != len(want) or diff:
            print(f"{argv[1]}: the generated block differs from {len(dirs)} folders under {argv[2]} "
                  f"({len(have)} lines against {len(want)}); regenerate it with "
                  f"python3 scripts/bench_table.py {argv[2]}/*/ --update {argv[1]}")
            for i, a, b in diff[:5]:
                print(f"  block line {i}:\n    has:  {a[:160]}\n    want: {b[:160]}")
            sys.exit(1)
        print(f"{argv[1]}: the generated block matches the {len(dirs)} folders under {argv[2]}")
        return
    update = None
    if "--update" in argv:
        i = argv.index("--update")
        update = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if not argv:
        sys.exit(__doc__)
    text = table([load_dir(d) for d in argv])
    if update:
        doc = open(update).read()
        if BEGIN in doc and END in doc:
            doc = doc[: doc.index(BEGIN)] + text.rstrip("\n") + doc[doc.index(END) + len(END):]
        else:
            doc = doc.rstrip("\n") + "\n\n## Op library against PyTorch (scripts/bench_ops.sh)\n\n" + text
        open(update, "w").write(doc)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env python3
"""Rebuilds scripts/bench_ops.sh result folders from the generated block of docs/BENCHMARKS.md.

  python3 scripts/bench_recover.py docs/BENCHMARKS.md docs/bench
  python3 scripts/bench_table.py docs/bench/*/        # gives the block back

The block (between <!-- bench_ops:begin --> and <!-- bench_ops:end -->) is a sequence of
"### DATE: DEVICE, budget ..." sections, one per result folder, in order. Each section becomes
OUT/DATE (":" made "-", e.g. 2026-11-30T09-43Z; a second section of the same minute gets "-2")
with date.txt, budget.txt, device.txt, torch.json, copy_sizes.json (where the section has a
"Same-size copy" line) and summary.json (the runs, as bench_table.py --summarize writes them).

The table prints rounded numbers, and a few inputs are not printed at all, so the numbers
written back are chosen, not read: every unknown (kevolve's and PyTorch's microseconds per
shape, the PyTorch copy, each same-size copy, a run's own copy where the printed fractions
need one above the PyTorch copy) is given a value that reproduces every number printed from
it: the row's columns, the per-run bullets and the "Targets over the latest rows" lines. In
logarithms every printed number bounds a difference of two unknowns (the fraction of the copy
is log bytes - log us - log copy, the speedup log torch us - log kevolve us), so each section
is a system of difference constraints; the script fixes one unknown at a time at the middle of
the range the others still leave it (shortest paths give that range exactly), which keeps
every printed digit away from a rounding edge. The re-timed note ("; N per-shape picks timed
again at ...") is kept verbatim in the run's "retimed_note", which bench_table.py prints as is.
At the end the script regenerates the block with bench_table.py and reports lines that differ.
"""
import json, math, os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_table as bt  # noqa: E402

EPS = 1e-9  # shrinks every rounding interval a little, relative


class Infeasible(Exception):
    pass


class Diff:
    """x_a - x_b <= w constraints over variables 1..n (0 is the origin; unary bounds are edges to it)."""

    def __init__(self):
        self.lo, self.hi, self.edges, self.names = [0.0], [0.0], [], ["origin"]

    def var(self, name, lo=-50.0, hi=50.0):
        self.lo.append(lo)
        self.hi.append(hi)
        self.names.append(name)
        return len(self.lo) - 1

    def bound(self, j, lo, hi):
        self.lo[j] = max(self.lo[j], lo)
        self.hi[j] = min(self.hi[j], hi)

    def diff(self, a, b, lo, hi):
        """lo <= x_a - x_b <= hi."""
        if hi < math.inf:
            self.edges.append((b, a, hi))
        if lo > -math.inf:
            self.edges.append((a, b, -lo))

    def _spfa(self, edges):
        n = len(self.lo)
        adj = [[] for _ in range(n)]
        for u, v, w in edges:
            adj[u].append((v, w))
        dist = [math.inf] * n
        dist[0] = 0.0
        count = [0] * n
        queue, inq = [0], [False] * n
        inq[0] = True
        while queue:
            u = queue.pop(0)
            inq[u] = False
            for v, w in adj[u]:
                if dist[u] + w < dist[v] - 1e-13:
                    dist[v] = dist[u] + w
                    count[v] += 1
                    if count[v] > n + 1:
                        raise Infeasible(self.names[v])
                    if not inq[v]:
                        inq[v] = True
                        queue.append(v)
        return dist

    def domains(self):
        """The exact range of every variable over the solutions (difference constraints)."""
        edges = list(self.edges)
        for j in range(1, len(self.lo)):
            edges.append((0, j, self.hi[j]))
            edges.append((j, 0, -self.lo[j]))
        up = self._spfa(edges)
        down = self._spfa([(v, u, w) for u, v, w in edges])
        dom = [(-down[j], up[j]) for j in range(len(self.lo))]
        if any(lo > hi + 1e-12 for lo, hi in dom[1:]):
            raise Infeasible("empty domain")
        return dom

    def solve(self, order=None):
        order = order or range(1, len(self.lo))
        for j in order:
            lo, hi = self.domains()[j]
            x = (lo + hi) / 2
            self.lo[j] = self.hi[j] = x
        self.domains()
        return list(self.lo)


def rounding(text, pct=False):
    """The open interval of values that print as `text` (a number with some decimals)."""
    text = text.rstrip("%x")
    dec = len(text.split(".")[1]) if "." in text else 0
    v, h = float(text), 0.5 * 10 ** -dec
    return v - h + EPS * max(abs(v), 1), v + h - EPS * max(abs(v), 1)


def logiv(lo, hi):
    return (math.log(lo) if lo > 0 else -math.inf), (math.log(hi) if hi < math.inf else math.inf)


def num(cell):
    return None if cell.strip() == "-" else cell.strip()


ROW_HDR = "| op | dtype | shape | MiB moved |"
MM_HDR = "| op | dtype | M x N x K |"
RUN_RE = re.compile(r"^- (\S+) (\S+): faster than PyTorch on (\d+)/(\d+) shapes; worst fraction of the copy ceiling on "
                    r"shapes moving 64 MiB or more: (\S+?)%?(?: \((\S+?)%? at worst of a same-size copy\))?; "
                    r"(\d+) candidates, (\d+) passed every rung, best fitness (\S+?)"
                    r"(; \d+ per-shape picks timed again at .* their search medians)?\.$")
MM_RE = re.compile(r"^- matmul (\S+): (\S+?)%? of cuBLAS throughput \(geometric mean over (\d+) shapes\); "
                   r"(\d+) candidates, (\d+) passed every rung\.$")


def parse_section(lines):
    m = re.match(r"^### (.+?): (.*), budget `(.*)` per op and dtype(?:, L2 flush `(\w+)`)?$", lines[0])
    if not m:
        raise ValueError(f"not a section header: {lines[0]}")
    sec = dict(date=m.group(1), device_head=m.group(2), budget=m.group(3), flush=m.group(4) or "memset",
               device="", torch_version=None,
               copy_t=None, sizes=None, source=None, rowwise=[], matmul=[], bullets=[], mm_bullets=[])
    table = None
    for line in lines[1:]:
        if line.startswith("nvidia-smi: ") or line == "nvidia-smi:":
            sec["device"] = "\n".join(line[len("nvidia-smi: "):].split("; ")) if line != "nvidia-smi:" else ""
        elif line.startswith("PyTorch ") and "copy ceiling" in line:
            m = re.match(r"^PyTorch (.*); copy ceiling (\S+) GB/s \(PyTorch copy, same call\)\.$", line)
            sec["torch_version"] = None if m.group(1) == "?" else m.group(1)
            sec["copy_t"] = num(m.group(2))
        elif line.startswith("Same-size copy (scripts/copy_sizes.py, "):
            m = re.match(r"^Same-size copy \(scripts/copy_sizes\.py, (.*)\): ((?:\d+ MiB \S+(?:, )?)*) GB/s\.$", line)
            sec["source"] = m.group(1)
            sec["sizes"] = [tuple(kv.split(" MiB ")) for kv in m.group(2).split(", ")] if m.group(2) else []
        elif line.startswith(ROW_HDR):
            table = "row"
            sec["has_same_col"] = "kevolve % same-size copy" in line
        elif line.startswith(MM_HDR):
            table = "mm"
            sec["matmul"].append([])
        elif line.startswith("|---"):
            continue
        elif line.startswith("| "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if table == "row":
                sec["rowwise"].append(cells)
            elif table == "mm":
                sec["matmul"][-1].append(cells)
            else:
                raise ValueError(f"table row outside a table: {line}")
        elif line.startswith("- matmul "):
            sec["mm_bullets"].append(MM_RE.match(line).groups())
        elif line.startswith("- "):
            m = RUN_RE.match(line)
            if not m:
                raise ValueError(f"unparsed bullet: {line}")
            sec["bullets"].append(m.groups())
        elif line.strip():
            raise ValueError(f"unparsed line: {line}")
    return sec


def parse_targets(lines):
    """Misses by (op, dtype, shape) -> printed truncated percent, for the copy and the same-size copy,
    for each L2 flush's targets (each has its own block, opened by its bench_table.TITLES line)."""
    out = {f: ({}, {}) for f in bt.TITLES}
    miss, smiss = out["memset"]
    for line in lines:
        for f, title in bt.TITLES.items():
            if line == title:
                miss, smiss = out[f]
        for prefix, into in (("  Below 90% of a same-size copy: ", smiss), ("  Below 90%: ", miss)):
            if line.startswith(prefix):
                for item in line[len(prefix):].rstrip(".").split("; "):
                    op, dt, shape, pct = item.split(" ")
                    into[(op, dt, shape)] = pct.rstrip("%")
                break
    return out


def group_rows(rows):
    """Consecutive table rows of one (op, dtype) -> list of (op, dtype, rows)."""
    out = []
    for cells in rows:
        if out and out[-1][0] == cells[0] and out[-1][1] == cells[1]:
            out[-1][2].append(cells)
        else:
            out.append((cells[0], cells[1], [cells]))
    return out


def nbytes_of(shape, dt):
    r, c = map(int, shape.split("x"))
    return 2 * r * c * bt.SIZEOF[dt]


def solve_rowwise(sec, latest_flags, miss, smiss, separate_copy):
    """Builds and solves the section's difference constraints. separate_copy: run indices whose
    ceiling is their own copy (above the PyTorch copy). Returns values or raises Infeasible."""
    d = Diff()
    has_sizes = sec["sizes"] is not None
    wT = None  # -log PyTorch copy
    if sec["copy_t"] is not None:
        lo, hi = rounding(sec["copy_t"])
        wT = d.var("copy_t", -math.log(hi), -math.log(lo))
    wS = {}
    if has_sizes:
        for mib, v in sec["sizes"]:
            lo, hi = rounding(v)
            wS[mib] = d.var(f"size {mib}", -math.log(hi), -math.log(lo))
    runs = group_rows(sec["rowwise"])
    wC, rowvars = [], []
    for i, (op, dt, rows) in enumerate(runs):
        if i in separate_copy or wT is None:
            c = d.var(f"copy {op} {dt}", -math.log(1e6), -math.log(1.0))
            if wT is not None:
                d.diff(c, wT, -math.inf, -1e-7)  # the run's copy above the PyTorch copy: the ceiling
        else:
            c = wT
        wC.append(c)
        bullet = next(b for b in sec["bullets"] if b[:2] == (op, dt))
        wins = int(bullet[2])
        clear = sum(1 for cells in rows if num(cells[7]) and float(cells[7].rstrip("x")) > 1.0)
        ambiguous_left = wins - clear  # rows printing 1.00x that must be faster than PyTorch
        for cells in rows:
            shape = cells[2]
            nb = nbytes_of(shape, dt)
            lnb = math.log(0.1 * nb)  # percent = 0.1 * nbytes / (us * copy)
            k = d.var(f"kev {op} {dt} {shape}", *logiv(*rounding(cells[4])))
            t = None
            if num(cells[6]):
                t = d.var(f"torch {op} {dt} {shape}", *logiv(*rounding(cells[6])))
            if num(cells[8]):  # kevolve % copy: lnb - k + wC
                lo, hi = logiv(*rounding(cells[8]))
                d.diff(k, c, lnb - hi, lnb - lo)
            if t is not None and num(cells[9]):
                lo, hi = logiv(*rounding(cells[9]))
                d.diff(t, c, lnb - hi, lnb - lo)
            if has_sizes and len(cells) > 10 and num(cells[10]):
                s = wS[min(wS, key=lambda m: abs(math.log(int(m) / (nb / 2**20))))]
                lo, hi = logiv(*rounding(cells[10]))
                d.diff(k, s, lnb - hi, lnb - lo)
            if t is not None and num(cells[7]):
                lo, hi = rounding(cells[7])
                if cells[7] == "1.00x":
                    if ambiguous_left > 0:
                        lo, ambiguous_left = 1.0 + 1e-7, ambiguous_left - 1
                    else:
                        hi = 1.0
                d.diff(t, k, *logiv(lo, hi))
            key = (op, dt, shape)
            if latest_flags.get(key) and num(cells[8]) and nb >= 64 << 20:
                # The targets: truncated percents of the misses, and at least 90% for the rest.
                for col, misses, var in ((8, miss, c), (10, smiss, None)):
                    if col == 10:
                        if not (has_sizes and len(cells) > 10 and num(cells[10])):
                            continue
                        var = wS[min(wS, key=lambda m: abs(math.log(int(m) / (nb / 2**20))))]
                    if key in misses:
                        x = round(float(misses[key]) * 10)
                        lo, hi = x / 10 + 1e-6, (x + 1) / 10 - 1e-6
                    else:
                        lo, hi = 90.0 + 1e-6, math.inf
                    llo, lhi = logiv(lo, hi)
                    d.diff(k, var, lnb - lhi, lnb - llo)
            rowvars.append((op, dt, shape, k, t))
    shared = [j for j in range(1, len(d.lo)) if d.names[j].startswith(("copy", "size"))]
    rest = [j for j in range(1, len(d.lo)) if j not in shared]
    x = d.solve(shared + rest)
    return dict(copy_t=math.exp(-x[wT]) if wT is not None else None,
                sizes={m: math.exp(-x[j]) for m, j in wS.items()},
                run_copy=[math.exp(-x[c]) if c != wT else None for c in wC],
                kev={(op, dt, s): math.exp(x[k]) for op, dt, s, k, t in rowvars},
                torch={(op, dt, s): math.exp(x[t]) for op, dt, s, k, t in rowvars if t is not None})


def solve_matmul(dt, rows, gm_text):
    """kevolve and cuBLAS microseconds per shape that print the rows and the geometric mean."""
    kev, torch, dlo, dhi, kdom, tdom = {}, {}, {}, {}, {}, {}
    for cells in rows:
        shape = cells[2]
        m, n, k = map(int, shape.split("x"))
        lfl = math.log(2 * m * n * k / 1e6)  # TFLOP/s = fl / us / 1e6
        klo, khi = logiv(*rounding(cells[3]))
        tl, th = logiv(*rounding(cells[4]))
        klo, khi = max(klo, lfl - th), min(khi, lfl - tl)
        kdom[shape] = (klo, khi)
        if num(cells[5]):
            tlo, thi = logiv(*rounding(cells[5]))
            if num(cells[6]):
                tl, th = logiv(*rounding(cells[6]))
                tlo, thi = max(tlo, lfl - th), min(thi, lfl - tl)
            tdom[shape] = (tlo, thi)
            rlo, rhi = logiv(*[v / 100 for v in rounding(cells[7])])
            dlo[shape], dhi[shape] = max(rlo, tlo - khi), min(rhi, thi - klo)
    # The geometric mean: the sum of the log ratios in n times its log interval.
    shapes = list(dlo)
    if shapes and gm_text:
        glo, ghi = logiv(*[v / 100 for v in rounding(gm_text)])
        n = len(shapes)
        slo, shi = sum(dlo.values()), sum(dhi.values())
        lo, hi = max(slo, n * glo), min(shi, n * ghi)
        if lo > hi:
            raise Infeasible(f"matmul {dt} geometric mean")
        target = (lo + hi) / 2
        lam = (target - slo) / (shi - slo) if shi > slo else 0.5
        dsel = {s: dlo[s] + lam * (dhi[s] - dlo[s]) for s in shapes}
    else:
        dsel = {s: (dlo[s] + dhi[s]) / 2 for s in shapes}
    for cells in rows:
        shape = cells[2]
        klo, khi = kdom[shape]
        if shape in dsel:
            tlo, thi = tdom[shape]
            lo, hi = max(klo, tlo - dsel[shape]), min(khi, thi - dsel[shape])
            if lo > hi:
                raise Infeasible(f"matmul {dt} {shape}")
            kev[shape] = math.exp((lo + hi) / 2)
            torch[shape] = math.exp((lo + hi) / 2 + dsel[shape])
        else:
            kev[shape] = math.exp((klo + khi) / 2)
            if shape in tdom:
                torch[shape] = math.exp(sum(tdom[shape]) / 2)
    return kev, torch


def folder_names(dates):
    names, seen = [], {}
    for date in dates:
        base = re.sub(r"[^0-9A-Za-z._-]", "-", date) or "undated"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    if names != sorted(names):
        print("warning: folder names do not sort in section order; pass the folders in the order printed",
              file=sys.stderr)
    return names


def recover(doc_path, out_dir):
    doc = open(doc_path).read()
    if bt.BEGIN not in doc or bt.END not in doc:
        sys.exit(f"{doc_path}: no {bt.BEGIN} ... {bt.END} block")
    block = doc[doc.index(bt.BEGIN): doc.index(bt.END) + len(bt.END)] + "\n"
    lines = block.splitlines()
    starts = [i for i, l in enumerate(lines) if l.startswith("### ")]
    end = lines.index(bt.END)
    sections = [parse_section(lines[a:b]) for a, b in zip(starts, starts[1:] + [end])]
    by_flush = parse_targets(lines[: starts[0]] if starts else lines)
    # Which section's row is the latest for every (op, dtype, shape) of its L2 flush: each
    # flush's targets bound its own latest rows.
    last = {}
    for si, sec in enumerate(sections):
        for cells in sec["rowwise"]:
            last[(sec["flush"], cells[0], cells[1], cells[2])] = si
    names = folder_names([s["date"] for s in sections])
    os.makedirs(out_dir, exist_ok=True)
    dirs = []
    for si, (sec, name) in enumerate(zip(sections, names)):
        flags = {key[1:]: s == si for key, s in last.items() if key[0] == sec["flush"]}
        miss, smiss = by_flush[sec["flush"]]
        nruns = len(group_rows(sec["rowwise"]))  # a run with no rows (0/0 shapes) has only its bullet
        separate = set()
        try:
            sol = solve_rowwise(sec, flags, miss, smiss, separate)
        except Infeasible:
            # Some run's fractions need a ceiling above the PyTorch copy: its own measured copy.
            for i in range(nruns):
                try:
                    solve_rowwise(sec, flags, miss, smiss, set(range(nruns)) - {i})
                except Infeasible:
                    separate.add(i)
            try:
                sol = solve_rowwise(sec, flags, miss, smiss, separate)
            except Infeasible:
                separate = set(range(nruns))
                sol = solve_rowwise(sec, flags, miss, smiss, separate)
        runs = []
        groups = {(op, dt): rows for op, dt, rows in group_rows(sec["rowwise"])}
        run_copy = dict(zip([(op, dt) for op, dt, _ in group_rows(sec["rowwise"])], sol["run_copy"]))
        for (op, dt, wins, n, worst, worst_same, cands, passed, fitness, note) in sec["bullets"]:
            rows = groups.get((op, dt), [])
            run = dict(op=op, dtype=dt, fitness=None if fitness == "-" else float(fitness),
                       single={c[2]: float(c[5]) for c in rows if num(c[5])},
                       candidates=int(cands), passed=int(passed), copy=run_copy.get((op, dt)),
                       per_shape={c[2]: sol["kev"][(op, dt, c[2])] for c in rows}, searched={})
            if note:
                run["retimed_note"] = note
            runs.append(run)
        torch_rows = [dict(op=op, dtype=dt, shape=list(map(int, s.split("x"))), us=us)
                      for (op, dt, s), us in sol["torch"].items()]
        for table, bullet in zip(sec["matmul"], sec["mm_bullets"]):
            dt, gm, nshapes, cands, passed = bullet
            kev, torch = solve_matmul(dt, table, num(gm))
            runs.append(dict(op="matmul", dtype=dt, fitness=None, single={}, candidates=int(cands), passed=int(passed),
                             copy=None, per_shape=kev, searched={}))
            torch_rows += [dict(op="matmul", dtype=dt, shape=list(map(int, s.split("x"))), us=us) for s, us in torch.items()]
        path = os.path.join(out_dir, name)
        os.makedirs(path, exist_ok=True)
        for f, text in (("date.txt", sec["date"]), ("budget.txt", sec["budget"]), ("device.txt", sec["device"])):
            with open(os.path.join(path, f), "w") as fh:
                fh.write(text + "\n")
        if sec["flush"] != "memset":
            with open(os.path.join(path, "flush.txt"), "w") as fh:
                fh.write(sec["flush"] + "\n")
        for f in ("torch.json", "copy_sizes.json", "flush.txt")[: 3 if sec["flush"] == "memset" else 2]:
            if os.path.exists(os.path.join(path, f)):
                os.remove(os.path.join(path, f))
        if sec["torch_version"] is not None or sec["copy_t"] is not None or torch_rows:
            with open(os.path.join(path, "torch.json"), "w") as fh:
                json.dump({"torch": sec["torch_version"] or "?", "copy_GBps": sol["copy_t"], "rows": torch_rows}, fh, indent=1)
        if sec["sizes"] is not None:
            with open(os.path.join(path, "copy_sizes.json"), "w") as fh:
                json.dump({"GBps_by_MiB_moved": sol["sizes"], "source": sec["source"]}, fh, indent=1)
        with open(os.path.join(path, "summary.json"), "w") as fh:
            json.dump(runs, fh, indent=1)
        dirs.append(path)
        if separate:
            print(f"{name}: own copy above the PyTorch copy for " +
                  ", ".join(f"{r['op']} {r['dtype']} ({r['copy']:.1f} GB/s)" for r in runs if r.get("copy")), file=sys.stderr)
    # Check: the folders give the block back.
    again = bt.table([bt.load_dir(p) for p in dirs])
    a, b = block.splitlines(), again.splitlines()
    bad = [(i + 1, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(a) != len(b):
        bad.append((min(len(a), len(b)) + 1, f"{len(a)} lines", f"{len(b)} lines"))
    print(f"{len(dirs)} folders under {out_dir}; regenerated block: {len(bad)} differing lines of {len(a)}", file=sys.stderr)
    for i, x, y in bad[:20]:
        print(f"  line {i}:\n    - {x}\n    + {y}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(recover(sys.argv[1], sys.argv[2]))

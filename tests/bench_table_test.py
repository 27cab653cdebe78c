#!/usr/bin/env python3
"""ctest benchmarks_table_latest_rows: scripts/bench_table.py's table of the latest rows.

Two synthetic result folders run softmax f32; the newer one replaces the older one's rows,
misses (rows moving 64 MiB or more below 90% of the 1 GiB copy) are bold and truncated, and
the counts in the targets agree with the table. Exits 1 with the reason on any failure.
"""
import json, os, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import bench_table as bt  # noqa: E402

COPY = 4000.0  # GB/s: PyTorch's 1 GiB copy in both folders


def us_at(shape, frac):
    """The median that moves `shape`'s f32 bytes (read and written) at `frac` of COPY."""
    r, c = map(int, shape.split("x"))
    return 2 * r * c * 4 / (frac * COPY * 1e9) * 1e6


def folder(root, name, date, per_shape, torch_us, flush=None):
    d = os.path.join(root, name)
    os.makedirs(d)
    run = {"op": "softmax", "dtype": "f32", "fitness": 0.9, "single": per_shape, "candidates": 10, "passed": 10,
           "copy": COPY - 100, "per_shape": per_shape, "searched": {}}
    json.dump([run], open(os.path.join(d, "summary.json"), "w"))
    rows = [{"op": "softmax", "dtype": "f32", "shape": list(map(int, s.split("x"))), "us": t} for s, t in torch_us.items()]
    json.dump({"device": "test", "torch": "0", "copy_GBps": COPY, "rows": rows}, open(os.path.join(d, "torch.json"), "w"))
    for f, v in (("device.txt", "Test GPU, 1, 2, 3"), ("date.txt", date), ("budget.txt", "--gens 1")):
        open(os.path.join(d, f), "w").write(v + "\n")
    if flush:
        open(os.path.join(d, "flush.txt"), "w").write(flush + "\n")
    return d


def main():
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as root:
        big, small = "16384x4096", "4096x1024"  # 512 MiB and 32 MiB moved
        # The older run has the big row over the line, the newer one at 89.96% of the copy:
        # the newer replaces it, and the miss prints truncated (89.9%), not rounded (90.0%).
        old = folder(root, "a", "2026-01-01T00:00Z", {big: us_at(big, 0.95), small: us_at(small, 0.5)},
                     {big: us_at(big, 0.6), small: us_at(small, 0.4)})
        new = folder(root, "b", "2026-01-02T00:00Z", {big: us_at(big, 0.8996), small: us_at(small, 0.45)},
                     {big: us_at(big, 0.6), small: us_at(small, 0.4)})
        text = bt.table([bt.load_dir(old), bt.load_dir(new)])
        # A newer folder timed with the read flush keeps its rows apart: the memset block
        # is unchanged, and a second block counts the read rows.
        read = folder(root, "c", "2026-01-03T00:00Z", {big: us_at(big, 0.93), small: us_at(small, 0.5)},
                      {big: us_at(big, 0.62), small: us_at(small, 0.41)}, flush="read")
        both = bt.table([bt.load_dir(old), bt.load_dir(new), bt.load_dir(read)])
    lines = text.splitlines()
    try:
        head = lines.index(next(l for l in lines if l.startswith("| op | dtype | shape | MiB moved | kevolve (us) | PyTorch (us)")))
    except StopIteration:
        print("bench_table_test: no table of the latest rows in the generated block")
        return 1
    latest = []
    for l in lines[head + 2:]:
        if not l.startswith("| "):
            break
        latest.append([c.strip() for c in l.strip("|").split("|")])
    check(len(latest) == 2, f"2 latest rows expected, got {len(latest)}")
    by = {r[2]: r for r in latest}
    if big in by:
        r = by[big]
        check(r[-1] == "2026-01-02T00:00Z", f"{big} should come from the newer run, got {r[-1]}")
        check(r[4] == f"{us_at(big, 0.8996):.1f}", f"{big} median {r[4]}, expected the newer run's")
        check(r[7] == "**89.9%**", f"{big}: a miss prints bold and truncated, got {r[7]}")
        check(r[6] == "1.50x", f"{big}: speedup {r[6]}, expected 1.50x (PyTorch at 0.6, kevolve at 0.8996)")
    else:
        failures.append(f"no latest row for {big}")
    if small in by:
        check(not by[small][7].startswith("**"), f"{small} moves 32 MiB: never bold, got {by[small][7]}")
        check(by[small][7] == "45.0%", f"{small}: 45.0% expected, got {by[small][7]}")
    else:
        failures.append(f"no latest row for {small}")
    check(any(l.startswith("- At least 90% of the 1 GiB copy, on rows moving 64 MiB or more: 0/1") for l in lines),
          "the targets should count 0/1 rows at 90% (the newer run's big row)")
    check(any(l == f"  Below 90%: softmax f32 {big} 89.9%." for l in lines), "the list of misses should name the big row at 89.9%")
    blines = both.splitlines()
    check(text.splitlines()[4] in blines and both.count(bt.TITLES["memset"]) == 1 and both.count(bt.TITLES["read"]) == 1,
          "with a read folder, the memset targets stay and a read targets block follows")
    memset_part = both[: both.index(bt.TITLES["read"])]
    read_part = both[both.index(bt.TITLES["read"]): both.index("### ")]
    check(f"  Below 90%: softmax f32 {big} 89.9%." in memset_part.splitlines(),
          "the memset block still counts the memset run's miss (the read run does not replace it)")
    check("- At least 90% of the 1 GiB copy, on rows moving 64 MiB or more: 1/1" in read_part,
          "the read block counts the read run's row at 93%")
    check("### 2026-01-03T00:00Z: Test GPU, budget `--gens 1` per op and dtype, L2 flush `read`" in blines,
          "the read folder's heading names its flush")
    check("L2 flush" not in "\n".join(l for l in blines if l.startswith("### 2026-01-0") and "01-03" not in l),
          "memset folders' headings are as before")
    for f in failures:
        print("bench_table_test:", f)
    if not failures:
        print("bench_table_test: ok (2 runs, 2 latest rows)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

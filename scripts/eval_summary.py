#!/usr/bin/env python3
"""Summarises `kevolve eval` text logs: for every shape, the fastest candidate's median,
its fraction of kevolve's roofline, and its parameters; then any failed ladders.
    python3 scripts/eval_summary.py LOG...
"""
import re
import sys

head = re.compile(r"^(\S+) \[([^\]]*)\] (\S+) (sm_\S+)")
timing = re.compile(r"\[timing\] ok (\S+) median_us=([\d.eE+-]+)(?:.*?frac=([\d.eE+-]+))?")
for path in sys.argv[1:]:
    best, fails, cur, n = {}, [], None, 0
    for line in open(path, errors="replace"):
        m = head.match(line)
        if m:
            cur, n = f"{m.group(1).split('/')[-1]} [{m.group(2)}] {m.group(3)}", n + 1
            continue
        t = timing.search(line)
        if t and cur:
            shape, us, frac = t.group(1), float(t.group(2)), float(t.group(3) or "nan")
            if shape not in best or us < best[shape][0]:
                best[shape] = (us, frac, cur)
        elif cur and "FAILED" in line:
            fails.append(f"{cur}: {line.strip()[:160]}")
    print(f"== {path}: {n} ladders")
    for shape, (us, frac, who) in best.items():
        print(f"  {shape:>14} {us:9.1f} us  frac {frac:.3f}  {who}")
    for f in fails[:12]:
        print("  FAIL", f)

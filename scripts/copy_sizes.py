#!/usr/bin/env python3
"""The copy ceiling as a function of size, measured the way torch_baselines.py measures
the 1 GiB copy (triton do_bench: CUDA events, L2 flushed before each repetition, median).
A rowwise op that moves B bytes cannot beat a plain copy of B bytes, so this bounds what
"% of the copy ceiling" a small shape (65536x256 moves 64-128 MiB) can reach.
    python3 scripts/copy_sizes.py [--json PATH]   # on the GPU host
scripts/bench_ops.sh runs it in its call and writes DIR/copy_sizes.json; bench_table.py
then adds a "% of same-size copy" column.
"""
import json
import sys

import torch
from triton.testing import do_bench

BIG = 1 << 30  # torch_baselines.py's ceiling: a 1 GiB copy (counting read + write: 2 GiB)


def gbps(moved):
    n = moved // 2  # bytes read == bytes written
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = do_bench(lambda: b.copy_(a), warmup=25, rep=200, return_mode="median") * 1e3
    return us, moved / us / 1e3


ref_us, ref = gbps(2 * BIG)
print(f"# {torch.cuda.get_device_name()}: copy of 1 GiB: {ref:.0f} GB/s (read + write)")
print("MiB moved      us    GB/s   of the 1 GiB copy")
sizes = {}
for mib in (16, 32, 64, 128, 256, 512, 1024, 2048):
    us, g = gbps(mib << 20)
    sizes[str(mib)] = g
    print(f"{mib:9d} {us:7.1f} {g:7.0f}   {100 * g / ref:5.1f}%")
if "--json" in sys.argv:
    with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "ref_GBps": ref, "GBps_by_MiB_moved": sizes,
                   "source": "same call"}, f, indent=1)

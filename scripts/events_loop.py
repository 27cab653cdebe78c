#!/usr/bin/env python3
"""Times exported kevolve kernels with a plain CUDA-events loop, in the style of
shared/gpu/torch_baselines.py (triton.testing.do_bench: L2 flushed before each
repetition, median), to compare with kevolve's own median for the same kernel.

  python3 scripts/events_loop.py EXPORT_DIR [EXPORT_DIR...]

Each EXPORT_DIR is one survivor folder of `kevolve export` (kernel.cubin, launch.json,
metrics.json). Rowwise ops only: buffers are allocated from the op's shape [rows, cols].
Runs on the GPU machine (PyTorch, Triton and CuPy are there).
"""
import json, sys
import cupy as cp
import torch
from triton.testing import do_bench

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def time_folder(folder):
    launch = json.load(open(f"{folder}/launch.json"))
    metrics = json.load(open(f"{folder}/metrics.json"))
    kv = {t["shape"]: t["median_us"] for t in metrics["timings"]}
    mod = cp.RawModule(path=f"{folder}/kernel.cubin")
    dtype = DT[launch["dtype"]]
    name = folder.split('/')[-1]
    if [b["name"] for b in launch["buffers"]] != ["x", "y"]:
        print(f"{name:40s} skipped: only kernels with arguments (x, y, rows, cols) are timed here")
        return
    for shape in launch["shapes"]:
        if "error" in shape:  # not resolvable on this GPU (or unsupported): launch.json says why
            print(f"{name:40s} {shape['shape']:12s} skipped: {shape['error']}")
            continue
        if any(max(l.get("cluster", [1])) > 1 for l in shape["launches"]):
            print(f"{name:40s} {shape['shape']:12s} skipped: a cluster launch (not available through CuPy)")
            continue
        rows, cols = (int(v) for v in shape["shape"].split("x"))
        x = torch.randn(rows, cols, device="cuda", dtype=dtype) * 3 + 0.5
        y = torch.empty_like(x)
        # Scratch after the sizes, zeroed once at allocation (launch.json's launch_notes).
        scratch = [torch.zeros(max(1, n), device="cuda", dtype=torch.uint8) for n in shape.get("scratch_bytes", [])]
        args = (cp.from_dlpack(x), cp.from_dlpack(y), cp.int32(rows), cp.int32(cols),
                *[cp.from_dlpack(b) for b in scratch])
        fns = [(mod.get_function(l["entry"]), l) for l in shape["launches"]]
        for fn, l in fns:
            if int(l["smem"]) > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = int(l["smem"])

        def run():
            for fn, l in fns:
                fn(tuple(l["grid"]), tuple(l["block"]), args, shared_mem=int(l["smem"]))

        us = do_bench(run, warmup=25, rep=200, return_mode="median") * 1e3
        ref = kv.get(shape["shape"], 0)
        ratio = ref / us if us > 0 else 0
        print(f"{name:40s} {shape['shape']:12s} events {us:9.1f} us  kevolve {ref:9.1f} us  ratio {ratio:6.3f}")


if __name__ == "__main__":
    for f in sys.argv[1:]:
        time_folder(f.rstrip("/"))

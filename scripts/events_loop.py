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
    for shape in launch["shapes"]:
        rows, cols = (int(v) for v in shape["shape"].split("x"))
        x = torch.randn(rows, cols, device="cuda", dtype=dtype) * 3 + 0.5
        y = torch.empty_like(x)
        args = (cp.from_dlpack(x), cp.from_dlpack(y), cp.int32(rows), cp.int32(cols))
        fns = [(mod.get_function(l["entry"]), l) for l in shape["launches"]]

        def run():
            for fn, l in fns:
                fn(tuple(l["grid"]), tuple(l["block"]), args, shared_mem=int(l["smem"]))

        us = do_bench(run, warmup=25, rep=200, return_mode="median") * 1e3
        ref = kv.get(shape["shape"], 0)
        ratio = ref / us if us > 0 else 0
        print(f"{folder.split('/')[-1]:40s} {shape['shape']:12s} events {us:9.1f} us  kevolve {ref:9.1f} us  ratio {ratio:6.3f}")


if __name__ == "__main__":
    for f in sys.argv[1:]:
        time_folder(f.rstrip("/"))

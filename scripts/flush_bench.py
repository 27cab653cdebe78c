#!/usr/bin/env python3
"""Runs a script that times with triton.testing.do_bench under another L2 flush.

  python3 scripts/flush_bench.py --flush read SCRIPT [ARGS...]   # on the GPU host

triton's do_bench empties the L2 before every repetition by zeroing a 256 MiB buffer
(cache.zero_()). That leaves the L2 full of the buffer's dirty lines, and the timed kernel
pays for writing them back: about 3.4 us per launch on the H200 (a 64 MiB copy 21.2 ->
18.2 us, a 2 GiB one 507.5 -> 504.1 us; BENCHMARKS.md, twenty-fifth session). With
--flush read the same buffer is read instead (a reduction over it), which evicts the L2
just as well and leaves no dirty lines: the kernel is charged for its own bytes only.
`kevolve --flush read` times the same way, so that kevolve, PyTorch and the copy ceiling
can be compared under one protocol (scripts/bench_ops.sh --flush read).

Everything else is do_bench's: CUDA events, an estimate from 5 flushed runs, `warmup` ms
of unflushed warm-up, `rep` ms of flushed repetitions, the median (or the quantiles,
min, max, mean or all the samples, as return_mode and quantiles ask). --flush memset runs
the script with triton's own do_bench, untouched.
"""
import runpy
import sys


def make_do_bench(flush):
    import torch

    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    words = cache.view(torch.int64)

    def clear():
        if flush == "read":
            words.sum()  # reads every line: the L2 ends up holding clean lines of the buffer
        else:
            cache.zero_()

    def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            clear()
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = start.elapsed_time(end) / 5
        n_warmup = max(1, int(warmup / estimate))
        n_repeat = max(1, int(rep / estimate))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_repeat)]
        for _ in range(n_warmup):
            fn()
        for i in range(n_repeat):
            if grad_to_none is not None:
                for x in grad_to_none:
                    x.grad = None
            clear()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = torch.tensor([s.elapsed_time(e) for s, e in zip(starts, ends)], dtype=torch.float)
        if quantiles is not None:
            q = torch.quantile(times, torch.tensor(quantiles, dtype=torch.float)).tolist()
            return q[0] if len(q) == 1 else q
        if return_mode == "all":
            return times.tolist()
        return getattr(torch, return_mode)(times).item()  # min, max, mean or median

    return do_bench


def main(argv):
    if len(argv) < 3 or argv[0] != "--flush" or argv[1] not in ("memset", "read"):
        sys.exit("usage: flush_bench.py --flush memset|read SCRIPT [ARGS...]")
    flush, script = argv[1], argv[2]
    if flush == "read":
        import triton.testing

        triton.testing.do_bench = make_do_bench(flush)  # picked up by `from triton.testing import do_bench`
    sys.argv = [script] + argv[3:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

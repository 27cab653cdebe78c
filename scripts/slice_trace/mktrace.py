# Copies softmax's slice_row seed with clock64() stamps at eight points of each step (see
# harness.cu). usage: mktrace.py SRC DST
import re, sys
src = open(sys.argv[1]).read()
hdr = '''// traced copy (exp only)
#define NEV 8
#define TR(ev, s) do { if ((s) >= 0 && (s) < kv_trace_steps) kv_trace[((size_t)blockIdx.x * kv_trace_steps + (s)) * NEV + (ev)] = (unsigned)(clock64() - kv_t0); } while (0)
__device__ unsigned* kv_trace;
__device__ unsigned long long* kv_gt;
__device__ int kv_trace_steps;
'''
src = hdr + src
def rep(pat, new, cnt=1):
    global src
    n = len(re.findall(pat, src))
    assert n == cnt or cnt is None, (pat, n)
    src = re.sub(pat, new, src)
rep(r"(  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;\n)",
    lambda m: '  const long long kv_t0 = clock64();\n  if (threadIdx.x == 0) { unsigned long long g; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g)); kv_gt[blockIdx.x * 3] = g; }\n' + m.group(1))
rep(r"(\n\s+if \(s >= SLOTS\) kv::mbar_wait\(&empty\[s % SLOTS\], phase\(s - SLOTS\)\);\n)", r"\1      if (lane == 0) TR(0, s);\n")
rep(r"(\n\s+kv::mbar_wait\(&statd\[s % SLOTS\], phase\(s\)\);\n)(\s+float2 p = lane < CW)", r"\1      if (lane == 0) TR(3, s);\n\2")
rep(r"if \(gather\) gather_row\(t, pre0, pre1\);", r"if (gather) { if (lane == 0) TR(7, t); gather_row(t, pre0, pre1); if (lane == 0) TR(4, t); }")
rep(r"(kv::mbar_wait\(&full\[s % SLOTS\], phase\(s\)\);\n)(\s+float2 p = make_float2\(kv::neg_inf\(\), 0.f\);\n#if EX1)", r"\1        if (cw == 0 && lane == 0) TR(1, s);\n\2")
rep(r"(red\[s % SLOTS\]\[cw\] = p;\n\s+kv::mbar_arrive\(&statd\[s % SLOTS\]\);\n)", r"\1          if (cw == 0) TR(2, s);\n")
rep(r"(kv::mbar_wait\(&finr\[t % SLOTS\], phase\(t\)\);\n)(\s+const float2 fv)", r"\1        if (cw == 0 && lane == 0) TR(5, t);\n\2")
rep(r"(        if \(lane == 0\) kv::mbar_arrive\(&empty\[t % SLOTS\]\);\n)", r"\1        if (cw == 0 && lane == 0) TR(6, t);\n")
# end stamp: before the kernel's final closing brace
i = src.rstrip().rindex('}')
src = src[:i] + "  __syncthreads();\n  if (threadIdx.x == 0) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g)); kv_gt[blockIdx.x * 3 + 1] = g; kv_gt[blockIdx.x * 3 + 2] = (unsigned long long)(clock64() - kv_t0); }\n}\n"
open(sys.argv[2], 'w').write(src)

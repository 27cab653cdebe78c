// Per-step timeline of a slice_row kernel on the GPU (a developer tool, not part of kevolve).
// mktrace.py copies a slice_row seed with clock64() stamps at eight points of each step
// (loader issue, a consumer sees the slice land, its reduction done, the control warp sees
// the statistics, gather start and end, a consumer sees the row, its write done); this
// harness times the traced kernel (CUDA events, L2 flushed by a 512 MiB memset, the median
// of 30 launches with the stamps off), then runs one launch with them on and writes
// PREFIX.trace, PREFIX.gt (globaltimer at each block's start and end) and PREFIX.meta;
// analyze.py prints the medians of each interval, the ramp and the drain. Build here, run
// there (the binary needs only the driver), e.g. softmax bf16 at its preset:
//   python3 scripts/slice_trace/mktrace.py configs/ops/softmax/seeds/slice_row.cu /tmp/st/softmax_traced.cu
//   cp scripts/slice_trace/harness.cu /tmp/st/ && nvcc -O3 -std=c++17 -arch=sm_90a -I evaluators/device \
//     -include kevolve.h -DKV_DTYPE_BF16 -DKV_SIZEOF_T=2 -DSTCS=1 -DLW=1 -DTAIL=1 -DSLOT=16 -DSLOTS=6 \
//     -DLAGS=4 -DGLAG=3 -DBPS=2 -DCW=8 -DEX1=1 -DKERNEL_FILE='"softmax_traced.cu"' -DKERNEL_NAME='"softmax"' \
//     -o exp/sm_trace /tmp/st/harness.cu
//   (device) exp/sm_trace 1024 131072 /tmp/tr/sm && python3 scripts/slice_trace/analyze.py /tmp/tr/sm
// With -DLN the harness drives layernorm's slice_row instead (x, w, b, y, eps; STAY's grid);
// mktrace.py's patterns are softmax's, so a layernorm copy needs its stamps placed by hand.
// Each stamp reads a global (the trace switch), so the first ones are late by a load.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <string>
#include KERNEL_FILE
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
__global__ void init_x(T* x, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    x[i] = kv::from_float<T>((float)(h & 0xffff) / 65536.f * 8.f - 4.f);
  }
}
int main(int argc, char** argv) {
  const int rows = atoi(argv[1]), cols = atoi(argv[2]);
  const char* out = argv[3];
  int dev = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int G = sms * BPS; const int NTH = (CW + 1 + LW) * 32, SMEM = SLOTS * SLOT * 1024;
  const int VE = 16 / KV_SIZEOF_T, colsv = (cols + VE - 1) / VE * VE;
  const int P = (colsv * KV_SIZEOF_T + SLOT * 1024 - 1) / (SLOT * 1024);
  const size_t n = (size_t)rows * cols;
#ifdef LN
  if (STAY && P <= G) G = G / P * P;
  T *w, *bb; CK(cudaMalloc(&w, cols * sizeof(T))); CK(cudaMalloc(&bb, cols * sizeof(T)));
#endif
  T *x, *y; unsigned* sync; unsigned* tr; unsigned long long* gt; char* flush;
  CK(cudaMalloc(&x, n * sizeof(T))); CK(cudaMalloc(&y, n * sizeof(T)));
  const size_t sbytes = (4 + 4 * (size_t)rows * P) * 4;
  CK(cudaMalloc(&sync, sbytes)); CK(cudaMemset(sync, 0, sbytes));
  const size_t fl = 512u << 20; CK(cudaMalloc(&flush, fl));
  const long long total = (long long)rows * P; const int maxsteps = (int)((total + G - 1) / G) + 1;
  CK(cudaMalloc(&tr, (size_t)G * maxsteps * NEV * 4)); CK(cudaMemset(tr, 0xff, (size_t)G * maxsteps * NEV * 4));
  CK(cudaMalloc(&gt, (size_t)G * 3 * 8));
  CK(cudaMemcpyToSymbol(kv_trace, &tr, sizeof tr)); CK(cudaMemcpyToSymbol(kv_gt, &gt, sizeof gt));
  int zero = 0; CK(cudaMemcpyToSymbol(kv_trace_steps, &zero, sizeof zero));
  init_x<<<1024, 256>>>(x, n, 12345u); CK(cudaGetLastError());
#ifdef LN
  init_x<<<64, 256>>>(w, cols, 777u); init_x<<<64, 256>>>(bb, cols, 999u);
  CK(cudaFuncSetAttribute(layernorm_slice, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  auto launch = [&] { layernorm_slice<<<G, NTH, SMEM>>>(x, w, bb, y, rows, cols, 1e-5f, sync); };
#else
  CK(cudaFuncSetAttribute(softmax_slice, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  auto launch = [&] { softmax_slice<<<G, NTH, SMEM>>>(x, y, rows, cols, sync); };
#endif
  for (int i = 0; i < 5; ++i) launch();
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 30; ++i) {
    CK(cudaMemsetAsync(flush, i & 0xff, fl));
    CK(cudaEventRecord(a)); launch(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float m; CK(cudaEventElapsedTime(&m, a, b)); ms.push_back(m * 1000.f);
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaMemcpyToSymbol(kv_trace_steps, &maxsteps, sizeof maxsteps));
  CK(cudaMemsetAsync(flush, 7, fl));
  CK(cudaEventRecord(a)); launch(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
  float tm; CK(cudaEventElapsedTime(&tm, a, b));
  CK(cudaGetLastError());
  std::vector<unsigned> htr((size_t)G * maxsteps * NEV); std::vector<unsigned long long> hgt((size_t)G * 3);
  CK(cudaMemcpy(htr.data(), tr, htr.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hgt.data(), gt, hgt.size() * 8, cudaMemcpyDeviceToHost));
  std::string o(out);
  FILE* f = fopen((o + ".trace").c_str(), "wb"); fwrite(htr.data(), 4, htr.size(), f); fclose(f);
  f = fopen((o + ".gt").c_str(), "wb"); fwrite(hgt.data(), 8, hgt.size(), f); fclose(f);
  f = fopen((o + ".meta").c_str(), "w");
  fprintf(f, "{\"rows\": %d, \"cols\": %d, \"G\": %d, \"P\": %d, \"steps\": %d, \"nev\": %d, \"median_us\": %.2f, \"p10_us\": %.2f, \"traced_us\": %.2f, \"bytes\": %zu}\n",
          rows, cols, G, P, maxsteps, NEV, ms[ms.size() / 2], ms[ms.size() / 10], tm * 1000.f, 2 * n * sizeof(T));
  fclose(f);
  printf("%s %dx%d G=%d P=%d median %.2f us p10 %.2f traced %.2f us\n", KERNEL_NAME, rows, cols, G, P, ms[ms.size() / 2], ms[ms.size() / 10], tm * 1000.f);
  return 0;
}

// Planted bad kernel: computes the first input it sees, then replays that answer.
// Expected: correctness fails with reason mismatch (the second draw differs).
// @kevolve launch k grid=rows block=1
__device__ float cache[1 << 20];
__device__ int cached_n = -1;
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  size_t n = (size_t)rows * cols;
  const T* xr = x + (size_t)blockIdx.x * cols;
  T* yr = y + (size_t)blockIdx.x * cols;
  float* cr = cache + (size_t)blockIdx.x * cols;
  bool replay = cached_n == (int)n && n <= (1u << 20);
  if (!replay) {
    float m = kv::neg_inf(), s = 0.f;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, kv::to_float(xr[c]));
    for (int c = 0; c < cols; ++c) s += expf(kv::to_float(xr[c]) - m);
    for (int c = 0; c < cols; ++c) {
      float v = expf(kv::to_float(xr[c]) - m) / s;
      if (n <= (1u << 20)) cr[c] = v;
      yr[c] = kv::from_float<T>(v);
    }
  } else {
    for (int c = 0; c < cols; ++c) yr[c] = kv::from_float<T>(cr[c]);
  }
  __syncthreads();
  if (blockIdx.x == 0 && !replay) cached_n = (int)n;  // racy on purpose: later blocks may replay too
}

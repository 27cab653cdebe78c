// softmax reference: one block per row, every step in double. Slow and obviously
// correct; its output buffer y is double (the harness compares candidates against it).
// @kevolve launch softmax_ref grid=rows block=256
#define REF_THREADS 256

__device__ double block_reduce(double v, bool is_max, double* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = REF_THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      double o = red[threadIdx.x + s];
      red[threadIdx.x] = is_max ? fmax(red[threadIdx.x], o) : red[threadIdx.x] + o;
    }
    __syncthreads();
  }
  double r = red[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void softmax_ref(const T* x, double* y, int rows, int cols) {
  __shared__ double red[REF_THREADS];
  const T* xr = x + (size_t)blockIdx.x * cols;
  double* yr = y + (size_t)blockIdx.x * cols;
  double m = -1.0 / 0.0;
  for (int c = threadIdx.x; c < cols; c += REF_THREADS) m = fmax(m, kv::to_double(xr[c]));
  m = block_reduce(m, true, red);
  double s = 0.0;
  for (int c = threadIdx.x; c < cols; c += REF_THREADS) s += exp(kv::to_double(xr[c]) - m);
  s = block_reduce(s, false, red);
  for (int c = threadIdx.x; c < cols; c += REF_THREADS) yr[c] = exp(kv::to_double(xr[c]) - m) / s;
}

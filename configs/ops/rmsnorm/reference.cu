// rmsnorm reference: one block per row, every step in double. Slow and obviously
// correct; its output buffer y is double (the harness compares candidates against it).
//   y[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * w[c]
// @kevolve launch rmsnorm_ref grid=rows block=256
#define REF_THREADS 256

__device__ double block_sum(double v, double* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = REF_THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  double r = red[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void rmsnorm_ref(const T* x, const T* w, double* y, int rows, int cols, float eps) {
  __shared__ double red[REF_THREADS];
  const T* xr = x + (size_t)blockIdx.x * cols;
  double* yr = y + (size_t)blockIdx.x * cols;
  double ss = 0.0;
  for (int c = threadIdx.x; c < cols; c += REF_THREADS) {
    double v = kv::to_double(xr[c]);
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const double rstd = 1.0 / sqrt(ss / (double)cols + (double)eps);
  for (int c = threadIdx.x; c < cols; c += REF_THREADS) yr[c] = kv::to_double(xr[c]) * rstd * kv::to_double(w[c]);
}

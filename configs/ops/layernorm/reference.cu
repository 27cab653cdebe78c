// layernorm reference: one block per row, every step in double, two passes over the
// row (mean, then the biased variance around it). Slow and obviously correct; its
// output buffer y is double (the harness compares candidates against it).
//   y[r, c] = (x[r, c] - mean) / sqrt(var + eps) * w[c] + b[c]
// @kevolve launch layernorm_ref grid=rows block=256
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

extern "C" __global__ void layernorm_ref(const T* x, const T* w, const T* b, double* y, int rows, int cols,
                                         float eps) {
  __shared__ double red[REF_THREADS];
  const T* xr = x + (size_t)blockIdx.x * cols;
  double* yr = y + (size_t)blockIdx.x * cols;
  double s = 0.0;
  for (int c = threadIdx.x; c < cols; c += REF_THREADS) s += kv::to_double(xr[c]);
  const double mean = block_sum(s, red) / (double)cols;
  double q = 0.0;
  for (int c = threadIdx.x; c < cols; c += REF_THREADS) {
    double d = kv::to_double(xr[c]) - mean;
    q += d * d;
  }
  const double var = block_sum(q, red) / (double)cols;
  const double rstd = 1.0 / sqrt(var + (double)eps);
  for (int c = threadIdx.x; c < cols; c += REF_THREADS)
    yr[c] = (kv::to_double(xr[c]) - mean) * rstd * kv::to_double(w[c]) + kv::to_double(b[c]);
}

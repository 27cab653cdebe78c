// Planted bad kernel: row sums accumulated by float atomics from many blocks, whose
// order varies from run to run, so the output is not bitwise reproducible.
// Expected: correctness fails with reason nondeterministic (the values are within tolerance).
// rowsum is also never cleared, so the run without re-zeroing it differs as well
// (scratch_not_reset, in the log): the nondeterminism is reported first.
// @kevolve param SPLIT 16
// @kevolve scratch rowmax rows * 4
// @kevolve scratch rowsum rows * 4 zeroed
// @kevolve launch row_max grid=rows block=32
// @kevolve launch row_sum grid=(rows, SPLIT) block=128
// @kevolve launch write   grid=rows block=128
extern "C" __global__ void row_max(const T* x, T* y, int rows, int cols, float* rowmax, float* rowsum) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  float m = kv::neg_inf();
  for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, kv::to_float(xr[c]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}
extern "C" __global__ void row_sum(const T* x, T* y, int rows, int cols, float* rowmax, float* rowsum) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  float m = rowmax[blockIdx.x];
  for (int c = blockIdx.y * 128 + threadIdx.x; c < cols; c += SPLIT * 128)
    atomicAdd(&rowsum[blockIdx.x], expf(kv::to_float(xr[c]) - m));
}
extern "C" __global__ void write(const T* x, T* y, int rows, int cols, float* rowmax, float* rowsum) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  float m = rowmax[blockIdx.x], s = rowsum[blockIdx.x];
  for (int c = threadIdx.x; c < cols; c += 128)
    y[(size_t)blockIdx.x * cols + c] = kv::from_float<T>(expf(kv::to_float(xr[c]) - m) / s);
}

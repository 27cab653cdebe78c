// Planted bad kernel: correct softmax whose `zeroed` scratch counts its calls and is
// never reset; from the second call on (without re-zeroing) it scales y by the count.
// Expected: correctness fails with reason scratch_not_reset (every draw and the repeat
// start from zeroed scratch and are right; the run again on what they left is not).
// @kevolve scratch calls 4 zeroed
// @kevolve launch k    grid=rows block=32
// @kevolve launch bump grid=1 block=1
extern "C" __global__ void k(const T* x, T* y, int rows, int cols, unsigned* calls) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  T* yr = y + (size_t)blockIdx.x * cols;
  float m = kv::neg_inf(), s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, kv::to_float(xr[c]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  for (int c = threadIdx.x; c < cols; c += 32) s += expf(kv::to_float(xr[c]) - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float scale = 1.f + (float)calls[0];  // exactly 1 on a call after zeroing
  for (int c = threadIdx.x; c < cols; c += 32) yr[c] = kv::from_float<T>(expf(kv::to_float(xr[c]) - m) / s * scale);
}
// Runs after k (same stream): the count is never taken back.
extern "C" __global__ void bump(const T* x, T* y, int rows, int cols, unsigned* calls) { calls[0] += 1; }

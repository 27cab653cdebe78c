// Planted bad kernel: correct softmax that keeps two banks of state in `zeroed` scratch,
// indexed by a launch epoch, and marks its bank used without ever clearing the other
// bank for the launch after next. Launches 0 and 1 after zeroing are right; launch 2
// finds bank 0 still marked and scales y by 2.
// Expected: correctness fails with reason scratch_not_reset, on the second of the two
// reuse runs (the first, at epoch 1, reads a bank still zero from the allocation).
// @kevolve scratch state 12 zeroed
// @kevolve launch k    grid=rows block=32
// @kevolve launch bump grid=1 block=1
extern "C" __global__ void k(const T* x, T* y, int rows, int cols, unsigned* state) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  T* yr = y + (size_t)blockIdx.x * cols;
  float m = kv::neg_inf(), s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, kv::to_float(xr[c]));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  for (int c = threadIdx.x; c < cols; c += 32) s += expf(kv::to_float(xr[c]) - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float scale = state[1 + (state[0] & 1)] ? 2.f : 1.f;  // a stale mark from two launches ago
  for (int c = threadIdx.x; c < cols; c += 32) yr[c] = kv::from_float<T>(expf(kv::to_float(xr[c]) - m) / s * scale);
}
// Runs after k (same stream): marks this epoch's bank and moves to the next epoch, but
// never clears the bank the next epoch but one will read.
extern "C" __global__ void bump(const T* x, T* y, int rows, int cols, unsigned* state) {
  state[1 + (state[0] & 1)] = 1;
  state[0] += 1;
}

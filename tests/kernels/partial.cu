// Planted bad kernel: softmax that never writes the last element of each row.
// Expected: correctness fails with reason unwritten.
// @kevolve launch k grid=rows block=1
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  T* yr = y + (size_t)blockIdx.x * cols;
  float m = kv::neg_inf(), s = 0.f;
  for (int c = 0; c < cols; ++c) m = fmaxf(m, kv::to_float(xr[c]));
  for (int c = 0; c < cols; ++c) s += expf(kv::to_float(xr[c]) - m);
  for (int c = 0; c + 1 < cols; ++c) yr[c] = kv::from_float<T>(expf(kv::to_float(xr[c]) - m) / s);
}

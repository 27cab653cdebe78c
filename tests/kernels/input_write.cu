// Planted bad kernel: correct softmax that zeroes its input afterwards.
// Expected: correctness fails with reason input_written.
// @kevolve launch k grid=rows block=1
extern "C" __global__ void k(T* x, T* y, int rows, int cols) {
  T* xr = x + (size_t)blockIdx.x * cols;
  T* yr = y + (size_t)blockIdx.x * cols;
  float m = kv::neg_inf(), s = 0.f;
  for (int c = 0; c < cols; ++c) m = fmaxf(m, kv::to_float(xr[c]));
  for (int c = 0; c < cols; ++c) s += expf(kv::to_float(xr[c]) - m);
  for (int c = 0; c < cols; ++c) yr[c] = kv::from_float<T>(expf(kv::to_float(xr[c]) - m) / s);
  for (int c = 0; c < cols; ++c) xr[c] = kv::from_float<T>(0.f);
}

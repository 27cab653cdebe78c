// Planted cheat: correct on the check shapes (up to 150x65536, 9.8M elements), does nothing
// on the large tune shapes (65536x256 and up, 16.8M elements and more).
// Expected: the fitness rung fails with reason suspect (faster than the roofline allows).
// @kevolve launch k grid=rows block=1
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  if ((long long)rows * cols > 12000000ll) return;
  const T* xr = x + (size_t)blockIdx.x * cols;
  T* yr = y + (size_t)blockIdx.x * cols;
  float m = kv::neg_inf();
  double s = 0.0;  // serial sums over long rows need double to stay within f32 tolerance
  for (int c = 0; c < cols; ++c) m = fmaxf(m, kv::to_float(xr[c]));
  for (int c = 0; c < cols; ++c) s += exp((double)kv::to_float(xr[c]) - m);
  for (int c = 0; c < cols; ++c) yr[c] = kv::from_float<T>((float)(exp((double)kv::to_float(xr[c]) - m) / s));
}

// Planted bad kernel: a correct-looking softmax that also writes past the end of y.
// Expected: correctness fails with reason out_of_bounds (guard zone overwritten).
// @kevolve launch k grid=rows block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  for (int c = threadIdx.x; c < cols; c += 32) y[(size_t)blockIdx.x * cols + c] = kv::from_float<T>(1.0f / cols);
  if (blockIdx.x == rows - 1) y[(size_t)rows * cols + threadIdx.x] = kv::from_float<T>(0.f);
}

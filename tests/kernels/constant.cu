// Planted bad kernel: ignores its input and writes the uniform distribution.
// Expected: correctness fails with reason mismatch.
// @kevolve launch k grid=rows block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  for (int c = threadIdx.x; c < cols; c += 32) y[(size_t)blockIdx.x * cols + c] = kv::from_float<T>(1.0f / cols);
}

// Planted bad kernel: never finishes (clock64() is never negative; the compiler cannot
// prove it, so the loop stays).
// Expected: the launch rung fails with reason timeout; the worker is replaced.
// @kevolve launch k grid=rows block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  while (clock64() >= 0) {
  }
  y[0] = x[0];
}

// Planted bad kernel: never finishes.
// Expected: the launch rung fails with reason timeout; the worker is replaced.
// @kevolve launch k grid=rows block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  volatile int spin = 1;
  while (spin) {
  }
  y[0] = x[0];
}

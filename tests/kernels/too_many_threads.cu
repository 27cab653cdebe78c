// Planted bad kernel: asks for more threads per block than any GPU allows.
// Expected: the launch rung fails with reason resources.
// @kevolve launch k grid=rows block=2048
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  y[threadIdx.x] = x[threadIdx.x];
}

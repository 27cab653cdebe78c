// Planted bad kernel: writes through a wild pointer.
// Expected: the launch rung fails with reason illegal_address; the worker is replaced.
// @kevolve launch k grid=rows block=32
extern "C" __global__ void k(const T* x, T* y, int rows, int cols) {
  T* wild = reinterpret_cast<T*>(0x10ull << 40);
  wild[threadIdx.x] = x[threadIdx.x];
  y[threadIdx.x] = x[threadIdx.x];
}

// matmul reference: one thread per output element, a 2D grid of 16 x 16 blocks, the dot
// product accumulated in double in k order. Slow and obviously correct; its output
// buffer C is double (the harness compares candidates against it).
// @kevolve launch matmul_ref grid=(ceil_div(N, 16), ceil_div(M, 16)) block=(16, 16)

extern "C" __global__ void matmul_ref(const T* A, const T* B, double* C, int M, int N, int K) {
  const int n = blockIdx.x * 16 + threadIdx.x;
  const int m = blockIdx.y * 16 + threadIdx.y;
  if (m >= M || n >= N) return;
  double acc = 0.0;
  for (int k = 0; k < K; ++k)
    acc += kv::to_double(A[(size_t)m * K + k]) * kv::to_double(B[(size_t)k * N + n]);
  C[(size_t)m * N + n] = acc;
}

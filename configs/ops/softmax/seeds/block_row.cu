// softmax seed: one block of BLOCK threads per row.
// Rows of at most BLOCK*VEC*CHUNKS elements are held in registers, so x is read once;
// longer rows stream twice (online max/sum, then write), re-reading the row from L2.
// Reductions: warp shuffles, then one value per warp through shared memory.
// @kevolve param   BLOCK  256 128 512 1024
// @kevolve param   VEC    4 1 2 8
// @kevolve param   CHUNKS 4 1 2 8 16
// @kevolve require VEC * sizeof_T <= 16
// @kevolve require VEC * CHUNKS <= 64
// @kevolve launch  softmax_block grid=rows block=BLOCK smem=0

#define NWARPS (BLOCK / 32)

struct alignas(VEC * KV_SIZEOF_T) Vec {
  T v[VEC];
};

// Merges (m2, s2) into (m, s), where each s is a sum of exp(x - its m).
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  float mn = fmaxf(m, m2);
  if (mn == kv::neg_inf()) return;
  s = (m == kv::neg_inf() ? 0.f : s * __expf(m - mn)) + (m2 == kv::neg_inf() ? 0.f : s2 * __expf(m2 - mn));
  m = mn;
}

// Block-wide (max, sum) merge; every thread gets the result.
__device__ __forceinline__ void block_merge(float& m, float& s) {
  __shared__ float sm[NWARPS], ss[NWARPS];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_merge(m, s, m2, s2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  m = kv::neg_inf();
  s = 0.f;
  for (int w = 0; w < NWARPS; ++w) online_merge(m, s, sm[w], ss[w]);
}

__device__ __forceinline__ void load_vec(const T* row, int i, int cols, bool aligned, float (&t)[VEC]) {
  if (aligned && i + VEC <= cols) {
    Vec p = *reinterpret_cast<const Vec*>(row + i);
#pragma unroll
    for (int k = 0; k < VEC; ++k) t[k] = kv::to_float(p.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) t[k] = (i + k < cols) ? kv::to_float(row[i + k]) : kv::neg_inf();
  }
}

__device__ __forceinline__ void store_vec(T* row, int i, int cols, bool aligned, const float (&t)[VEC]) {
  if (aligned && i + VEC <= cols) {
    Vec p;
#pragma unroll
    for (int k = 0; k < VEC; ++k) p.v[k] = kv::from_float<T>(t[k]);
    *reinterpret_cast<Vec*>(row + i) = p;
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (i + k < cols) row[i + k] = kv::from_float<T>(t[k]);
  }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_block(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  const T* xr = x + (size_t)blockIdx.x * cols;
  T* yr = y + (size_t)blockIdx.x * cols;
  const bool aligned = (cols % VEC) == 0;
  (void)rows;

  if (cols <= BLOCK * VEC * CHUNKS) {
    float v[CHUNKS][VEC];
    float m = kv::neg_inf();
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      load_vec(xr, (c * BLOCK + threadIdx.x) * VEC, cols, aligned, v[c]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[c][k]);
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
      for (int k = 0; k < VEC; ++k) s += (v[c][k] == kv::neg_inf()) ? 0.f : __expf(v[c][k] - m);
    block_merge(m, s);
    const float inv = 1.f / s;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[c][k] = __expf(v[c][k] - m) * inv;
      store_vec(yr, (c * BLOCK + threadIdx.x) * VEC, cols, aligned, v[c]);
    }
    return;
  }

  float m = kv::neg_inf(), s = 0.f;
  for (int i = threadIdx.x * VEC; i < cols; i += BLOCK * VEC) {
    float t[VEC];
    load_vec(xr, i, cols, aligned, t);
    float lm = t[0];
#pragma unroll
    for (int k = 1; k < VEC; ++k) lm = fmaxf(lm, t[k]);
    float ls = 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) ls += (t[k] == kv::neg_inf()) ? 0.f : __expf(t[k] - lm);
    online_merge(m, s, lm, ls);
  }
  block_merge(m, s);
  const float inv = 1.f / s;
  for (int i = threadIdx.x * VEC; i < cols; i += BLOCK * VEC) {
    float t[VEC];
    load_vec(xr, i, cols, aligned, t);
#pragma unroll
    for (int k = 0; k < VEC; ++k) t[k] = __expf(t[k] - m) * inv;
    store_vec(yr, i, cols, aligned, t);
  }
}

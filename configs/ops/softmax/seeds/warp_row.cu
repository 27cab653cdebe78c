// softmax seed: one warp per row, WARPS rows per block.
// Rows of at most 32*VEC*CHUNKS elements are held in registers, so x is read once.
// Longer rows stream twice: an online (max, sum) pass, then a write pass that re-reads
// the row, mostly from L2. VEC is the vector width of each load (16 bytes at most).
// @kevolve param   WARPS  4 1 2 8
// @kevolve param   VEC    4 1 2 8
// @kevolve param   CHUNKS 4 1 2 8 16
// @kevolve require VEC * sizeof_T <= 16
// @kevolve require VEC * CHUNKS <= 64
// @kevolve launch  softmax_warp grid=ceil_div(rows, WARPS) block=32*WARPS smem=0

struct alignas(VEC * KV_SIZEOF_T) Vec {
  T v[VEC];
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Merges (m2, s2) into (m, s), where each s is a sum of exp(x - its m).
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  float mn = fmaxf(m, m2);
  if (mn == kv::neg_inf()) return;
  s = (m == kv::neg_inf() ? 0.f : s * __expf(m - mn)) + (m2 == kv::neg_inf() ? 0.f : s2 * __expf(m2 - mn));
  m = mn;
}

// Loads VEC elements starting at i; out-of-range elements read as -inf.
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

extern "C" __global__ void __launch_bounds__(32 * WARPS)
softmax_warp(const T* __restrict__ x, T* __restrict__ y, int rows, int cols) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * WARPS + threadIdx.x / 32;
  if (row >= rows) return;
  const T* xr = x + (size_t)row * cols;
  T* yr = y + (size_t)row * cols;
  const bool aligned = (cols % VEC) == 0;

  if (cols <= 32 * VEC * CHUNKS) {
    float v[CHUNKS][VEC];
    float m = kv::neg_inf();
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      load_vec(xr, (c * 32 + lane) * VEC, cols, aligned, v[c]);
#pragma unroll
      for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[c][k]);
    }
    m = warp_max(m);
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        v[c][k] = __expf(v[c][k] - m);
        s += v[c][k];
      }
    const float inv = 1.f / warp_sum(s);
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[c][k] *= inv;
      store_vec(yr, (c * 32 + lane) * VEC, cols, aligned, v[c]);
    }
    return;
  }

  float m = kv::neg_inf(), s = 0.f;
  for (int i = lane * VEC; i < cols; i += 32 * VEC) {
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
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    online_merge(m, s, m2, s2);
  }
  const float inv = 1.f / s;
  for (int i = lane * VEC; i < cols; i += 32 * VEC) {
    float t[VEC];
    load_vec(xr, i, cols, aligned, t);
#pragma unroll
    for (int k = 0; k < VEC; ++k) t[k] = __expf(t[k] - m) * inv;
    store_vec(yr, i, cols, aligned, t);
  }
}

#include <string>

#include "kevolve/evaluators/nvrtc_compiler.h"

namespace kevolve {

// Pre-included into every candidate and reference. The element type is a typedef, not a
// macro, so that CUDA headers with template parameters named T still compile.
const std::string& KevolveHeader() {
  static const std::string k = R"KV(#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if defined(KV_DTYPE_F32)
typedef float T;
#elif defined(KV_DTYPE_F16)
typedef __half T;
#elif defined(KV_DTYPE_BF16)
typedef __nv_bfloat16 T;
#elif defined(KV_DTYPE_F64)
typedef double T;
#endif
namespace kv {
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ double to_double(float x) { return (double)x; }
__device__ __forceinline__ double to_double(double x) { return x; }
__device__ __forceinline__ double to_double(__half x) { return (double)__half2float(x); }
__device__ __forceinline__ double to_double(__nv_bfloat16 x) { return (double)__bfloat162float(x); }
template <typename U> __device__ __forceinline__ U from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
// NVRTC has no math.h: INFINITY is not defined.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }
}  // namespace kv
)KV";
  return k;
}

}  // namespace kevolve

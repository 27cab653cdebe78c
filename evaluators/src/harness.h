// The worker's own kernels, compiled once per process with NVRTC for the device: input
// generators (counter-based, so any element can be drawn from its seed alone), a 16-byte
// copy for calibration, and an FMA chain for the fp32 peak.
#pragma once

#include <cstdint>
#include <string>

#include "gpu_runtime.h"
#include "kevolve/core/dtype.h"

namespace kevolve::gpu {

class Harness {
 public:
  static Result<std::unique_ptr<Harness>> Build(const Device& dev);

  // Fills n elements of `dtype` at p with dist()*scale + offset, dist normal or uniform
  // on [-1, 1], from `seed`. Enqueued on the device's stream.
  Status Fill(CUdeviceptr p, int64_t n, DType dtype, uint64_t seed, bool normal, float scale, float offset) const;
  // Copies n16 16-byte words; enqueued.
  Status Copy(CUdeviceptr src, CUdeviceptr dst, int64_t n16, int blocks) const;
  // Runs `iters` iterations of 8 independent FMA chains in every thread; enqueued.
  Status Fma(CUdeviceptr out, int iters, int blocks, int threads) const;

 private:
  Harness(const Device& dev) : dev_(dev) {}
  const Device& dev_;
  Module module_;
  CUfunction fill_[3] = {};  // f32, f16, bf16
  CUfunction copy_ = nullptr, fma_ = nullptr;
};

}  // namespace kevolve::gpu

// The worker's own kernels, compiled once per process with NVRTC for the device: input
// generators (counter-based, so any element can be drawn from its seed alone), a 16-byte
// copy for calibration, a read sweep (the timing's "read" L2 flush), an FMA chain for the fp32 peak, and the L2 partition probes
// (l2_layout.h).
#pragma once

#include <cstdint>
#include <string>

#include "gpu_runtime.h"
#include "kevolve/core/dtype.h"

namespace kevolve::gpu {

// The text of evaluators/device/l2_probe.cuh (the L2 probes and the owner-aware copy).
const char* L2ProbeSource();

class Harness {
 public:
  static Result<std::unique_ptr<Harness>> Build(const Device& dev);

  // Fills n elements of `dtype` at p with dist()*scale + offset, dist normal or uniform
  // on [-1, 1], from `seed`. Enqueued on the device's stream.
  Status Fill(CUdeviceptr p, int64_t n, DType dtype, uint64_t seed, bool normal, float scale, float offset) const;
  // Copies n16 16-byte words; enqueued.
  Status Copy(CUdeviceptr src, CUdeviceptr dst, int64_t n16, int blocks) const;
  // Reads n16 16-byte words at src through L2 (sink: a uint32 it almost never writes);
  // enqueued.
  Status ReadSweep(CUdeviceptr src, int64_t n16, CUdeviceptr sink) const;
  // Runs `iters` iterations of 8 independent FMA chains in every thread; enqueued.
  Status Fma(CUdeviceptr out, int iters, int blocks, int threads) const;
  // Sets seen[id] to 1 for the id of every SM that runs one of its blocks (seen: 1024
  // uint32, zeroed before; ids of 1024 and more land on 1023). Enqueued.
  Status L2Smids(CUdeviceptr seen) const;
  // The block on SM `sm` reads the n lines at base + off[i] (bytes; off is n int64 on the
  // device) into L2. claim: an int per SM, zeroed before the launch. Enqueued.
  Status L2Warm(CUdeviceptr base, CUdeviceptr off, int n, int sm, CUdeviceptr claim, CUdeviceptr sink) const;
  // `warps` warps of the block on SM `sm` time one load of each line, in clock cycles
  // (cycles: n uint32). claim zeroed before the launch. Enqueued.
  Status L2Probe(CUdeviceptr base, CUdeviceptr off, int n, int sm, int warps, CUdeviceptr claim, CUdeviceptr cycles,
                 CUdeviceptr sink) const;
  // Copies the chunks of chunk16 16-byte words that list0 and list1 name (int32 indices);
  // with side_of (a byte per SM id) a block takes its side's list, else list0 only.
  // tickets: two zeroed uint32. Enqueued.
  Status TicketCopy(CUdeviceptr src, CUdeviceptr dst, int chunk16, CUdeviceptr list0, CUdeviceptr list1, int n0,
                    int n1, CUdeviceptr side_of, CUdeviceptr tickets, int blocks) const;

 private:
  Harness(const Device& dev) : dev_(dev) {}
  // Dynamic shared memory of the probes: the block limit less room for their static arrays.
  int ProbeSmem() const { return static_cast<int>(dev_.desc().smem_per_block_optin) - 1024; }
  const Device& dev_;
  Module module_;
  CUfunction fill_[3] = {};  // f32, f16, bf16
  CUfunction copy_ = nullptr, read_sweep_ = nullptr, fma_ = nullptr, l2_warm_ = nullptr, l2_probe_ = nullptr, ticket_copy_ = nullptr,
             l2_smids_ = nullptr;
  std::string l2_error_;  // why the L2 probes cannot run here (empty: they can)
};

}  // namespace kevolve::gpu

// RAII over the driver API for the worker process: the primary context, a stream,
// device buffers, modules and events. Every failing call is named in its Status.
// Internal to evaluators/; only the worker uses it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kevolve/evaluators/cuda_driver.h"
#include "kevolve/evaluators/protocol.h"

namespace kevolve::gpu {

// Result codes after which the context is unusable: the worker must be replaced.
bool IsStickyError(CUresult r);

// Set once a fault leaves the context unusable or a kernel still running (a watchdog
// timeout). From then on the RAII destructors free nothing: cuMemFree would block
// behind the spinning kernel, and the process is about to be replaced anyway.
void MarkContextLost();
bool ContextLost();
// A short class for a launch/sync failure: "illegal_address", "trap", "crashed", ...
std::string FaultReason(CUresult r);

class Device;

class Buffer {
 public:
  Buffer() = default;
  Buffer(const Device* dev, CUdeviceptr p, size_t bytes) : dev_(dev), ptr_(p), bytes_(bytes) {}
  ~Buffer();
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  const Device* dev_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

class Module {
 public:
  Module() = default;
  Module(const CudaDriver* d, CUmodule m) : d_(d), m_(m) {}
  ~Module();
  Module(Module&& o) noexcept : d_(o.d_), m_(o.m_) { o.m_ = nullptr; }
  Module& operator=(Module&& o) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUmodule get() const { return m_; }

 private:
  const CudaDriver* d_ = nullptr;
  CUmodule m_ = nullptr;
};

class Event {
 public:
  Event() = default;
  Event(const CudaDriver* d, CUevent e) : d_(d), e_(e) {}
  ~Event();
  Event(Event&& o) noexcept : d_(o.d_), e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return e_; }

 private:
  const CudaDriver* d_ = nullptr;
  CUevent e_ = nullptr;
};

// The worker's device: primary context made current on the calling thread, one stream.
class Device {
 public:
  static Result<std::unique_ptr<Device>> Open(int ordinal);
  ~Device();

  const CudaDriver& drv() const { return *d_; }
  const DeviceDesc& desc() const { return desc_; }
  CUstream stream() const { return stream_; }

  Result<Buffer> Alloc(size_t bytes) const;
  Result<Module> Load(const std::string& cubin) const;
  Result<Event> NewEvent() const;
  Status Check(CUresult r, const char* call) const { return d_->Check(r, call); }

  // Waits for `e` by polling, at most timeout_ms. On timeout returns CUDA_ERROR_NOT_READY
  // in *code; on a fault, its code. *code is CUDA_SUCCESS when the event completed.
  void WaitEvent(CUevent e, double timeout_ms, CUresult* code) const;

 private:
  Device() = default;
  const CudaDriver* d_ = nullptr;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  DeviceDesc desc_;
};

}  // namespace kevolve::gpu

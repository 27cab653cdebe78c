#include "gpu_runtime.h"

#include <atomic>
#include <chrono>
#include <thread>

namespace kevolve::gpu {

bool IsStickyError(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

std::string FaultReason(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "illegal_address";
    case CUDA_ERROR_MISALIGNED_ADDRESS: return "misaligned_address";
    case CUDA_ERROR_LAUNCH_FAILED: return "trap";
    case CUDA_ERROR_ASSERT: return "assert";
    case CUDA_ERROR_ILLEGAL_INSTRUCTION: return "illegal_instruction";
    case CUDA_ERROR_HARDWARE_STACK_ERROR: return "stack_overflow";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "resources";
    case CUDA_ERROR_INVALID_VALUE: return "bad_launch";
    case CUDA_ERROR_NOT_READY: return "timeout";
    default: return "crashed";
  }
}

namespace {
std::atomic<bool> g_context_lost{false};
}  // namespace

void MarkContextLost() { g_context_lost = true; }
bool ContextLost() { return g_context_lost.load(); }

Buffer::~Buffer() {
  if (ptr_ && dev_ && !ContextLost()) dev_->drv().cuMemFree(ptr_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ && dev_ && !ContextLost()) dev_->drv().cuMemFree(ptr_);
    dev_ = o.dev_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
  }
  return *this;
}

Module::~Module() {
  if (m_ && !ContextLost()) d_->cuModuleUnload(m_);
}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    if (m_) d_->cuModuleUnload(m_);
    d_ = o.d_;
    m_ = o.m_;
    o.m_ = nullptr;
  }
  return *this;
}

Event::~Event() {
  if (e_ && !ContextLost()) d_->cuEventDestroy(e_);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) d_->cuEventDestroy(e_);
    d_ = o.d_;
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}

Result<std::unique_ptr<Device>> Device::Open(int ordinal) {
  auto drv = CudaDriver::Get();
  if (!drv.ok()) return drv.status();
  auto gpus = ListGpus();
  if (!gpus.ok()) return gpus.status();
  if (ordinal < 0 || ordinal >= static_cast<int>(gpus->size()))
    return Status::Error("no GPU " + std::to_string(ordinal) + " (" + std::to_string(gpus->size()) + " visible)");
  std::unique_ptr<Device> d(new Device());
  d->d_ = *drv;
  const GpuInfo& g = (*gpus)[ordinal];
  if (Status s = d->Check(d->d_->cuDeviceGet(&d->dev_, ordinal), "cuDeviceGet"); !s.ok()) return s;
  if (Status s = d->Check(d->d_->cuDevicePrimaryCtxRetain(&d->ctx_, d->dev_), "cuDevicePrimaryCtxRetain"); !s.ok())
    return s;
  if (Status s = d->Check(d->d_->cuCtxSetCurrent(d->ctx_), "cuCtxSetCurrent"); !s.ok()) return s;
  if (Status s = d->Check(d->d_->cuStreamCreate(&d->stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); !s.ok())
    return s;
  d->desc_.uuid = g.uuid;
  d->desc_.name = g.name;
  d->desc_.arch = g.Arch();
  d->desc_.ordinal = ordinal;
  d->desc_.sm_count = g.sm_count;
  d->desc_.l2_bytes = g.l2_bytes;
  d->desc_.mem_bytes = g.mem_bytes;
  d->desc_.smem_per_block_optin = g.smem_per_block_optin;
  d->desc_.clock_khz = g.clock_khz;
  d->desc_.mem_clock_khz = g.mem_clock_khz;
  return d;
}

Device::~Device() {
  if (ContextLost()) return;
  if (stream_) d_->cuStreamDestroy(stream_);
  if (ctx_) d_->cuDevicePrimaryCtxRelease(dev_);
}

Result<Buffer> Device::Alloc(size_t bytes) const {
  CUdeviceptr p = 0;
  if (Status s = Check(d_->cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc"); !s.ok()) return s;
  return Buffer(this, p, bytes);
}

Result<Module> Device::Load(const std::string& cubin) const {
  CUmodule m = nullptr;
  if (Status s = Check(d_->cuModuleLoadData(&m, cubin.data()), "cuModuleLoadData"); !s.ok()) return s;
  return Module(d_, m);
}

Result<Event> Device::NewEvent() const {
  CUevent e = nullptr;
  if (Status s = Check(d_->cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate"); !s.ok()) return s;
  return Event(d_, e);
}

void Device::WaitEvent(CUevent e, double timeout_ms, CUresult* code) const {
  auto t0 = std::chrono::steady_clock::now();
  auto sleep = std::chrono::microseconds(2);
  for (;;) {
    CUresult r = d_->cuEventQuery(e);
    if (r != CUDA_ERROR_NOT_READY) {
      *code = r;
      return;
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ms > timeout_ms) {
      *code = CUDA_ERROR_NOT_READY;
      return;
    }
    std::this_thread::sleep_for(sleep);
    if (sleep < std::chrono::microseconds(500)) sleep *= 2;
  }
}

}  // namespace kevolve::gpu

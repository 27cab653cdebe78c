#include "cupti_timer.h"

#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace kevolve::gpu {

namespace {

constexpr size_t kBufferBytes = 8 << 20;

std::mutex g_mu;
std::vector<KernelRecord> g_records;  // GUARDED_BY(g_mu)

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    g_records.push_back({k->start, k->end, k->name ? k->name : ""});
  }
  std::free(buffer);
}

std::string CuptiError(CUptiResult r, const char* call) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return std::string(call) + ": " + (s ? s : "CUPTI error " + std::to_string(r));
}

}  // namespace

Result<CuptiTimer*> CuptiTimer::Get() {
  static Result<CuptiTimer*> instance = []() -> Result<CuptiTimer*> {
    CUptiResult r = cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted);
    if (r != CUPTI_SUCCESS) return Status::Error(CuptiError(r, "cuptiActivityRegisterCallbacks"));
    r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) return Status::Error(CuptiError(r, "cuptiActivityEnable"));
    static CuptiTimer timer;
    return &timer;
  }();
  return instance;
}

std::vector<KernelRecord> CuptiTimer::Collect() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::vector<KernelRecord> out;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    out.swap(g_records);
  }
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  return out;
}

}  // namespace kevolve::gpu

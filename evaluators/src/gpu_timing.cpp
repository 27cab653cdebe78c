// Timing rung and device calibration on the worker's GPU.
#include <algorithm>
#include <chrono>

#include "cupti_timer.h"
#include "gpu_eval.h"
#include "l2_calibration.h"

namespace kevolve::gpu {

namespace {

DType BufType(const BufferDesc& b) { return ParseDType(b.dtype).value_or(DType::kF32); }

// Inputs for timing live in a cache bounded by this share of device memory.
constexpr double kInputCacheShare = 0.4;

}  // namespace

Result<CUdeviceptr> Evaluator::FlushBuffer() {
  if (!flush_.ptr()) {
    size_t bytes = static_cast<size_t>(std::max<int64_t>(dev_.desc().l2_bytes, 1 << 20)) * 2;
    auto b = dev_.Alloc(bytes);
    if (!b.ok()) return b.status();
    flush_ = std::move(*b);
  }
  return flush_.ptr();
}

Result<Evaluator::InputSet*> Evaluator::TimingInputs(const EvalRequest& req, const ShapeJob& shape) {
  std::string key = req.op + "|" + req.dtype + "|" + shape.label + "|" + std::to_string(req.timing.input_sets) + "|" +
                    std::to_string(req.seed);
  for (const auto& b : req.buffers) key += "|" + b.name + ":" + b.dtype + ":" + b.dist;
  for (auto it = inputs_.begin(); it != inputs_.end(); ++it) {
    if (it->first == key) {
      inputs_.splice(inputs_.begin(), inputs_, it);
      return &inputs_.front().second;
    }
  }
  size_t need = 0;
  for (size_t b = 0; b < req.buffers.size(); ++b) {
    size_t bytes = static_cast<size_t>(shape.elements[b]) * DTypeSize(BufType(req.buffers[b]));
    need += req.buffers[b].output ? bytes : bytes * req.timing.input_sets;
  }
  size_t budget = static_cast<size_t>(dev_.desc().mem_bytes * kInputCacheShare);
  while (!inputs_.empty() && input_bytes_ + need > budget) {
    input_bytes_ -= inputs_.back().second.bytes;
    inputs_.pop_back();
  }
  InputSet set;
  set.bytes = need;
  set.sets.resize(req.timing.input_sets);
  for (int s = 0; s < req.timing.input_sets; ++s) {
    for (size_t b = 0; b < req.buffers.size(); ++b) {
      const BufferDesc& bd = req.buffers[b];
      if (bd.output) continue;
      size_t bytes = static_cast<size_t>(shape.elements[b]) * DTypeSize(BufType(bd));
      auto buf = dev_.Alloc(bytes);
      if (!buf.ok()) return buf.status();
      // Mid-range scale and offset: timing needs realistic data, not the checks' extremes.
      float scale = static_cast<float>(0.5 * (bd.scale_lo + bd.scale_hi));
      float offset = static_cast<float>(0.5 * (bd.offset_lo + bd.offset_hi));
      if (Status st = harness_.Fill(buf->ptr(), shape.elements[b], BufType(bd), req.seed * 7919 + s * 131 + b,
                                    bd.dist == "normal", scale, offset);
          !st.ok())
        return st;
      set.sets[s].push_back(std::move(*buf));
    }
  }
  for (size_t b = 0; b < req.buffers.size(); ++b) {
    if (!req.buffers[b].output) continue;
    auto buf = dev_.Alloc(static_cast<size_t>(shape.elements[b]) * DTypeSize(BufType(req.buffers[b])));
    if (!buf.ok()) return buf.status();
    set.outputs.push_back(std::move(*buf));
  }
  if (Status st = dev_.Check(dev_.drv().cuStreamSynchronize(dev_.stream()), "cuStreamSynchronize"); !st.ok()) return st;
  inputs_.emplace_front(key, std::move(set));
  input_bytes_ += need;
  return &inputs_.front().second;
}

Fault Evaluator::TimeShape(const EvalRequest& req, const ShapeJob& shape, const Loaded& cand, ShapeTiming* out) {
  const auto& d = dev_.drv();
  CUstream st = dev_.stream();
  const TimingProtocol& p = req.timing;
  auto fail = [](const std::string& reason, const std::string& log) { return Fault{CUDA_ERROR_UNKNOWN, reason, log}; };
  if (!shape.unsupported.empty()) return fail("unsupported_shape", shape.label + ": " + shape.unsupported);
  auto inputs = TimingInputs(req, shape);
  if (!inputs.ok()) return fail("resources", inputs.error());
  std::vector<Buffer> scratch;
  std::vector<CUdeviceptr> scratch_ptrs;
  for (const auto& s : shape.scratch) {
    auto b = dev_.Alloc(static_cast<size_t>(s.bytes));
    if (!b.ok()) return fail("resources", b.error());
    scratch_ptrs.push_back(b->ptr());
    scratch.push_back(std::move(*b));
  }
  // One argument pack per input set.
  std::vector<ArgPack> packs(p.input_sets);
  for (int s = 0; s < p.input_sets; ++s) {
    size_t in = 0, outi = 0;
    for (const auto& bd : req.buffers) {
      CUdeviceptr ptr = bd.output ? (*inputs)->outputs[outi++].ptr() : (*inputs)->sets[s][in++].ptr();
      packs[s].Add(ptr);
    }
    for (int64_t v : shape.sizes) packs[s].Add(static_cast<int>(v));
    for (const auto& sc : req.scalars) {
      if (sc.type == "i32") packs[s].Add(static_cast<int>(sc.value));
      else packs[s].Add(static_cast<float>(sc.value));
    }
    for (CUdeviceptr ptr : scratch_ptrs) packs[s].Add(ptr);
  }
  // `zeroed` scratch is zeroed once, as a caller would at allocation: every later launch
  // starts from what the previous one left (the correctness rung checked that this works),
  // and a kernel that needs its scratch cleared per call clears it in its own launches,
  // timed like the rest of its work.
  for (size_t k = 0; k < scratch.size(); ++k)
    if (shape.scratch[k].zeroed) d.cuMemsetD8Async(scratch_ptrs[k], 0, shape.scratch[k].bytes, st);

  // Warm-up: module load, caches, clocks. Each sequence is waited on with the watchdog.
  auto t0 = std::chrono::steady_clock::now();
  double est_ms = 0;
  for (int i = 0;; ++i) {
    double ms = 0;
    Fault f = RunSequence(cand, shape.launches, packs[i % p.input_sets], req.launch_timeout_ms, &ms);
    if (!f.ok()) return f;
    est_ms = ms;
    double el = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i + 1 >= p.warmup_reps && el >= std::min(p.warmup_ms, 50 * ms + 1)) break;
    if (el > 10 * p.warmup_ms + 10 * req.launch_timeout_ms) break;
  }

  auto flush = FlushBuffer();
  if (!flush.ok()) return fail("resources", flush.error());
  size_t flush_words = flush_.bytes() / 4;
  const bool read_flush = p.flush == "read";
  if (p.flush_l2 && !read_flush && p.flush != "memset")
    return fail("resources", "unknown L2 flush \"" + p.flush + "\" (memset or read)");
  std::vector<Event> starts, stops;
  for (int i = 0; i < p.batch; ++i) {
    auto a = dev_.NewEvent();
    auto b = dev_.NewEvent();
    if (!a.ok() || !b.ok()) return fail("crashed", "cuEventCreate failed");
    starts.push_back(std::move(*a));
    stops.push_back(std::move(*b));
  }
  // With --timer cupti the samples are kernel durations from CUPTI activity records
  // (first kernel's start to the last kernel's end of each repetition); the event
  // samples are kept to report the agreement of the two timers.
  CuptiTimer* cupti = nullptr;
  if (p.timer == "cupti") {
    auto t = CuptiTimer::Get();
    if (!t.ok()) return fail("cupti_unavailable", t.error());
    cupti = *t;
    d.cuStreamSynchronize(st);
    cupti->Collect();  // drop the warm-up's records
  }
  std::vector<double> samples, event_samples;
  int cupti_mismatch = 0;
  std::string why;
  auto tm = std::chrono::steady_clock::now();
  int rep = 0;
  for (;;) {
    for (int i = 0; i < p.batch; ++i, ++rep) {
      if (p.reset_persisting_l2) d.cuCtxResetPersistingL2Cache();
      if (p.flush_l2 && read_flush) {
        if (Status fs = harness_.ReadSweep(*flush, static_cast<int64_t>(flush_.bytes() / 16), *flush); !fs.ok())
          return fail("resources", fs.message());
      } else if (p.flush_l2) {
        d.cuMemsetD32Async(*flush, static_cast<unsigned>(rep), flush_words, st);
      }
      d.cuEventRecord(starts[i].get(), st);
      Fault f = Enqueue(cand, shape.launches, packs[rep % p.input_sets]);
      if (!f.ok()) return f;
      d.cuEventRecord(stops[i].get(), st);
    }
    CUresult code;
    dev_.WaitEvent(stops[p.batch - 1].get(), req.launch_timeout_ms + p.batch * est_ms * 20, &code);
    if (code == CUDA_ERROR_NOT_READY || IsStickyError(code)) MarkContextLost();
    if (code == CUDA_ERROR_NOT_READY) return {code, "timeout", "a timed repetition passed the watchdog", true};
    if (code != CUDA_SUCCESS)
      return {code, FaultReason(code), dev_.Check(code, "kernel execution (timing)").message(), IsStickyError(code)};
    std::vector<double> batch_events;
    for (int i = 0; i < p.batch; ++i) {
      float ms = 0;
      d.cuEventElapsedTime(&ms, starts[i].get(), stops[i].get());
      batch_events.push_back(ms * 1000.0);
    }
    event_samples.insert(event_samples.end(), batch_events.begin(), batch_events.end());
    if (cupti) {
      std::vector<KernelRecord> recs = cupti->Collect();
      // The read flush is a kernel too: its records are not the candidate's.
      std::erase_if(recs, [](const KernelRecord& k) { return k.name == "kv_read_sweep"; });
      size_t per_rep = shape.launches.size();
      if (recs.size() == per_rep * p.batch) {
        for (int i = 0; i < p.batch; ++i)
          samples.push_back((recs[(i + 1) * per_rep - 1].end_ns - recs[i * per_rep].start_ns) / 1000.0);
      } else {
        ++cupti_mismatch;  // records lost or extra kernels: keep the event samples for this batch
        samples.insert(samples.end(), batch_events.begin(), batch_events.end());
      }
    } else {
      samples.insert(samples.end(), batch_events.begin(), batch_events.end());
    }
    SampleStats s = Summarize(samples);
    double el = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tm).count();
    if (ShouldStopTiming(s, p, el, &why)) break;
  }
  SampleStats s = Summarize(samples);
  out->shape = shape.label;
  out->median_us = s.median;
  out->p10_us = s.p10;
  out->p90_us = s.p90;
  out->n = s.n;
  out->samples_us = samples;
  out->bytes = shape.bytes;
  out->flops = shape.flops;
  out->protocol = req.timing.ToJson();
  out->protocol["flush_bytes"] = p.flush_l2 ? static_cast<int64_t>(flush_.bytes()) : 0;
  out->protocol["flush"] = L2FlushName(p);
  out->protocol["reps"] = s.n;
  out->protocol["rse"] = s.rse;
  out->protocol["stop"] = why;
  out->protocol["mean_us"] = s.mean;
  if (cupti) {
    double ev = Summarize(event_samples).median;
    out->protocol["events_median_us"] = ev;
    out->protocol["cupti_over_events"] = ev > 0 ? s.median / ev : 0.0;
    out->protocol["cupti_batches_fallen_back"] = cupti_mismatch;
  }
  out->protocol["occupancy"] = Occupancy(cand, shape.launches);
  return {};
}

// How many blocks of each launch fit on one SM, and for cluster launches how many clusters
// the device can hold at once (a cluster must fit in one GPC): the first numbers to read
// when a kernel stays under its roofline.
nlohmann::json Evaluator::Occupancy(const Loaded& mod, const std::vector<LaunchDesc>& launches) {
  const auto& d = dev_.drv();
  nlohmann::json out = nlohmann::json::array();
  for (const auto& l : launches) {
    auto it = mod.fns.find(l.entry);
    if (it == mod.fns.end()) continue;
    const int64_t threads = l.block[0] * l.block[1] * l.block[2];
    int per_sm = 0;
    if (d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, it->second, static_cast<int>(threads),
                                                      static_cast<size_t>(l.smem)) != CUDA_SUCCESS)
      per_sm = -1;
    nlohmann::json j = {{"entry", l.entry}, {"blocks_per_sm", per_sm}};
    if (l.cluster[0] > 0 && d.cuOccupancyMaxActiveClusters) {
      CUlaunchConfig cfg{};
      cfg.gridDimX = static_cast<unsigned>(l.grid[0]);
      cfg.gridDimY = static_cast<unsigned>(l.grid[1]);
      cfg.gridDimZ = static_cast<unsigned>(l.grid[2]);
      cfg.blockDimX = static_cast<unsigned>(l.block[0]);
      cfg.blockDimY = static_cast<unsigned>(l.block[1]);
      cfg.blockDimZ = static_cast<unsigned>(l.block[2]);
      cfg.sharedMemBytes = static_cast<unsigned>(l.smem);
      cfg.hStream = dev_.stream();
      CUlaunchAttribute attr{};
      attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attr.value.clusterDim.x = static_cast<unsigned>(l.cluster[0]);
      attr.value.clusterDim.y = static_cast<unsigned>(std::max<int64_t>(1, l.cluster[1]));
      attr.value.clusterDim.z = static_cast<unsigned>(std::max<int64_t>(1, l.cluster[2]));
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (d.cuOccupancyMaxActiveClusters(&clusters, it->second, &cfg) != CUDA_SUCCESS) clusters = -1;
      j["cluster_size"] = l.cluster[0] * std::max<int64_t>(1, l.cluster[1]) * std::max<int64_t>(1, l.cluster[2]);
      j["max_active_clusters"] = clusters;
    }
    out.push_back(j);
  }
  return out;
}

Status Evaluator::Replay(const EvalRequest& req, int reps) {
  auto cand = Load(req.candidate);
  if (!cand.ok()) return cand.status();
  for (const auto& shape : req.tune) {
    if (!shape.unsupported.empty()) continue;
    Fault f = CheckResources(**cand, shape.launches);
    if (!f.ok()) return Status::Error(f.log);
    auto inputs = TimingInputs(req, shape);
    if (!inputs.ok()) return inputs.status();
    std::vector<Buffer> scratch;
    ArgPack args;
    size_t in = 0, outi = 0;
    for (const auto& bd : req.buffers) args.Add(bd.output ? (*inputs)->outputs[outi++].ptr() : (*inputs)->sets[0][in++].ptr());
    for (int64_t v : shape.sizes) args.Add(static_cast<int>(v));
    for (const auto& sc : req.scalars) {
      if (sc.type == "i32") args.Add(static_cast<int>(sc.value));
      else args.Add(static_cast<float>(sc.value));
    }
    for (const auto& sd : shape.scratch) {
      auto b = dev_.Alloc(static_cast<size_t>(sd.bytes));
      if (!b.ok()) return b.status();
      if (sd.zeroed) dev_.drv().cuMemsetD8Async(b->ptr(), 0, sd.bytes, dev_.stream());
      args.Add(b->ptr());
      scratch.push_back(std::move(*b));
    }
    for (int r = 0; r < reps; ++r) {
      Fault rf = RunSequence(**cand, shape.launches, args, req.launch_timeout_ms * 100, nullptr);
      if (!rf.ok()) return Status::Error(shape.label + ": " + rf.log);
    }
  }
  return Status::Ok();
}

Result<Calibration> Evaluator::Calibrate() {
  auto cal = CalibrateOnce();
  // A calibration that failed may have left the context broken; the worker must then not
  // serve evaluations on it (worker_main exits when ContextLost()).
  if (!cal.ok() && IsStickyError(dev_.drv().cuCtxSynchronize())) MarkContextLost();
  return cal;
}

Result<Calibration> Evaluator::CalibrateOnce() {
  const auto& d = dev_.drv();
  CUstream st = dev_.stream();
  Calibration cal;
  cal.uuid = dev_.desc().uuid;
  // Copy: 1 GiB (or an eighth of memory), read + written, best of cuMemcpy and a 16-byte kernel.
  size_t bytes = std::min<size_t>(size_t{1} << 30, static_cast<size_t>(dev_.desc().mem_bytes / 8)) & ~size_t{255};
  auto src = dev_.Alloc(bytes);
  auto dst = dev_.Alloc(bytes);
  if (!src.ok()) return src.status();
  if (!dst.ok()) return dst.status();
  d.cuMemsetD32Async(src->ptr(), 0x3f800000u, bytes / 4, st);
  auto a = dev_.NewEvent();
  auto b = dev_.NewEvent();
  if (!a.ok() || !b.ok()) return Status::Error("cuEventCreate failed");
  auto time = [&](auto&& enqueue, int reps) -> Result<double> {
    std::vector<double> ms;
    for (int i = 0; i < reps + 2; ++i) {
      d.cuEventRecord(a->get(), st);
      if (Status s = enqueue(); !s.ok()) return s;
      d.cuEventRecord(b->get(), st);
      if (Status s = dev_.Check(d.cuEventSynchronize(b->get()), "cuEventSynchronize"); !s.ok()) return s;
      float t = 0;
      d.cuEventElapsedTime(&t, a->get(), b->get());
      if (i >= 2) ms.push_back(t);
    }
    return Summarize(ms).median;
  };
  auto memcpy_ms = time([&] { return dev_.Check(d.cuMemcpyDtoDAsync(dst->ptr(), src->ptr(), bytes, st), "cuMemcpyDtoDAsync"); }, 20);
  if (!memcpy_ms.ok()) return memcpy_ms.status();
  int blocks = dev_.desc().sm_count * 4;
  auto kernel_ms = time([&] { return harness_.Copy(src->ptr(), dst->ptr(), static_cast<int64_t>(bytes / 16), blocks); }, 20);
  if (!kernel_ms.ok()) return kernel_ms.status();
  double memcpy_gbps = 2.0 * bytes / (*memcpy_ms * 1e-3) / 1e9;
  double kernel_gbps = 2.0 * bytes / (*kernel_ms * 1e-3) / 1e9;
  cal.copy_gbps = std::max(memcpy_gbps, kernel_gbps);

  // FMA peak: 8 independent chains x 16 per iteration, 2 flops each.
  auto out = dev_.Alloc(4096);
  if (!out.ok()) return out.status();
  const int iters = 4096, threads = 256, fma_blocks = dev_.desc().sm_count * 8;
  auto fma_ms = time([&] { return harness_.Fma(out->ptr(), iters, fma_blocks, threads); }, 10);
  if (!fma_ms.ok()) return fma_ms.status();
  double flops = 2.0 * 8 * 16 * static_cast<double>(iters) * threads * fma_blocks;
  cal.fp32_gflops = flops / (*fma_ms * 1e-3) / 1e9;
  cal.details = {{"copy_bytes", static_cast<int64_t>(bytes)}, {"memcpy_gbps", memcpy_gbps},
                 {"copy_kernel_gbps", kernel_gbps}, {"fma_ms", *fma_ms}, {"fma_flops", flops},
                 {"method", "median of 20 (copy) / 10 (fma) event-timed repetitions after 2 warm-ups"}};
  // The L2 layout is a report; the calibration stands without it.
  auto l2 = MeasureL2Layout(dev_, harness_, src->ptr(), dst->ptr(), bytes,
                            [&](const std::function<Status()>& enqueue, int reps) { return time(enqueue, reps); });
  cal.details["l2"] = l2.ok() ? *l2 : nlohmann::json{{"error", l2.error()}};
  if (!l2.ok() && IsStickyError(d.cuCtxSynchronize())) {
    // The copy and FMA figures stand; the worker exits after replying (worker_main), and
    // the pool starts a new one (the "context_lost" flag).
    MarkContextLost();
    cal.details["l2"]["context_lost"] = true;
  }
  return cal;
}

}  // namespace kevolve::gpu

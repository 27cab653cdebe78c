// Launch and correctness rungs on the worker's GPU.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "gpu_eval.h"

namespace kevolve::gpu {

namespace {

uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

DType BufType(const BufferDesc& b) { return ParseDType(b.dtype).value_or(DType::kF32); }

double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The arguments in interface order: buffers, sizes (int), scalars, scratch.
void PackArgs(const EvalRequest& req, const ShapeJob& shape, const std::vector<CUdeviceptr>& bufs,
              const std::vector<CUdeviceptr>& scratch, ArgPack* args) {
  for (CUdeviceptr p : bufs) args->Add(p);
  for (int64_t s : shape.sizes) args->Add(static_cast<int>(s));
  for (const auto& sc : req.scalars) {
    if (sc.type == "i32") args->Add(static_cast<int>(sc.value));
    else args->Add(static_cast<float>(sc.value));
  }
  for (CUdeviceptr p : scratch) args->Add(p);
}

}  // namespace

Result<std::shared_ptr<Loaded>> Evaluator::Load(const ModuleImage& img) {
  auto m = dev_.Load(img.cubin);
  if (!m.ok()) return m.status();
  auto loaded = std::make_shared<Loaded>();
  loaded->module = std::move(*m);
  for (const auto& [entry, symbol] : img.symbols) {
    CUfunction f = nullptr;
    if (Status s = dev_.Check(dev_.drv().cuModuleGetFunction(&f, loaded->module.get(), symbol.c_str()),
                              "cuModuleGetFunction");
        !s.ok())
      return Status::Error("entry '" + entry + "' (symbol " + symbol + "): " + s.message());
    loaded->fns[entry] = f;
  }
  return loaded;
}

Fault Evaluator::CheckResources(const Loaded& mod, const std::vector<LaunchDesc>& launches) {
  const auto& d = dev_.drv();
  for (const auto& l : launches) {
    auto it = mod.fns.find(l.entry);
    if (it == mod.fns.end()) return {CUDA_ERROR_NOT_FOUND, "bad_launch", "no entry '" + l.entry + "' in the module"};
    int max_threads = 0, static_smem = 0, regs = 0;
    d.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, it->second);
    d.cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, it->second);
    d.cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, it->second);
    int64_t threads = l.block[0] * l.block[1] * l.block[2];
    if (threads > max_threads)
      return {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "resources",
              l.entry + ": block of " + std::to_string(threads) + " threads, but with " + std::to_string(regs) +
                  " registers per thread the kernel allows at most " + std::to_string(max_threads)};
    int64_t optin = dev_.desc().smem_per_block_optin;
    if (l.smem + static_smem > optin)
      return {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "resources",
              l.entry + ": " + std::to_string(l.smem) + " bytes of dynamic + " + std::to_string(static_smem) +
                  " bytes of static shared memory exceed the device's " + std::to_string(optin) + " per block"};
    // Without the opt-in a block may use 48 KiB in all, static included: 48 KiB of dynamic
    // shared memory plus any static needs the attribute too.
    int64_t& raised = mod.smem_limit[l.entry];
    if (l.smem + static_smem > 48 * 1024 && l.smem > raised) {
      CUresult r = d.cuFuncSetAttribute(it->second, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        static_cast<int>(l.smem));
      if (r != CUDA_SUCCESS) return {r, "resources", l.entry + ": " + dev_.Check(r, "cuFuncSetAttribute").message()};
      raised = l.smem;
    }
    // Clusters of more than 8 blocks (up to 16 on Hopper) are "non-portable": the kernel
    // must opt in before the launch, or cuLaunchKernelEx refuses them.
    if (l.cluster[0] * std::max<int64_t>(1, l.cluster[1]) * std::max<int64_t>(1, l.cluster[2]) > 8) {
      CUresult r = d.cuFuncSetAttribute(it->second, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
      if (r != CUDA_SUCCESS) return {r, "resources", l.entry + ": " + dev_.Check(r, "cuFuncSetAttribute(non-portable cluster size)").message()};
    }
  }
  return {};
}

Fault Evaluator::Enqueue(const Loaded& mod, const std::vector<LaunchDesc>& launches, ArgPack& args) {
  const auto& d = dev_.drv();
  for (const auto& l : launches) {
    CUfunction f = mod.fns.at(l.entry);
    CUresult r;
    if (l.cluster[0] > 0) {
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
      attr.value.clusterDim.y = static_cast<unsigned>(l.cluster[1]);
      attr.value.clusterDim.z = static_cast<unsigned>(l.cluster[2]);
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      r = d.cuLaunchKernelEx(&cfg, f, args.ptrs(), nullptr);
    } else {
      r = d.cuLaunchKernel(f, static_cast<unsigned>(l.grid[0]), static_cast<unsigned>(l.grid[1]),
                           static_cast<unsigned>(l.grid[2]), static_cast<unsigned>(l.block[0]),
                           static_cast<unsigned>(l.block[1]), static_cast<unsigned>(l.block[2]),
                           static_cast<unsigned>(l.smem), dev_.stream(), args.ptrs(), nullptr);
    }
    if (r != CUDA_SUCCESS) {
      Fault f2{r, FaultReason(r), dev_.Check(r, ("cuLaunchKernel(" + l.entry + ")").c_str()).message()};
      f2.sticky = IsStickyError(r);
      if (f2.sticky) MarkContextLost();
      return f2;
    }
  }
  return {};
}

Fault Evaluator::RunSequence(const Loaded& mod, const std::vector<LaunchDesc>& launches, ArgPack& args,
                             double timeout_ms, double* ms) {
  auto start = dev_.NewEvent();
  auto stop = dev_.NewEvent();
  if (!start.ok() || !stop.ok()) return {CUDA_ERROR_UNKNOWN, "crashed", "cuEventCreate failed", true};
  dev_.drv().cuEventRecord(start->get(), dev_.stream());
  Fault f = Enqueue(mod, launches, args);
  if (!f.ok()) return f;
  dev_.drv().cuEventRecord(stop->get(), dev_.stream());
  CUresult code;
  dev_.WaitEvent(stop->get(), timeout_ms, &code);
  if (code == CUDA_ERROR_NOT_READY || IsStickyError(code)) MarkContextLost();
  if (code == CUDA_ERROR_NOT_READY)
    return {code, "timeout",
            "the launch sequence ran past its watchdog limit of " + std::to_string(static_cast<int64_t>(timeout_ms)) +
                " ms (an infinite loop, or far slower than the reference)",
            true};
  if (code != CUDA_SUCCESS)
    return {code, FaultReason(code), dev_.Check(code, "kernel execution").message(), IsStickyError(code)};
  if (ms) {
    float t = 0;
    dev_.drv().cuEventElapsedTime(&t, start->get(), stop->get());
    *ms = t;
  }
  return {};
}

Fault Evaluator::CheckShape(const EvalRequest& req, size_t si, const Loaded& cand, const Loaded& ref,
                            CompareMetrics* metrics, nlohmann::json* shape_json, double* ref_ms) {
  const ShapeJob& shape = req.check[si];
  const auto& d = dev_.drv();
  CUstream st = dev_.stream();
  auto fail = [](const std::string& reason, const std::string& log) { return Fault{CUDA_ERROR_UNKNOWN, reason, log}; };
  if (!shape.unsupported.empty()) return fail("unsupported_shape", shape.label + ": " + shape.unsupported);

  // Buffers with their guard zones; reference outputs are f64 without guards.
  std::vector<Buffer> bufs, ref_out, scratch, ref_scratch;
  std::vector<CUdeviceptr> cand_ptrs, ref_ptrs, scratch_ptrs, ref_scratch_ptrs;
  for (size_t b = 0; b < req.buffers.size(); ++b) {
    size_t bytes = static_cast<size_t>(shape.elements[b]) * DTypeSize(BufType(req.buffers[b]));
    auto buf = dev_.Alloc(bytes + kGuardBytes);
    if (!buf.ok()) return fail("resources", buf.error());
    cand_ptrs.push_back(buf->ptr());
    if (req.buffers[b].output) {
      auto r = dev_.Alloc(static_cast<size_t>(shape.elements[b]) * sizeof(double));
      if (!r.ok()) return fail("resources", r.error());
      ref_ptrs.push_back(r->ptr());
      ref_out.push_back(std::move(*r));
    } else {
      ref_ptrs.push_back(buf->ptr());
    }
    bufs.push_back(std::move(*buf));
  }
  for (const auto& s : shape.scratch) {
    auto buf = dev_.Alloc(static_cast<size_t>(s.bytes) + kGuardBytes);
    if (!buf.ok()) return fail("resources", buf.error());
    scratch_ptrs.push_back(buf->ptr());
    scratch.push_back(std::move(*buf));
  }
  for (const auto& s : shape.ref_scratch) {
    auto buf = dev_.Alloc(static_cast<size_t>(s.bytes));
    if (!buf.ok()) return fail("resources", buf.error());
    ref_scratch_ptrs.push_back(buf->ptr());
    ref_scratch.push_back(std::move(*buf));
  }
  ArgPack cand_args, ref_args;
  PackArgs(req, shape, cand_ptrs, scratch_ptrs, &cand_args);
  PackArgs(req, shape, ref_ptrs, ref_scratch_ptrs, &ref_args);

  DType out_type = DType::kF32;
  std::vector<std::string> first_outputs;  // draw 0's outputs, for the determinism repeat
  std::vector<std::string> reuse_outputs;  // draw `rd`'s outputs, for the scratch reuse runs
  int64_t guard_hits = 0, inputs_written = 0, nondet = 0, reuse_diff = 0;
  double worst_ref_ms = 0;
  nlohmann::json draws = nlohmann::json::array();
  // With `zeroed` scratch, two more runs after the repeat, on the inputs of draw `rd` (not
  // the repeat's, so that a kernel reading what the previous launch left in its scratch,
  // or replaying a stored result, gives a different output), with the scratch as the
  // previous run left it. Two, so that state alternating between launches (two banks
  // indexed by a launch epoch, say) comes back to a bank used before. Each must match
  // draw `rd`'s output. The scratch is zeroed once, at allocation, by a caller; the
  // kernel must leave it ready for its next launch.
  const bool any_zeroed =
      std::any_of(shape.scratch.begin(), shape.scratch.end(), [](const ScratchDesc& s) { return s.zeroed; });
  const int rd = req.draws >= 2 ? req.draws - 1 : 0;
  const int last = req.draws + (any_zeroed ? 2 : 0);
  std::vector<uint64_t> input_hash(req.buffers.size(), 0);
  std::vector<std::string> host(req.buffers.size());
  for (int draw = 0; draw <= last; ++draw) {
    bool repeat = draw == req.draws;  // identical inputs to draw 0
    bool reuse = draw > req.draws;    // draw rd's inputs, no scratch reset
    uint64_t seed = Mix(req.seed ^ Mix(si * 1000003ull + (repeat ? 0 : reuse ? rd : draw)));
    std::mt19937_64 rng(seed);
    for (size_t b = 0; b < req.buffers.size(); ++b) {
      const BufferDesc& bd = req.buffers[b];
      size_t bytes = static_cast<size_t>(shape.elements[b]) * DTypeSize(BufType(bd));
      d.cuMemsetD8Async(cand_ptrs[b] + bytes, kGuardByte, kGuardBytes, st);
      if (bd.output) continue;
      double scale = std::uniform_real_distribution<double>(bd.scale_lo, std::max(bd.scale_lo, bd.scale_hi))(rng);
      double offset = std::uniform_real_distribution<double>(bd.offset_lo, std::max(bd.offset_lo, bd.offset_hi))(rng);
      if (Status s = harness_.Fill(cand_ptrs[b], shape.elements[b], BufType(bd), Mix(seed + b), bd.dist == "normal",
                                   static_cast<float>(scale), static_cast<float>(offset));
          !s.ok())
        return fail("crashed", s.message());
    }
    for (size_t k = 0; k < scratch.size(); ++k) {
      // The guard zone lies past the scratch's bytes: re-arming it leaves them as they are.
      if (!reuse) d.cuMemsetD8Async(scratch_ptrs[k], shape.scratch[k].zeroed ? 0 : kPoisonByte, shape.scratch[k].bytes, st);
      d.cuMemsetD8Async(scratch_ptrs[k] + shape.scratch[k].bytes, kGuardByte, kGuardBytes, st);
    }
    // Input hashes before anything runs on them.
    if (Status s = dev_.Check(d.cuStreamSynchronize(st), "cuStreamSynchronize"); !s.ok()) return fail("crashed", s.message());
    for (size_t b = 0; b < req.buffers.size(); ++b) {
      if (req.buffers[b].output) continue;
      host[b].resize(static_cast<size_t>(shape.elements[b]) * DTypeSize(BufType(req.buffers[b])));
      d.cuMemcpyDtoH(host[b].data(), cand_ptrs[b], host[b].size());
      input_hash[b] = HashBytes(host[b].data(), host[b].size());
    }
    // The reference on the same inputs (not for the repeat or the reuse runs: their
    // outputs are compared with draw 0's and draw rd's).
    if (!repeat && !reuse) {
      double ms = 0;
      Fault rf = RunSequence(ref, shape.ref_launches, ref_args, std::max(req.launch_timeout_ms, 60000.0), &ms);
      if (!rf.ok()) {
        rf.log = "the reference failed (a harness or spec bug): " + rf.log;
        rf.reason = "reference_failed";
        return rf;
      }
      worst_ref_ms = std::max(worst_ref_ms, ms);
    }
    // The candidate, on poisoned outputs.
    for (size_t b = 0; b < req.buffers.size(); ++b) {
      if (!req.buffers[b].output) continue;
      size_t bytes = static_cast<size_t>(shape.elements[b]) * DTypeSize(BufType(req.buffers[b]));
      d.cuMemsetD8Async(cand_ptrs[b], kPoisonByte, bytes, st);
    }
    double limit = std::max(req.launch_timeout_ms, req.timeout_factor * worst_ref_ms);
    Fault f = RunSequence(cand, shape.launches, cand_args, limit, nullptr);
    if (!f.ok()) {
      f.log = shape.label + (reuse ? " (run again, without re-zeroing its `zeroed` scratch): " : ": ") + f.log;
      return f;
    }
    // Judge: guards, inputs unchanged, outputs against the reference.
    nlohmann::json dj = {
        {"draw", reuse ? "scratch_reuse_" + std::to_string(draw - req.draws) : repeat ? "repeat" : std::to_string(draw)}};
    std::string guard(kGuardBytes, '\0');
    auto check_guard = [&](CUdeviceptr end) {
      d.cuMemcpyDtoH(guard.data(), end, kGuardBytes);
      guard_hits += GuardViolations(reinterpret_cast<const uint8_t*>(guard.data()), kGuardBytes);
    };
    for (size_t b = 0; b < req.buffers.size(); ++b) {
      size_t bytes = static_cast<size_t>(shape.elements[b]) * DTypeSize(BufType(req.buffers[b]));
      check_guard(cand_ptrs[b] + bytes);
      if (!req.buffers[b].output) {
        d.cuMemcpyDtoH(host[b].data(), cand_ptrs[b], bytes);
        if (HashBytes(host[b].data(), bytes) != input_hash[b]) ++inputs_written;
      }
    }
    for (size_t k = 0; k < scratch.size(); ++k) check_guard(scratch_ptrs[k] + shape.scratch[k].bytes);
    size_t out_index = 0;
    for (size_t b = 0; b < req.buffers.size(); ++b) {
      if (!req.buffers[b].output) continue;
      out_type = BufType(req.buffers[b]);
      size_t n = static_cast<size_t>(shape.elements[b]);
      std::string out(n * DTypeSize(out_type), '\0');
      d.cuMemcpyDtoH(out.data(), cand_ptrs[b], out.size());
      if (repeat) {
        nondet += CountDifferentElements(out.data(), first_outputs[out_index].data(), static_cast<int64_t>(n),
                                         DTypeSize(out_type));
      } else if (reuse) {
        // Bit for bit against draw rd; an op allowed to vary between runs is held to its
        // tolerance around draw rd instead (elements outside it, unwritten or non-finite).
        const std::string& want = reuse_outputs[out_index];
        if (req.deterministic) {
          reuse_diff += CountDifferentElements(out.data(), want.data(), static_cast<int64_t>(n), DTypeSize(out_type));
        } else {
          std::vector<double> first(n);
          for (size_t i = 0; i < n; ++i) first[i] = LoadAsDouble(want.data() + i * DTypeSize(out_type), out_type);
          reuse_diff += CompareOutputs(out.data(), out_type, first.data(), static_cast<int64_t>(n), req.tolerance).mismatches;
        }
      } else {
        std::vector<double> r(n);
        d.cuMemcpyDtoH(r.data(), ref_ptrs[b], n * sizeof(double));
        CompareMetrics m = CompareOutputs(out.data(), out_type, r.data(), static_cast<int64_t>(n), req.tolerance);
        dj[req.buffers[b].name] = m.ToJson();
        if (m.worst_index >= 0 && (metrics->worst_index < 0 || m.max_abs >= metrics->max_abs)) {
          (*shape_json)["worst"] = {{"buffer", req.buffers[b].name}, {"draw", draw}, {"index", m.worst_index},
                                    {"out", m.ToJson()["worst"]["out"]}, {"ref", m.worst_ref}};
        }
        MergeMetrics(metrics, m);
        if (any_zeroed && draw == rd) reuse_outputs.push_back(out);
        if (draw == 0) first_outputs.push_back(std::move(out));
      }
      ++out_index;
    }
    draws.push_back(dj);
  }
  *ref_ms = worst_ref_ms;
  (*shape_json)["shape"] = shape.label;
  (*shape_json)["guard_violations"] = guard_hits;
  (*shape_json)["inputs_written"] = inputs_written;
  (*shape_json)["nondeterministic"] = nondet;
  if (any_zeroed) (*shape_json)["scratch_reuse_diff"] = reuse_diff;
  (*shape_json)["draws"] = draws;
  (*shape_json)["ref_ms"] = worst_ref_ms;
  return {};
}

EvalResult Evaluator::Run(const EvalRequest& req) {
  EvalResult res;
  res.id = req.id;
  res.device_uuid = dev_.desc().uuid;
  auto t0 = std::chrono::steady_clock::now();
  RungResult launch{"launch", false, "", nlohmann::json::object(), "", 0};
  auto finish_fault = [&](RungResult& rung, const Fault& f) {
    rung.ok = false;
    rung.reason = f.reason;
    rung.log = f.log;
    rung.duration_ms = Ms(t0);
    res.rungs.push_back(rung);
    res.context_lost = f.sticky;
    return res;
  };

  auto cand = Load(req.candidate);
  if (!cand.ok()) return finish_fault(launch, {CUDA_ERROR_INVALID_IMAGE, "load", "loading the CUBIN: " + cand.error()});
  std::shared_ptr<Loaded> ref;
  if (auto it = ref_cache_.find(req.reference.hash); it != ref_cache_.end()) {
    ref = it->second;
  } else {
    auto r = Load(req.reference);
    if (!r.ok()) return finish_fault(launch, {CUDA_ERROR_INVALID_IMAGE, "reference_failed", "reference: " + r.error()});
    ref = *r;
    ref_cache_[req.reference.hash] = ref;
  }
  for (const auto* shapes : {&req.check, &req.tune}) {
    for (const auto& shape : *shapes) {
      Fault f = CheckResources(**cand, shape.launches);
      if (!f.ok()) {
        f.log = "shape " + shape.label + ": " + f.log;
        return finish_fault(launch, f);
      }
    }
  }

  // Correctness, shape by shape; a launch fault stops everything.
  RungResult corr{"correctness", false, "", nlohmann::json::object(), "", 0};
  auto tc = std::chrono::steady_clock::now();
  CompareMetrics total;
  nlohmann::json shapes = nlohmann::json::array();
  int64_t guard = 0, written = 0, nondet = 0, reuse_diff = 0;
  std::string first_bad, first_reuse_bad;
  for (size_t si = 0; si < req.check.size(); ++si) {
    nlohmann::json sj = nlohmann::json::object();
    double ref_ms = 0;
    CompareMetrics m;
    Fault f = CheckShape(req, si, **cand, *ref, &m, &sj, &ref_ms);
    if (!f.ok()) {
      if (f.reason == "unsupported_shape" || f.reason == "reference_failed") return finish_fault(corr, f);
      return finish_fault(launch, f);
    }
    guard += sj["guard_violations"].get<int64_t>();
    written += sj["inputs_written"].get<int64_t>();
    nondet += sj["nondeterministic"].get<int64_t>();
    int64_t rd = sj.value("scratch_reuse_diff", int64_t{0});
    if (rd > 0 && first_reuse_bad.empty()) first_reuse_bad = req.check[si].label;
    reuse_diff += rd;
    if (!m.pass && first_bad.empty()) first_bad = req.check[si].label;
    sj["metrics"] = m.ToJson();
    shapes.push_back(sj);
    if (total.elements == 0) total = m;
    else MergeMetrics(&total, m);
  }
  launch.ok = true;
  launch.metrics = {{"launches", static_cast<int64_t>(req.check.empty() ? 0 : req.check[0].launches.size())},
                    {"shapes", static_cast<int64_t>(req.check.size())}};
  // Resource usage as the driver sees the loaded kernels (independent of ptxas' log).
  nlohmann::json res_json = nlohmann::json::object();
  for (const auto& [entry, fn] : (*cand)->fns) {
    int regs = 0, smem = 0, local = 0, max_threads = 0;
    dev_.drv().cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    dev_.drv().cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
    dev_.drv().cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
    dev_.drv().cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
    res_json[entry] = {{"regs", regs}, {"smem_static", smem}, {"local_bytes", local}, {"max_threads", max_threads}};
  }
  launch.metrics["resources"] = res_json;
  launch.duration_ms = Ms(tc);
  res.rungs.push_back(launch);

  corr.metrics = {{"shapes", static_cast<int64_t>(req.check.size())},
                  {"draws", req.draws},
                  {"max_abs", total.max_abs},
                  {"max_rel", total.max_rel},
                  {"rmse", total.rmse},
                  {"psnr", total.psnr},
                  {"cossim", total.cossim},
                  {"mismatches", total.mismatches},
                  {"unwritten", total.unwritten},
                  {"nonfinite", total.nonfinite},
                  {"guard_violations", guard},
                  {"inputs_written", written},
                  {"nondeterministic", nondet},
                  {"scratch_reuse_diff", reuse_diff},
                  {"per_shape", shapes}};
  corr.ok = true;
  auto bad = [&](const std::string& reason, const std::string& log) {
    if (corr.ok) {
      corr.ok = false;
      corr.reason = reason;
    }
    corr.log += (corr.log.empty() ? "" : "\n") + log;
  };
  if (guard > 0) bad("out_of_bounds", std::to_string(guard) + " guard bytes after the buffers were overwritten (an out-of-bounds write)");
  if (written > 0) bad("input_written", "an input buffer changed during the launch (" + std::to_string(written) + " times)");
  if (total.unwritten > 0) bad("unwritten", std::to_string(total.unwritten) + " output elements were never written (still poison)");
  if (total.nonfinite > 0) bad("nonfinite", std::to_string(total.nonfinite) + " outputs are NaN/Inf where the reference is finite");
  if (nondet > 0) {
    if (req.deterministic) bad("nondeterministic", std::to_string(nondet) + " output elements differ bit for bit between two runs on identical inputs");
    else corr.log += (corr.log.empty() ? "" : "\n") + std::string("note: output is not bitwise reproducible");
  }
  if (reuse_diff > (req.deterministic ? 0 : req.tolerance.max_mismatch))
    bad("scratch_not_reset", std::to_string(reuse_diff) + " output elements differ when the launch sequence runs twice more, "
                             "on other inputs, without re-zeroing its `zeroed` scratch (first such shape " + first_reuse_bad +
                             "): the kernel must leave that scratch ready for the next launch (zero, or a state it handles)");
  if (total.mismatches > req.tolerance.max_mismatch || total.cossim < req.tolerance.min_cossim)
    bad("mismatch", std::to_string(total.mismatches) + " elements outside atol + rtol*|ref| (first failing shape " +
                        first_bad + "), cossim " + std::to_string(total.cossim));
  for (const auto& s : shapes) {
    if (s.contains("worst")) {
      corr.metrics["worst"] = s["worst"];
      corr.metrics["worst"]["shape"] = s["shape"];
      if (!s["metrics"]["pass"].get<bool>()) break;
    }
  }
  corr.duration_ms = Ms(tc);
  res.rungs.push_back(corr);
  if (!corr.ok || req.skip_timing) return res;

  RungResult timing{"timing", true, "", nlohmann::json::object(), "", 0};
  auto tt = std::chrono::steady_clock::now();
  nlohmann::json tj = nlohmann::json::array();
  for (const auto& shape : req.tune) {
    ShapeTiming st;
    Fault f = TimeShape(req, shape, **cand, &st);
    if (!f.ok()) {
      timing.duration_ms = Ms(tt);
      if (f.reason == "unsupported_shape") return finish_fault(timing, f);
      f.log = shape.label + ": " + f.log;
      return finish_fault(timing, f);
    }
    tj.push_back({{"shape", st.shape}, {"median_us", st.median_us}, {"p10_us", st.p10_us}, {"p90_us", st.p90_us},
                  {"n", st.n}, {"rse", st.protocol.value("rse", 0.0)}});
    res.timings.push_back(std::move(st));
  }
  timing.metrics = {{"shapes", tj}, {"protocol", req.timing.ToJson()}};
  timing.duration_ms = Ms(tt);
  res.rungs.push_back(timing);
  return res;
}

}  // namespace kevolve::gpu

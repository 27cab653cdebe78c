#include "kevolve/evaluators/request_builder.h"

namespace kevolve {

namespace {

ModuleImage Image(const CompiledKernel& k) {
  ModuleImage m;
  m.hash = k.binary->hash;
  m.cubin = k.binary->cubin;
  m.symbols = k.binary->lowered;
  return m;
}

std::vector<LaunchDesc> ToDescs(const std::vector<LaunchConfig>& v) {
  std::vector<LaunchDesc> out;
  for (const auto& l : v) out.push_back({l.entry, l.grid, l.block, l.smem, l.cluster});
  return out;
}

// Resolves one kernel's launches and scratch at `env`; an unmet requirement of the
// candidate marks the shape unsupported rather than failing the build.
Status Resolve(const CompiledKernel& k, const Env& env, std::vector<LaunchDesc>* launches,
               std::vector<ScratchDesc>* scratch, std::string* unsupported) {
  if (Status s = CheckRequirements(*k.source, k.params, env); !s.ok()) {
    *unsupported = s.message();
    return Status::Ok();
  }
  auto l = ResolveLaunches(*k.source, k.params, env);
  if (!l.ok()) return l.status();
  *launches = ToDescs(*l);
  auto sc = ResolveScratch(*k.source, k.params, env);
  if (!sc.ok()) return sc.status();
  for (size_t i = 0; i < sc->size(); ++i) scratch->push_back({(*sc)[i], k.source->scratch[i].zeroed});
  return Status::Ok();
}

Result<ShapeJob> MakeJob(const OpSpec& op, DType dtype, const CompiledKernel& cand, const CompiledKernel& ref,
                         const Shape& shape, int num_sms, bool with_ref) {
  ShapeJob job;
  job.label = shape.label;
  for (const auto& s : op.sizes) job.sizes.push_back(shape.sizes.at(s));
  for (const auto& b : op.buffers) {
    auto n = op.Elements(b, shape, dtype);
    if (!n.ok()) return n.status();
    job.elements.push_back(*n);
  }
  Env env = op.MakeEnv(shape, dtype);
  env["num_sms"] = num_sms;
  auto bytes = op.cost_bytes.Eval(env);
  auto flops = op.cost_flops.Eval(env);
  if (!bytes.ok()) return bytes.status();
  if (!flops.ok()) return flops.status();
  job.bytes = static_cast<double>(*bytes);
  job.flops = static_cast<double>(*flops);
  if (Status s = Resolve(cand, env, &job.launches, &job.scratch, &job.unsupported); !s.ok())
    return Status::Error(shape.label + ": " + s.message());
  if (with_ref) {
    std::string ref_unsupported;
    if (Status s = Resolve(ref, env, &job.ref_launches, &job.ref_scratch, &ref_unsupported); !s.ok())
      return Status::Error("reference at " + shape.label + ": " + s.message());
    if (!ref_unsupported.empty()) return Status::Error("reference does not support " + shape.label);
  }
  return job;
}

}  // namespace

Result<EvalRequest> BuildEvalRequest(const OpSpec& op, DType dtype, const CompiledKernel& candidate,
                                     const CompiledKernel& reference, const std::vector<Shape>& check,
                                     const std::vector<Shape>& tune, int num_sms, const EvalOptions& o) {
  EvalRequest r;
  r.op = op.name;
  r.dtype = DTypeName(dtype);
  r.size_names = op.sizes;
  for (const auto& b : op.buffers) {
    BufferDesc d;
    d.name = b.name;
    d.output = b.role == BufferRole::kOut;
    d.dtype = DTypeName(op.BufferDType(b, dtype));
    d.dist = b.dist.kind;
    d.scale_lo = b.dist.scale_lo;
    d.scale_hi = b.dist.scale_hi;
    d.offset_lo = b.dist.offset_lo;
    d.offset_hi = b.dist.offset_hi;
    r.buffers.push_back(d);
  }
  for (const auto& s : op.scalars) r.scalars.push_back({s.name, DTypeName(s.type), s.value});
  r.deterministic = op.deterministic;
  auto tol = op.tolerances.find(dtype);
  if (tol != op.tolerances.end())
    r.tolerance = {tol->second.atol, tol->second.rtol, tol->second.min_cossim, tol->second.max_mismatch};
  r.candidate = Image(candidate);
  r.reference = Image(reference);
  for (const auto& s : check) {
    auto job = MakeJob(op, dtype, candidate, reference, s, num_sms, true);
    if (!job.ok()) return job.status();
    r.check.push_back(std::move(*job));
  }
  for (const auto& s : tune) {
    auto job = MakeJob(op, dtype, candidate, reference, s, num_sms, false);
    if (!job.ok()) return job.status();
    r.tune.push_back(std::move(*job));
  }
  r.seed = o.seed;
  r.draws = std::max(2, o.draws);
  r.timing = o.timing;
  r.launch_timeout_ms = o.launch_timeout_ms;
  r.timeout_factor = o.timeout_factor;
  r.skip_timing = o.skip_timing;
  return r;
}

}  // namespace kevolve

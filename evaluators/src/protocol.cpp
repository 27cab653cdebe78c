// Messages <-> MessagePack, and the typed conversions. Field names on the wire are the
// C++ member names. Binary fields (ModuleImage::cubin) travel as MessagePack bin, so a
// CUBIN is neither base64'd nor truncated at a NUL. Readers also accept a string there,
// for messages built from plain JSON.
//
// An "error" message (worker -> coordinator) carries its text in "message".
#include "kevolve/evaluators/protocol.h"

#include <cstdint>
#include <limits>
#include <utility>

namespace kevolve {

using json = nlohmann::json;

namespace {

// ---- Writing -----------------------------------------------------------------------

json ToJson(const LaunchDesc& l) {
  return {{"entry", l.entry}, {"grid", l.grid}, {"block", l.block}, {"smem", l.smem}, {"cluster", l.cluster}};
}
json ToJson(const ScratchDesc& s) { return {{"bytes", s.bytes}, {"zeroed", s.zeroed}}; }
json ToJson(const BufferDesc& b) {
  return {{"name", b.name},         {"output", b.output},     {"dtype", b.dtype},
          {"dist", b.dist},         {"scale_lo", b.scale_lo}, {"scale_hi", b.scale_hi},
          {"offset_lo", b.offset_lo}, {"offset_hi", b.offset_hi}};
}
json ToJson(const ScalarDesc& s) { return {{"name", s.name}, {"type", s.type}, {"value", s.value}}; }
json ToJson(const Tolerances& t) {
  return {{"atol", t.atol}, {"rtol", t.rtol}, {"min_cossim", t.min_cossim}, {"max_mismatch", t.max_mismatch}};
}
json ToJson(const ModuleImage& m) {
  return {{"hash", m.hash},
          {"cubin", json::binary(std::vector<std::uint8_t>(m.cubin.begin(), m.cubin.end()))},
          {"symbols", m.symbols}};
}
json ToJson(const RungResult& r) {
  return {{"name", r.name},       {"ok", r.ok},   {"reason", r.reason},
          {"metrics", r.metrics}, {"log", r.log}, {"duration_ms", r.duration_ms}};
}
json ToJson(const ShapeTiming& t) {
  return {{"shape", t.shape}, {"median_us", t.median_us}, {"p10_us", t.p10_us},     {"p90_us", t.p90_us},
          {"n", t.n},         {"samples_us", t.samples_us}, {"protocol", t.protocol}, {"bytes", t.bytes},
          {"flops", t.flops}};
}
json ToJson(const ShapeJob& s);
template <typename T>
json List(const std::vector<T>& v) {
  json a = json::array();
  for (const T& x : v) a.push_back(ToJson(x));
  return a;
}
json ToJson(const ShapeJob& s) {
  return {{"label", s.label},
          {"sizes", s.sizes},
          {"elements", s.elements},
          {"launches", List(s.launches)},
          {"scratch", List(s.scratch)},
          {"ref_launches", List(s.ref_launches)},
          {"ref_scratch", List(s.ref_scratch)},
          {"bytes", s.bytes},
          {"flops", s.flops},
          {"unsupported", s.unsupported}};
}

// ---- Reading -----------------------------------------------------------------------
// Parse(v, path, err, out) checks v's type before every access, so nothing throws. On
// failure it returns false, leaves *out unchanged and records in *err (first failure
// only) what was wrong, naming the field by its path: "check[0].launches[1].grid".

void SetError(std::string* err, const std::string& msg) {
  if (err->empty()) *err = msg;
}
bool WrongType(const json& v, const std::string& path, std::string* err, const char* expected) {
  SetError(err, "field '" + path + "' has the wrong type: expected " + expected + ", got " + v.type_name());
  return false;
}

bool Parse(const json& v, const std::string& path, std::string* err, std::string* out) {
  if (!v.is_string()) return WrongType(v, path, err, "string");
  *out = v.get_ref<const std::string&>();
  return true;
}
bool Parse(const json& v, const std::string& path, std::string* err, bool* out) {
  if (!v.is_boolean()) return WrongType(v, path, err, "boolean");
  *out = v.get<bool>();
  return true;
}
bool Parse(const json& v, const std::string& path, std::string* err, int64_t* out) {
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())))
    return WrongType(v, path, err, "int64");
  *out = v.get<int64_t>();
  return true;
}
bool Parse(const json& v, const std::string& path, std::string* err, int* out) {
  int64_t x = 0;
  if (!Parse(v, path, err, &x)) return false;
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    return WrongType(v, path, err, "int32");
  *out = static_cast<int>(x);
  return true;
}
bool Parse(const json& v, const std::string& path, std::string* err, uint64_t* out) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    return WrongType(v, path, err, "unsigned integer");
  *out = v.get<uint64_t>();
  return true;
}
bool Parse(const json& v, const std::string& path, std::string* err, double* out) {
  if (!v.is_number()) return WrongType(v, path, err, "number");
  *out = v.get<double>();
  return true;
}
bool Parse(const json& v, const std::string&, std::string*, json* out) {
  *out = v;
  return true;
}
bool Parse(const json& v, const std::string& path, std::string* err, std::map<std::string, std::string>* out) {
  if (!v.is_object()) return WrongType(v, path, err, "object of strings");
  std::map<std::string, std::string> m;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (!Parse(*it, path + "." + it.key(), err, &m[it.key()])) return false;
  *out = std::move(m);
  return true;
}
bool Parse(const json& v, const std::string& path, std::string* err, std::array<int64_t, 3>* out) {
  if (!v.is_array() || v.size() != 3) return WrongType(v, path, err, "array of 3 integers");
  std::array<int64_t, 3> a{};
  for (size_t i = 0; i < 3; ++i)
    if (!Parse(v[i], path + "[" + std::to_string(i) + "]", err, &a[i])) return false;
  *out = a;
  return true;
}
// Structs, defined below.
bool Parse(const json& v, const std::string& path, std::string* err, LaunchDesc* out);
bool Parse(const json& v, const std::string& path, std::string* err, Tolerances* out);
bool Parse(const json& v, const std::string& path, std::string* err, ModuleImage* out);
bool Parse(const json& v, const std::string& path, std::string* err, TimingProtocol* out);
bool Parse(const json& v, const std::string& path, std::string* err, ScratchDesc* out);
bool Parse(const json& v, const std::string& path, std::string* err, BufferDesc* out);
bool Parse(const json& v, const std::string& path, std::string* err, ScalarDesc* out);
bool Parse(const json& v, const std::string& path, std::string* err, ShapeJob* out);
bool Parse(const json& v, const std::string& path, std::string* err, RungResult* out);
bool Parse(const json& v, const std::string& path, std::string* err, ShapeTiming* out);

template <typename T>
bool Parse(const json& v, const std::string& path, std::string* err, std::vector<T>* out) {
  if (!v.is_array()) return WrongType(v, path, err, "array");
  std::vector<T> items(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    if (!Parse(v[i], path + "[" + std::to_string(i) + "]", err, &items[i])) return false;
  *out = std::move(items);
  return true;
}

// Reads the fields of one object. Every field is attempted even after a failure, so a
// caller that tolerates bad fields (TimingProtocol::FromJson) keeps the good ones.
class Reader {
 public:
  Reader(const json& j, std::string path, std::string* err) : j_(j), path_(std::move(path)), err_(err) {
    if (!j_.is_object()) ok_ = WrongType(j_, path_.empty() ? "(message)" : path_, err_, "object");
  }
  template <typename T>
  Reader& Req(const char* key, T* out) { return Field(key, out, true); }
  template <typename T>
  Reader& Opt(const char* key, T* out) { return Field(key, out, false); }
  // Bytes: MessagePack bin, or a string.
  Reader& Bytes(const char* key, std::string* out, bool required) {
    const json* v = Find(key, required);
    if (v == nullptr) return *this;
    if (v->is_binary()) out->assign(v->get_binary().begin(), v->get_binary().end());
    else if (v->is_string()) *out = v->get_ref<const std::string&>();
    else ok_ = WrongType(*v, Path(key), err_, "binary");
    return *this;
  }
  bool ok() const { return ok_; }

 private:
  std::string Path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  const json* Find(const char* key, bool required) {
    if (!j_.is_object()) return nullptr;
    auto it = j_.find(key);
    if (it != j_.end()) return &*it;
    if (required) {
      SetError(err_, "missing field '" + Path(key) + "'");
      ok_ = false;
    }
    return nullptr;
  }
  template <typename T>
  Reader& Field(const char* key, T* out, bool required) {
    const json* v = Find(key, required);
    if (v != nullptr && !Parse(*v, Path(key), err_, out)) ok_ = false;
    return *this;
  }

  const json& j_;
  std::string path_;
  std::string* err_;
  bool ok_ = true;
};

// Parses into a copy and assigns it on success, so *out is untouched on failure.
template <typename T, typename Fill>
bool ParseStruct(const json& v, const std::string& path, std::string* err, T* out, Fill fill) {
  T t;
  Reader r(v, path, err);
  fill(r, t);
  if (!r.ok()) return false;
  *out = std::move(t);
  return true;
}

bool Parse(const json& v, const std::string& path, std::string* err, LaunchDesc* out) {
  return ParseStruct(v, path, err, out, [](Reader& r, LaunchDesc& l) {
    r.Req("entry", &l.entry).Opt("grid", &l.grid).Opt("block", &l.block).Opt("smem", &l.smem).Opt("cluster", &l.cluster);
  });
}
bool Parse(const json& v, const std::string& path, std::string* err, ScratchDesc* out) {
  return ParseStruct(v, path, err, out, [](Reader& r, ScratchDesc& s) { r.Req("bytes", &s.bytes).Opt("zeroed", &s.zeroed); });
}
bool Parse(const json& v, const std::string& path, std::string* err, BufferDesc* out) {
  return ParseStruct(v, path, err, out, [](Reader& r, BufferDesc& b) {
    r.Req("name", &b.name).Opt("output", &b.output).Req("dtype", &b.dtype).Opt("dist", &b.dist);
    r.Opt("scale_lo", &b.scale_lo).Opt("scale_hi", &b.scale_hi).Opt("offset_lo", &b.offset_lo).Opt("offset_hi", &b.offset_hi);
  });
}
bool Parse(const json& v, const std::string& path, std::string* err, ScalarDesc* out) {
  return ParseStruct(v, path, err, out,
                     [](Reader& r, ScalarDesc& s) { r.Req("name", &s.name).Req("type", &s.type).Req("value", &s.value); });
}
bool Parse(const json& v, const std::string& path, std::string* err, Tolerances* out) {
  return ParseStruct(v, path, err, out, [](Reader& r, Tolerances& t) {
    r.Opt("atol", &t.atol).Opt("rtol", &t.rtol).Opt("min_cossim", &t.min_cossim).Opt("max_mismatch", &t.max_mismatch);
  });
}
bool Parse(const json& v, const std::string& path, std::string* err, ModuleImage* out) {
  return ParseStruct(v, path, err, out, [](Reader& r, ModuleImage& m) {
    r.Opt("hash", &m.hash).Bytes("cubin", &m.cubin, true).Opt("symbols", &m.symbols);
  });
}
bool Parse(const json& v, const std::string& path, std::string* err, ShapeJob* out) {
  return ParseStruct(v, path, err, out, [](Reader& r, ShapeJob& s) {
    r.Req("label", &s.label).Opt("sizes", &s.sizes).Opt("elements", &s.elements).Opt("launches", &s.launches);
    r.Opt("scratch", &s.scratch).Opt("ref_launches", &s.ref_launches).Opt("ref_scratch", &s.ref_scratch);
    r.Opt("bytes", &s.bytes).Opt("flops", &s.flops).Opt("unsupported", &s.unsupported);
  });
}
// Field by field into *out (not a copy): FromJson keeps defaults for bad fields only.
bool Parse(const json& v, const std::string& path, std::string* err, TimingProtocol* out) {
  TimingProtocol& t = *out;
  Reader r(v, path, err);
  r.Opt("timer", &t.timer).Opt("warmup_reps", &t.warmup_reps).Opt("warmup_ms", &t.warmup_ms);
  r.Opt("min_reps", &t.min_reps).Opt("max_reps", &t.max_reps).Opt("batch", &t.batch);
  r.Opt("target_rse", &t.target_rse).Opt("max_ms_per_shape", &t.max_ms_per_shape).Opt("input_sets", &t.input_sets);
  r.Opt("flush_l2", &t.flush_l2).Opt("reset_persisting_l2", &t.reset_persisting_l2);
  return r.ok();
}
bool Parse(const json& v, const std::string& path, std::string* err, RungResult* out) {
  return ParseStruct(v, path, err, out, [](Reader& r, RungResult& x) {
    r.Req("name", &x.name).Req("ok", &x.ok).Opt("reason", &x.reason).Opt("metrics", &x.metrics);
    r.Opt("log", &x.log).Opt("duration_ms", &x.duration_ms);
  });
}
bool Parse(const json& v, const std::string& path, std::string* err, ShapeTiming* out) {
  return ParseStruct(v, path, err, out, [](Reader& r, ShapeTiming& t) {
    r.Req("shape", &t.shape).Opt("median_us", &t.median_us).Opt("p10_us", &t.p10_us).Opt("p90_us", &t.p90_us);
    r.Opt("n", &t.n).Opt("samples_us", &t.samples_us).Opt("protocol", &t.protocol).Opt("bytes", &t.bytes);
    r.Opt("flops", &t.flops);
  });
}

// Checks the type, then runs `fill` over the body; the error names the message type.
template <typename T, typename Fill>
Result<T> FromMessage(const Message& m, const char* type, Fill fill) {
  if (m.type != type) return Status::Error(std::string("expected a '") + type + "' message, got '" + m.type + "'");
  std::string err;
  T t;
  try {
    if (!ParseStruct(m.body, "", &err, &t, fill)) return Status::Error(std::string(type) + " message: " + err);
  } catch (const std::exception& e) {  // not expected: every access is type-checked first
    return Status::Error(std::string(type) + " message: " + e.what());
  }
  return t;
}

}  // namespace

nlohmann::json TimingProtocol::ToJson() const {
  return {{"timer", timer},       {"warmup_reps", warmup_reps},
          {"warmup_ms", warmup_ms}, {"min_reps", min_reps},
          {"max_reps", max_reps}, {"batch", batch},
          {"target_rse", target_rse}, {"max_ms_per_shape", max_ms_per_shape},
          {"input_sets", input_sets}, {"flush_l2", flush_l2},
          {"reset_persisting_l2", reset_persisting_l2}};
}

TimingProtocol TimingProtocol::FromJson(const nlohmann::json& j) {
  TimingProtocol t;
  std::string ignored;
  Parse(j, "timing", &ignored, &t);
  return t;
}

Message MakeMessage(const std::string& type, nlohmann::json body) {
  if (!body.is_object()) body = json{{"value", std::move(body)}};
  body["v"] = kProtocolVersion;
  body["type"] = type;
  return Message{type, std::move(body)};
}

std::string EncodeMessage(const Message& m) {
  json body = m.body.is_object() ? m.body : json{{"value", m.body}};
  body["v"] = kProtocolVersion;
  body["type"] = m.type;
  std::vector<std::uint8_t> bytes = json::to_msgpack(body);
  return std::string(bytes.begin(), bytes.end());
}

Result<Message> DecodeMessage(const std::string& bytes) {
  json body;
  try {
    body = json::from_msgpack(bytes);
  } catch (const json::exception& e) {
    return Status::Error(std::string("malformed message: ") + e.what());
  }
  if (!body.is_object()) return Status::Error("malformed message: not a map");
  auto v = body.find("v");
  if (v == body.end() || !v->is_number_integer()) return Status::Error("malformed message: no protocol version");
  if (v->get<int64_t>() != kProtocolVersion)
    return Status::Error("protocol version " + std::to_string(v->get<int64_t>()) + ", expected " +
                         std::to_string(kProtocolVersion));
  auto t = body.find("type");
  if (t == body.end() || !t->is_string()) return Status::Error("malformed message: no type");
  std::string type = t->get<std::string>();
  return Message{std::move(type), std::move(body)};
}

Message ToMessage(const EvalRequest& r) {
  return MakeMessage("eval", {{"id", r.id},
                              {"op", r.op},
                              {"dtype", r.dtype},
                              {"size_names", r.size_names},
                              {"buffers", List(r.buffers)},
                              {"scalars", List(r.scalars)},
                              {"deterministic", r.deterministic},
                              {"tolerance", ToJson(r.tolerance)},
                              {"candidate", ToJson(r.candidate)},
                              {"reference", ToJson(r.reference)},
                              {"check", List(r.check)},
                              {"tune", List(r.tune)},
                              {"seed", r.seed},
                              {"draws", r.draws},
                              {"timing", r.timing.ToJson()},
                              {"launch_timeout_ms", r.launch_timeout_ms},
                              {"timeout_factor", r.timeout_factor},
                              {"skip_timing", r.skip_timing}});
}

Message ToMessage(const EvalResult& r) {
  return MakeMessage("result", {{"id", r.id},
                                {"device_uuid", r.device_uuid},
                                {"rungs", List(r.rungs)},
                                {"timings", List(r.timings)},
                                {"context_lost", r.context_lost}});
}

Message ToMessage(const DeviceDesc& d) {
  return MakeMessage("hello_reply", {{"uuid", d.uuid},
                                     {"name", d.name},
                                     {"arch", d.arch},
                                     {"ordinal", d.ordinal},
                                     {"sm_count", d.sm_count},
                                     {"l2_bytes", d.l2_bytes},
                                     {"mem_bytes", d.mem_bytes},
                                     {"smem_per_block_optin", d.smem_per_block_optin},
                                     {"clock_khz", d.clock_khz},
                                     {"mem_clock_khz", d.mem_clock_khz}});
}

Message ToMessage(const Calibration& c) {
  return MakeMessage("calibration",
                     {{"uuid", c.uuid}, {"copy_gbps", c.copy_gbps}, {"fp32_gflops", c.fp32_gflops}, {"details", c.details}});
}

Result<EvalRequest> EvalRequestFromMessage(const Message& m) {
  return FromMessage<EvalRequest>(m, "eval", [](Reader& r, EvalRequest& q) {
    r.Req("id", &q.id).Opt("op", &q.op).Opt("dtype", &q.dtype).Opt("size_names", &q.size_names);
    r.Opt("buffers", &q.buffers).Opt("scalars", &q.scalars).Opt("deterministic", &q.deterministic);
    r.Opt("tolerance", &q.tolerance).Req("candidate", &q.candidate).Opt("reference", &q.reference);
    r.Opt("check", &q.check).Opt("tune", &q.tune).Opt("seed", &q.seed).Opt("draws", &q.draws);
    r.Opt("timing", &q.timing).Opt("launch_timeout_ms", &q.launch_timeout_ms);
    r.Opt("timeout_factor", &q.timeout_factor).Opt("skip_timing", &q.skip_timing);
  });
}

Result<EvalResult> EvalResultFromMessage(const Message& m) {
  return FromMessage<EvalResult>(m, "result", [](Reader& r, EvalResult& x) {
    r.Req("id", &x.id).Opt("device_uuid", &x.device_uuid).Req("rungs", &x.rungs).Opt("timings", &x.timings);
    r.Opt("context_lost", &x.context_lost);
  });
}

Result<DeviceDesc> DeviceDescFromMessage(const Message& m) {
  return FromMessage<DeviceDesc>(m, "hello_reply", [](Reader& r, DeviceDesc& d) {
    r.Req("uuid", &d.uuid).Opt("name", &d.name).Opt("arch", &d.arch).Opt("ordinal", &d.ordinal);
    r.Opt("sm_count", &d.sm_count).Opt("l2_bytes", &d.l2_bytes).Opt("mem_bytes", &d.mem_bytes);
    r.Opt("smem_per_block_optin", &d.smem_per_block_optin).Opt("clock_khz", &d.clock_khz);
    r.Opt("mem_clock_khz", &d.mem_clock_khz);
  });
}

Result<Calibration> CalibrationFromMessage(const Message& m) {
  return FromMessage<Calibration>(m, "calibration", [](Reader& r, Calibration& c) {
    r.Req("uuid", &c.uuid).Req("copy_gbps", &c.copy_gbps).Req("fp32_gflops", &c.fp32_gflops).Opt("details", &c.details);
  });
}

}  // namespace kevolve

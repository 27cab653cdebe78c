// Messages <-> MessagePack, and the typed conversions.
//
// Every struct's wire fields are listed once, in a Fields(visitor, struct) function; a
// Writer visitor turns the struct into JSON and a Reader visitor fills it from JSON, so
// the two directions cannot drift apart. Field names on the wire are the member names.
// Binary fields (ModuleImage::cubin) travel as MessagePack bin, so a CUBIN is neither
// base64'd nor cut at a NUL; readers also accept a string there, for plain JSON.
//
// An "error" message (worker -> coordinator) carries its text in "message".
#include "kevolve/evaluators/protocol.h"

#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace kevolve {

using json = nlohmann::json;

namespace {

class Reader;
class Writer;

// A struct with a field list (found by argument-dependent lookup through the visitor,
// which lives in this namespace).
template <typename T>
concept Record = requires(T& t) {
  Fields(std::declval<Writer&>(), t);
};

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// ---- Writing -----------------------------------------------------------------------

class Writer {
 public:
  template <typename T>
  Writer& Req(const char* key, const T& x) {
    j_[key] = Value(x);
    return *this;
  }
  template <typename T>
  Writer& Opt(const char* key, const T& x) {
    return Req(key, x);
  }
  Writer& Bytes(const char* key, const std::string& x, bool /*required*/) {
    j_[key] = json::binary(std::vector<std::uint8_t>(x.begin(), x.end()));
    return *this;
  }
  json Take() { return std::move(j_); }

  template <typename T>
  static json Value(const T& x) {
    if constexpr (Record<T>) {
      Writer w;
      Fields(w, const_cast<T&>(x));  // Fields is shared with Reader; a Writer only reads x
      return w.Take();
    } else if constexpr (IsVector<T>::value) {
      json a = json::array();
      for (const auto& e : x) a.push_back(Value(e));
      return a;
    } else {
      return json(x);
    }
  }

 private:
  json j_ = json::object();
};

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
bool Parse(const json& v, const std::string& /*path*/, std::string* /*err*/, json* out) {
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
template <typename T>
bool Parse(const json& v, const std::string& path, std::string* err, std::vector<T>* out);
template <Record T>
bool Parse(const json& v, const std::string& path, std::string* err, T* out);

// Reads the fields of one object. Every field is attempted even after a failure, so a
// caller that tolerates bad fields (TimingProtocol::FromJson) keeps the good ones.
class Reader {
 public:
  Reader(const json& j, std::string path, std::string* err) : j_(j), path_(std::move(path)), err_(err) {
    if (!j_.is_object()) ok_ = WrongType(j_, path_.empty() ? "(message)" : path_, err_, "object");
  }
  template <typename T>
  Reader& Req(const char* key, T& out) {
    return Field(key, out, true);
  }
  template <typename T>
  Reader& Opt(const char* key, T& out) {
    return Field(key, out, false);
  }
  Reader& Bytes(const char* key, std::string& out, bool required) {
    const json* v = Find(key, required);
    if (v == nullptr) return *this;
    if (v->is_binary())
      out.assign(v->get_binary().begin(), v->get_binary().end());
    else if (v->is_string())
      out = v->get_ref<const std::string&>();
    else
      ok_ = WrongType(*v, Path(key), err_, "binary");
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
  Reader& Field(const char* key, T& out, bool required) {
    const json* v = Find(key, required);
    if (v != nullptr && !Parse(*v, Path(key), err_, &out)) ok_ = false;
    return *this;
  }

  const json& j_;
  std::string path_;
  std::string* err_;
  bool ok_ = true;
};

template <typename T>
bool Parse(const json& v, const std::string& path, std::string* err, std::vector<T>* out) {
  if (!v.is_array()) return WrongType(v, path, err, "array");
  std::vector<T> items(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    if (!Parse(v[i], path + "[" + std::to_string(i) + "]", err, &items[i])) return false;
  *out = std::move(items);
  return true;
}
template <Record T>
bool Parse(const json& v, const std::string& path, std::string* err, T* out) {
  T t;
  Reader r(v, path, err);
  Fields(r, t);
  if (!r.ok()) return false;
  *out = std::move(t);
  return true;
}

// ---- The field lists ---------------------------------------------------------------
// Req: a reader refuses the message without it. Opt: a missing field keeps its default.

template <typename V>
void Fields(V& v, LaunchDesc& x) {
  v.Req("entry", x.entry).Opt("grid", x.grid).Opt("block", x.block).Opt("smem", x.smem).Opt("cluster", x.cluster);
}
template <typename V>
void Fields(V& v, ScratchDesc& x) {
  v.Req("bytes", x.bytes).Opt("zeroed", x.zeroed);
}
template <typename V>
void Fields(V& v, BufferDesc& x) {
  v.Req("name", x.name).Opt("output", x.output).Req("dtype", x.dtype).Opt("dist", x.dist);
  v.Opt("scale_lo", x.scale_lo).Opt("scale_hi", x.scale_hi).Opt("offset_lo", x.offset_lo).Opt("offset_hi", x.offset_hi);
}
template <typename V>
void Fields(V& v, ScalarDesc& x) {
  v.Req("name", x.name).Req("type", x.type).Req("value", x.value);
}
template <typename V>
void Fields(V& v, Tolerances& x) {
  v.Opt("atol", x.atol).Opt("rtol", x.rtol).Opt("min_cossim", x.min_cossim).Opt("max_mismatch", x.max_mismatch);
}
template <typename V>
void Fields(V& v, ModuleImage& x) {
  v.Opt("hash", x.hash).Bytes("cubin", x.cubin, true).Opt("symbols", x.symbols);
}
template <typename V>
void Fields(V& v, ShapeJob& x) {
  v.Req("label", x.label).Opt("sizes", x.sizes).Opt("elements", x.elements).Opt("launches", x.launches);
  v.Opt("scratch", x.scratch).Opt("ref_launches", x.ref_launches).Opt("ref_scratch", x.ref_scratch);
  v.Opt("bytes", x.bytes).Opt("flops", x.flops).Opt("unsupported", x.unsupported);
}
template <typename V>
void Fields(V& v, TimingProtocol& x) {
  v.Opt("timer", x.timer).Opt("warmup_reps", x.warmup_reps).Opt("warmup_ms", x.warmup_ms);
  v.Opt("min_reps", x.min_reps).Opt("max_reps", x.max_reps).Opt("batch", x.batch).Opt("target_rse", x.target_rse);
  v.Opt("max_ms_per_shape", x.max_ms_per_shape).Opt("input_sets", x.input_sets).Opt("flush_l2", x.flush_l2);
  v.Opt("flush", x.flush).Opt("reset_persisting_l2", x.reset_persisting_l2);
}
template <typename V>
void Fields(V& v, EvalRequest& x) {
  v.Req("id", x.id).Opt("op", x.op).Opt("dtype", x.dtype).Opt("size_names", x.size_names);
  v.Opt("buffers", x.buffers).Opt("scalars", x.scalars).Opt("deterministic", x.deterministic);
  v.Opt("tolerance", x.tolerance).Req("candidate", x.candidate).Opt("reference", x.reference);
  v.Opt("check", x.check).Opt("tune", x.tune).Opt("seed", x.seed).Opt("draws", x.draws).Opt("timing", x.timing);
  v.Opt("launch_timeout_ms", x.launch_timeout_ms).Opt("timeout_factor", x.timeout_factor);
  v.Opt("skip_timing", x.skip_timing);
}
template <typename V>
void Fields(V& v, RungResult& x) {
  v.Req("name", x.name).Req("ok", x.ok).Opt("reason", x.reason).Opt("metrics", x.metrics).Opt("log", x.log);
  v.Opt("duration_ms", x.duration_ms);
}
template <typename V>
void Fields(V& v, ShapeTiming& x) {
  v.Req("shape", x.shape).Opt("median_us", x.median_us).Opt("p10_us", x.p10_us).Opt("p90_us", x.p90_us);
  v.Opt("n", x.n).Opt("samples_us", x.samples_us).Opt("protocol", x.protocol).Opt("bytes", x.bytes);
  v.Opt("flops", x.flops);
}
template <typename V>
void Fields(V& v, EvalResult& x) {
  v.Req("id", x.id).Opt("device_uuid", x.device_uuid).Req("rungs", x.rungs).Opt("timings", x.timings);
  v.Opt("context_lost", x.context_lost);
}
template <typename V>
void Fields(V& v, DeviceDesc& x) {
  v.Req("uuid", x.uuid).Opt("name", x.name).Opt("arch", x.arch).Opt("ordinal", x.ordinal);
  v.Opt("sm_count", x.sm_count).Opt("l2_bytes", x.l2_bytes).Opt("mem_bytes", x.mem_bytes);
  v.Opt("smem_per_block_optin", x.smem_per_block_optin).Opt("clock_khz", x.clock_khz);
  v.Opt("mem_clock_khz", x.mem_clock_khz);
}
template <typename V>
void Fields(V& v, Calibration& x) {
  v.Req("uuid", x.uuid).Req("copy_gbps", x.copy_gbps).Req("fp32_gflops", x.fp32_gflops).Opt("details", x.details);
}

// Checks the message type, then reads the body; the error names the type and field.
template <typename T>
Result<T> FromMessage(const Message& m, const char* type) {
  if (m.type != type) return Status::Error(std::string("expected a '") + type + "' message, got '" + m.type + "'");
  std::string err;
  T t;
  try {
    if (!Parse(m.body, "", &err, &t)) return Status::Error(std::string(type) + " message: " + err);
  } catch (const std::exception& e) {  // not expected: every access is type-checked first
    return Status::Error(std::string(type) + " message: " + e.what());
  }
  return t;
}

}  // namespace

nlohmann::json TimingProtocol::ToJson() const {
  return Writer::Value(*this);
}

bool SetL2Flush(TimingProtocol& t, const std::string& mode) {
  if (mode != "memset" && mode != "read" && mode != "none") return false;
  t.flush_l2 = mode != "none";
  t.flush = mode;  // "none" too, so that the request and the rung's metrics name the mode
  return true;
}

std::string L2FlushName(const TimingProtocol& t) { return t.flush_l2 ? t.flush : "none"; }

TimingProtocol TimingProtocol::FromJson(const nlohmann::json& j) {
  TimingProtocol t;
  std::string ignored;
  Reader r(j, "timing", &ignored);
  Fields(r, t);  // field by field: a bad or missing one keeps its default
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
  return MakeMessage("eval", Writer::Value(r));
}
Message ToMessage(const EvalResult& r) {
  return MakeMessage("result", Writer::Value(r));
}
Message ToMessage(const DeviceDesc& d) {
  return MakeMessage("hello_reply", Writer::Value(d));
}
Message ToMessage(const Calibration& c) {
  return MakeMessage("calibration", Writer::Value(c));
}

Result<EvalRequest> EvalRequestFromMessage(const Message& m) {
  return FromMessage<EvalRequest>(m, "eval");
}
Result<EvalResult> EvalResultFromMessage(const Message& m) {
  return FromMessage<EvalResult>(m, "result");
}
Result<DeviceDesc> DeviceDescFromMessage(const Message& m) {
  return FromMessage<DeviceDesc>(m, "hello_reply");
}
Result<Calibration> CalibrationFromMessage(const Message& m) {
  return FromMessage<Calibration>(m, "calibration");
}

}  // namespace kevolve

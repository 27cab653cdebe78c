#include "kevolve/core/op_spec.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>

#include "kevolve/core/json_file.h"

namespace fs = std::filesystem;

namespace kevolve {

Env OpSpec::MakeEnv(const Shape& shape, DType dtype) const {
  Env env = shape.sizes;
  env["sizeof_T"] = DTypeSize(dtype);
  return env;
}

DType OpSpec::BufferDType(const BufferSpec& b, DType variant) const {
  if (b.dtype == "T") return variant;
  return ParseDType(b.dtype).value_or(variant);
}

Result<int64_t> OpSpec::Elements(const BufferSpec& b, const Shape& shape, DType dtype) const {
  Env env = MakeEnv(shape, dtype);
  int64_t n = 1;
  for (const auto& e : b.shape) {
    auto v = e.Eval(env);
    if (!v.ok()) return Status::Error("buffer '" + b.name + "': " + v.error());
    if (*v < 0) return Status::Error("buffer '" + b.name + "' has a negative extent");
    if (__builtin_mul_overflow(n, *v, &n)) return Status::Error("buffer '" + b.name + "' too large");
  }
  return n;
}

bool OpSpec::HasDType(DType t) const {
  return std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end();
}

std::vector<std::string> ListOpDirs(const std::string& ops_root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ops_root, ec)) {
    if (e.is_directory() && fs::exists(e.path() / "op.json")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Parses an expression field and records an error naming the field when it is invalid
// or reads names outside `known`.
Expr ParseExprField(JsonReader& r, const std::string& text, const std::string& path,
                    const std::vector<std::string>& known) {
  auto e = Expr::Parse(text);
  if (!e.ok()) {
    r.Error(path, "bad expression '" + text + "': " + e.error());
    return *Expr::Parse("0");
  }
  for (const auto& v : e->Variables()) {
    if (std::find(known.begin(), known.end(), v) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      r.Error(path, "expression '" + text + "' uses unknown name '" + v + "' (known: " + list + ")");
    }
  }
  return *e;
}

void ParseRange(JsonReader& r, const Json& obj, const std::string& key, const std::string& path,
                double* lo, double* hi) {
  auto it = obj.find(key);
  if (it == obj.end()) return;
  std::string p = JoinPath(path, key);
  if (it->is_number()) {
    *lo = *hi = it->get<double>();
  } else if (it->is_array() && it->size() == 2 && (*it)[0].is_number() && (*it)[1].is_number()) {
    *lo = (*it)[0].get<double>();
    *hi = (*it)[1].get<double>();
    if (*lo > *hi) r.Error(p, "range [lo, hi] has lo > hi");
  } else {
    r.Error(p, "expected a number or a range [lo, hi]");
  }
}

}  // namespace

Result<Shape> ParseShapeLabel(const OpSpec& op, const std::string& text) {
  std::string names;
  for (const auto& n : op.sizes) names += (names.empty() ? "" : " x ") + n;
  const std::string expect = " (op '" + op.name + "' takes " + names +
                             (op.tune.empty() ? std::string() : ", e.g. " + op.tune.front().label) + ")";
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == 'x' || c == 'X') parts.emplace_back();
    else parts.back() += c;
  }
  if (parts.size() != op.sizes.size())
    return Status::Error("'" + text + "': expected " + std::to_string(op.sizes.size()) + " sizes" + expect);
  Shape shape;
  for (size_t k = 0; k < parts.size(); ++k) {
    int64_t v = 0;
    const char* b = parts[k].data();
    const char* e = b + parts[k].size();
    auto [ptr, ec] = std::from_chars(b, e, v);
    // Kernels take their sizes as int.
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && ptr == e && v > INT32_MAX))
      return Status::Error("'" + text + "': " + op.sizes[k] + " '" + parts[k] +
                           "' is too large (kernels take sizes as int: at most 2147483647)" + expect);
    if (parts[k].empty() || ec != std::errc() || ptr != e || v <= 0)
      return Status::Error("'" + text + "': " + op.sizes[k] + " '" + parts[k] + "' is not a positive integer" +
                           expect);
    shape.sizes[op.sizes[k]] = v;
    shape.label += (k ? "x" : "") + std::to_string(v);
  }
  return shape;
}

namespace {

std::vector<Shape> ParseShapes(JsonReader& r, const Json& shapes, const std::string& key,
                               const std::string& path, const std::vector<std::string>& sizes,
                               bool required) {
  std::vector<Shape> out;
  const Json* list = r.Field(shapes, key, path, Json::value_t::array, required);
  if (!list) return out;
  std::string lp = JoinPath(path, key);
  if (list->empty() && required) r.Error(lp, "needs at least one shape");
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& s = (*list)[i];
    std::string sp = JoinPath(lp, i);
    Shape shape;
    if (s.is_array()) {
      if (s.size() != sizes.size()) {
        r.Error(sp, "expected " + std::to_string(sizes.size()) + " sizes in the order of 'sizes'");
        continue;
      }
      for (size_t k = 0; k < sizes.size(); ++k) {
        if (!s[k].is_number_integer()) { r.Error(JoinPath(sp, k), "expected an integer"); continue; }
        shape.sizes[sizes[k]] = s[k].get<int64_t>();
      }
    } else if (s.is_object()) {
      r.OnlyKeys(s, sizes, sp);
      for (const auto& name : sizes) shape.sizes[name] = r.Integer(s, name, sp);
    } else {
      r.Error(sp, "expected an object {\"rows\": 4096, ...} or an array [4096, ...]");
      continue;
    }
    bool positive = true;
    for (const auto& [name, v] : shape.sizes) {
      if (v <= 0) { r.Error(JoinPath(sp, name), "must be positive"); positive = false; }
    }
    if (!positive) continue;
    for (size_t k = 0; k < sizes.size(); ++k)
      shape.label += (k ? "x" : "") + std::to_string(shape.sizes[sizes[k]]);
    out.push_back(std::move(shape));
  }
  return out;
}

Tolerance ParseTolerance(JsonReader& r, const Json& t, const std::string& path) {
  Tolerance tol;
  r.OnlyKeys(t, {"atol", "rtol", "max_mismatch", "min_cossim"}, path);
  tol.atol = r.Number(t, "atol", path);
  tol.rtol = r.Number(t, "rtol", path);
  tol.max_mismatch = r.Integer(t, "max_mismatch", path, false, 0);
  tol.min_cossim = r.Number(t, "min_cossim", path, false, 0.0);
  if (tol.atol < 0 || tol.rtol < 0) r.Error(path, "tolerances must be non-negative");
  return tol;
}

std::string ResolveFile(JsonReader& r, const std::string& dir, const std::string& rel,
                        const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(dir) / rel, ec).lexically_normal();
  if (!fs::is_regular_file(p)) r.Error(path, "file '" + p.string() + "' does not exist");
  return p.string();
}

}  // namespace

Result<OpSpec> LoadOpSpec(const std::string& dir) {
  OpSpec op;
  op.dir = dir;
  op.file = (fs::path(dir) / "op.json").string();
  auto doc = ReadJsonFile(op.file);
  if (!doc.ok()) return doc.status();
  const Json& j = *doc;
  JsonReader r(op.file);
  if (!j.is_object()) {
    r.Error("(top level)", "expected an object");
    return r.ToStatus();
  }
  r.OnlyKeys(j, {"name", "description", "sizes", "scalars", "buffers", "dtypes", "deterministic",
                 "inputs", "tolerance", "cost", "reference", "seeds", "shapes", "compute"}, "");
  op.compute = r.String(j, "compute", "", false, "fp32");
  if (op.compute != "fp32" && op.compute != "bf16_tensor" && op.compute != "f16_tensor" &&
      op.compute != "tf32_tensor" && op.compute != "fp8_tensor")
    r.Error("compute", "must be fp32, bf16_tensor, f16_tensor, tf32_tensor or fp8_tensor");
  op.name = r.String(j, "name", "");
  op.description = r.String(j, "description", "", false);
  op.deterministic = r.Bool(j, "deterministic", "", false, true);

  if (const Json* s = r.Field(j, "sizes", "", Json::value_t::array)) {
    for (size_t i = 0; i < s->size(); ++i) {
      if (!(*s)[i].is_string()) { r.Error(JoinPath("sizes", i), "expected a name"); continue; }
      op.sizes.push_back((*s)[i].get<std::string>());
    }
    if (op.sizes.empty()) r.Error("sizes", "needs at least one size name");
  }
  std::vector<std::string> size_names = op.sizes;
  std::vector<std::string> cost_names = op.sizes;
  cost_names.push_back("sizeof_T");

  if (const Json* s = r.Field(j, "scalars", "", Json::value_t::array, false)) {
    for (size_t i = 0; i < s->size(); ++i) {
      std::string p = JoinPath("scalars", i);
      const Json& o = (*s)[i];
      r.OnlyKeys(o, {"name", "type", "value"}, p);
      ScalarSpec sc;
      sc.name = r.String(o, "name", p);
      std::string t = r.String(o, "type", p, false, "f32");
      auto dt = ParseDType(t);
      if (!dt || (*dt != DType::kF32 && *dt != DType::kI32)) r.Error(JoinPath(p, "type"), "must be f32 or i32");
      else sc.type = *dt;
      sc.value = r.Number(o, "value", p);
      op.scalars.push_back(sc);
    }
  }

  if (const Json* d = r.Field(j, "dtypes", "", Json::value_t::array)) {
    for (size_t i = 0; i < d->size(); ++i) {
      auto dt = (*d)[i].is_string() ? ParseDType((*d)[i].get<std::string>()) : std::nullopt;
      if (!dt || (*dt != DType::kF32 && *dt != DType::kF16 && *dt != DType::kBF16))
        r.Error(JoinPath("dtypes", i), "expected one of f32, bf16, f16");
      else op.dtypes.push_back(*dt);
    }
    if (op.dtypes.empty()) r.Error("dtypes", "needs at least one dtype");
  }

  const Json* inputs = r.Field(j, "inputs", "", Json::value_t::object, false);
  if (const Json* b = r.Field(j, "buffers", "", Json::value_t::array)) {
    bool has_out = false;
    for (size_t i = 0; i < b->size(); ++i) {
      std::string p = JoinPath("buffers", i);
      const Json& o = (*b)[i];
      r.OnlyKeys(o, {"name", "role", "dtype", "shape"}, p);
      BufferSpec buf;
      buf.name = r.String(o, "name", p);
      std::string role = r.String(o, "role", p);
      if (role == "in") buf.role = BufferRole::kIn;
      else if (role == "out") { buf.role = BufferRole::kOut; has_out = true; }
      else if (!role.empty()) r.Error(JoinPath(p, "role"), "must be \"in\" or \"out\"");
      buf.dtype = r.String(o, "dtype", p, false, "T");
      if (buf.dtype != "T" && !ParseDType(buf.dtype)) r.Error(JoinPath(p, "dtype"), "must be \"T\" or a dtype name");
      if (const Json* sh = r.Field(o, "shape", p, Json::value_t::array)) {
        for (size_t k = 0; k < sh->size(); ++k) {
          std::string sp = JoinPath(JoinPath(p, "shape"), k);
          if ((*sh)[k].is_string()) buf.shape.push_back(ParseExprField(r, (*sh)[k].get<std::string>(), sp, size_names));
          else if ((*sh)[k].is_number_integer()) buf.shape.push_back(*Expr::Parse(std::to_string((*sh)[k].get<int64_t>())));
          else r.Error(sp, "expected a size expression");
        }
      }
      if (buf.role == BufferRole::kIn && inputs) {
        auto it = inputs->find(buf.name);
        if (it != inputs->end()) {
          std::string ip = JoinPath("inputs", buf.name);
          r.OnlyKeys(*it, {"dist", "scale", "offset"}, ip);
          buf.dist.kind = r.String(*it, "dist", ip, false, "normal");
          if (buf.dist.kind != "normal" && buf.dist.kind != "uniform")
            r.Error(JoinPath(ip, "dist"), "must be \"normal\" or \"uniform\"");
          ParseRange(r, *it, "scale", ip, &buf.dist.scale_lo, &buf.dist.scale_hi);
          ParseRange(r, *it, "offset", ip, &buf.dist.offset_lo, &buf.dist.offset_hi);
        }
      }
      op.buffers.push_back(std::move(buf));
    }
    if (!has_out) r.Error("buffers", "needs at least one buffer with role \"out\"");
  }
  if (inputs) {
    for (auto it = inputs->begin(); it != inputs->end(); ++it) {
      bool found = false;
      for (const auto& b : op.buffers) found = found || (b.name == it.key() && b.role == BufferRole::kIn);
      if (!found) r.Error(JoinPath("inputs", it.key()), "names no input buffer");
    }
  }

  if (const Json* t = r.Field(j, "tolerance", "", Json::value_t::object)) {
    std::vector<std::string> names;
    for (DType dt : op.dtypes) names.push_back(DTypeName(dt));
    r.OnlyKeys(*t, names, "tolerance");
    for (DType dt : op.dtypes) {
      std::string name = DTypeName(dt);
      if (const Json* tt = r.Field(*t, name, "tolerance", Json::value_t::object))
        op.tolerances[dt] = ParseTolerance(r, *tt, JoinPath("tolerance", name));
    }
  }

  if (const Json* c = r.Field(j, "cost", "", Json::value_t::object)) {
    r.OnlyKeys(*c, {"bytes", "flops"}, "cost");
    op.cost_bytes = ParseExprField(r, r.String(*c, "bytes", "cost", true, "0"), "cost.bytes", cost_names);
    op.cost_flops = ParseExprField(r, r.String(*c, "flops", "cost", true, "0"), "cost.flops", cost_names);
  }

  std::string ref = r.String(j, "reference", "");
  if (!ref.empty()) op.reference = ResolveFile(r, dir, ref, "reference");
  if (const Json* s = r.Field(j, "seeds", "", Json::value_t::array)) {
    for (size_t i = 0; i < s->size(); ++i) {
      if (!(*s)[i].is_string()) { r.Error(JoinPath("seeds", i), "expected a file name"); continue; }
      op.seeds.push_back(ResolveFile(r, dir, (*s)[i].get<std::string>(), JoinPath("seeds", i)));
    }
    if (op.seeds.empty()) r.Error("seeds", "needs at least one seed candidate");
  }

  if (const Json* s = r.Field(j, "shapes", "", Json::value_t::object)) {
    r.OnlyKeys(*s, {"tune", "check", "heldout"}, "shapes");
    op.tune = ParseShapes(r, *s, "tune", "shapes", op.sizes, true);
    op.check = ParseShapes(r, *s, "check", "shapes", op.sizes, true);
    op.heldout = ParseShapes(r, *s, "heldout", "shapes", op.sizes, false);
  }
  if (!r.ok()) return r.ToStatus();
  return op;
}

}  // namespace kevolve

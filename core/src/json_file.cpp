#include "kevolve/core/json_file.h"

#include <fstream>
#include <sstream>

namespace kevolve {

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Error("error reading '" + path + "'");
  return ss.str();
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Error("cannot write '" + path + "'");
  out << text;
  out.close();
  if (!out) return Status::Error("error writing '" + path + "'");
  return Status::Ok();
}

namespace {

// Converts a byte offset into "line:col" for error messages.
std::string LineCol(const std::string& text, size_t byte) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

}  // namespace

Result<Json> ReadJsonFile(const std::string& path) {
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  try {
    return Json::parse(*text, /*cb=*/nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line 3, column 5:
    // syntax error while parsing object key - ..."; keep only the part after the position.
    std::string what = e.what();
    auto p = what.find(": ");
    std::string detail = p == std::string::npos ? what : what.substr(p + 2);
    return Status::Error(path + ":" + LineCol(*text, e.byte > 0 ? e.byte - 1 : 0) + ": " + detail);
  } catch (const Json::exception& e) {
    // Other parse-time failures (a number out of range): keep the message, drop the tag.
    std::string what = e.what();
    auto p = what.find("] ");
    return Status::Error(path + ": " + (p == std::string::npos ? what : what.substr(p + 2)));
  }
}

std::string JoinPath(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}
std::string JoinPath(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

void JsonReader::Error(const std::string& path, const std::string& what) {
  errors_.push_back(file_ + ": field '" + path + "': " + what);
}

Status JsonReader::ToStatus() const {
  if (errors_.empty()) return Status::Ok();
  std::string all;
  for (size_t i = 0; i < errors_.size(); ++i) all += (i ? "\n" : "") + errors_[i];
  return Status::Error(all);
}

namespace {
const char* TypeName(Json::value_t t) {
  switch (t) {
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "true or false";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::null: return "null";
    default: return "a value";
  }
}
}  // namespace

const Json* JsonReader::Field(const Json& obj, const std::string& key, const std::string& path,
                              Json::value_t type, bool required) {
  std::string p = JoinPath(path, key);
  if (!obj.is_object()) {
    Error(path.empty() ? "(top level)" : path, "expected an object");
    return nullptr;
  }
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) Error(p, std::string("missing (expected ") + TypeName(type) + ")");
    return nullptr;
  }
  bool match = it->type() == type ||
               (type == Json::value_t::number_float && it->is_number()) ||
               (type == Json::value_t::number_integer && it->is_number_integer());
  if (!match) {
    Error(p, std::string("expected ") + TypeName(type) + ", got " + TypeName(it->type()));
    return nullptr;
  }
  return &*it;
}

std::string JsonReader::String(const Json& obj, const std::string& key, const std::string& path,
                               bool required, const std::string& def) {
  const Json* j = Field(obj, key, path, Json::value_t::string, required);
  return j ? j->get<std::string>() : def;
}

double JsonReader::Number(const Json& obj, const std::string& key, const std::string& path,
                          bool required, double def) {
  const Json* j = Field(obj, key, path, Json::value_t::number_float, required);
  return j ? j->get<double>() : def;
}

int64_t JsonReader::Integer(const Json& obj, const std::string& key, const std::string& path,
                            bool required, int64_t def) {
  const Json* j = Field(obj, key, path, Json::value_t::number_integer, required);
  return j ? j->get<int64_t>() : def;
}

bool JsonReader::Bool(const Json& obj, const std::string& key, const std::string& path,
                      bool required, bool def) {
  const Json* j = Field(obj, key, path, Json::value_t::boolean, required);
  return j ? j->get<bool>() : def;
}

void JsonReader::OnlyKeys(const Json& obj, const std::vector<std::string>& allowed,
                          const std::string& path) {
  if (!obj.is_object()) return;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const auto& a : allowed) known = known || a == it.key();
    if (!known) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      Error(JoinPath(path, it.key()), "unknown field (allowed: " + list + ")");
    }
  }
}

}  // namespace kevolve

// Reading hand-written JSON files (comments allowed) with errors that name the file,
// the field and what is wrong, and never leak exception text.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kevolve/core/status.h"

namespace kevolve {

using Json = nlohmann::json;

// Reads and parses `path`; "/* */" and "//" comments are allowed. A syntax error reads
// "configs/ops/x/op.json:12:5: syntax error: ...".
Result<Json> ReadJsonFile(const std::string& path);
Result<std::string> ReadTextFile(const std::string& path);
Status WriteTextFile(const std::string& path, const std::string& text);

// Typed field access that accumulates one error per problem, each naming the field by
// its JSON path ("shapes.tune[2].cols"). Used by every config loader.
class JsonReader {
 public:
  explicit JsonReader(std::string file) : file_(std::move(file)) {}

  // Each getter returns a default and records an error when the field is missing
  // (required) or of the wrong type.
  std::string String(const Json& obj, const std::string& key, const std::string& path,
                     bool required = true, const std::string& def = "");
  double Number(const Json& obj, const std::string& key, const std::string& path,
                bool required = true, double def = 0.0);
  int64_t Integer(const Json& obj, const std::string& key, const std::string& path,
                  bool required = true, int64_t def = 0);
  bool Bool(const Json& obj, const std::string& key, const std::string& path,
            bool required = true, bool def = false);
  // Returns nullptr (and records an error if required) when absent or not of `type`.
  const Json* Field(const Json& obj, const std::string& key, const std::string& path,
                    Json::value_t type, bool required = true);
  // Rejects keys outside `allowed` (typos in hand-written files are the common error).
  void OnlyKeys(const Json& obj, const std::vector<std::string>& allowed,
                const std::string& path);

  void Error(const std::string& path, const std::string& what);
  bool ok() const { return errors_.empty(); }
  // All errors, one per line: "FILE: field 'PATH': WHAT".
  Status ToStatus() const;

 private:
  std::string file_;
  std::vector<std::string> errors_;
};

std::string JoinPath(const std::string& parent, const std::string& key);
std::string JoinPath(const std::string& parent, size_t index);

}  // namespace kevolve

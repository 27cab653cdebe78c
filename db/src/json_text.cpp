#include "json_text.h"

namespace kevolve::db {

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<Json> ParseJson(const std::string& text, std::string_view what) {
  if (text.empty()) return Json();
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return Status::Error("invalid JSON in " + std::string(what));
  }
  return parsed;
}

}  // namespace kevolve::db

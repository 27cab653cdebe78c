// JSON columns are stored as text. These helpers never throw.
#pragma once

#include <string>
#include <string_view>

#include "kevolve/core/status.h"
#include "kevolve/db/records.h"

namespace kevolve::db {

// Compact text; invalid UTF-8 in strings (e.g. a raw compiler log) is replaced with
// U+FFFD rather than failing the write.
std::string DumpJson(const Json& value);

// Parses a stored column; `what` names it in the error ("candidate 7 features_json").
// Empty text reads as null.
Result<Json> ParseJson(const std::string& text, std::string_view what);

}  // namespace kevolve::db

// The versioned schema. The database records its version in schema_version; each
// migration moves it forward by one, inside its own transaction, so a database is
// always at some released version.
#pragma once

#include <string>

#include "kevolve/core/status.h"
#include "sqlite_handle.h"

// A timing's (timer, L2 flush) from its protocol_json (table alias t): "events" or
// "cupti"; "memset", "read" or "none" (a timing stored before the flush was named:
// "memset", or "none" when it did not flush).
#define KEVOLVE_TIMING_PROTOCOL_COLUMNS                                \
  "coalesce(json_extract(t.protocol_json, '$.timer'), 'events'), "     \
  "CASE WHEN json_extract(t.protocol_json, '$.flush_l2') = 0 THEN 'none' " \
  "ELSE coalesce(json_extract(t.protocol_json, '$.flush'), 'memset') END"

namespace kevolve::db {

// The version this binary creates and expects.
int LatestSchemaVersion();

// The version recorded in the database: 0 when it has no schema yet.
Result<int> ReadSchemaVersion(Connection& conn);

// Applies every pending migration and returns the resulting version (the latest).
// An up-to-date database is left untouched. Fails, naming `path`, when the database
// is newer than this binary, or when it needs migrating but `read_only` is set.
Result<int> Migrate(Connection& conn, const std::string& path, bool read_only);

}  // namespace kevolve::db

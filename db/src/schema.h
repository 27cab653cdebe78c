// The versioned schema. The database records its version in schema_version; each
// migration moves it forward by one, inside its own transaction, so a database is
// always at some released version.
#pragma once

#include <string>

#include "kevolve/core/status.h"
#include "sqlite_handle.h"

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

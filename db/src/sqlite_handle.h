// RAII owners for sqlite3 and sqlite3_stmt handles, and the one checking helper that
// turns a SQLite result code into a Status naming the failing call.
//
// Thread-safety: a Connection and its Statements are used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <sqlite3.h>

#include "kevolve/core/status.h"

namespace kevolve::db {

// Ok when rc is SQLITE_OK, SQLITE_ROW or SQLITE_DONE; otherwise an error of the form
// "<call>: <sqlite3_errmsg(db)>". `db` may be null (then sqlite3_errstr(rc) is used).
Status Check(sqlite3* db, int rc, std::string_view call);

// One prepared statement. Bind* never fail on their own: the first binding error is
// kept and returned by the next Step/Run, so call sites check once.
// Parameter and column indexes follow SQLite: parameters from 1, columns from 0.
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Statement& Bind(int index, double value);  // NaN is stored as NULL
  Statement& Bind(int index, std::string_view text);
  Statement& Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  Statement& Bind(int index, const std::optional<int64_t>& value);
  Statement& Bind(int index, const std::optional<double>& value);
  Statement& BindBlob(int index, std::string_view bytes);  // empty is a zero-length blob

  // True when a row is ready to read, false when the statement has finished.
  Result<bool> Step();
  // Steps a statement that returns no rows to completion.
  Status Run();
  // Makes the statement ready to run again; bindings are kept until re-bound.
  void Reset();

  bool ColumnIsNull(int column) const;
  int64_t ColumnInt64(int column) const;
  double ColumnDouble(int column) const;  // NULL reads as NaN
  std::optional<double> ColumnOptionalDouble(int column) const;
  std::optional<int64_t> ColumnOptionalInt64(int column) const;
  std::string ColumnText(int column) const;  // NULL reads as ""
  std::string ColumnBlob(int column) const;  // NULL reads as ""

 private:
  void Remember(int rc, std::string_view call);
  std::string Describe() const;  // the start of the SQL text, for error messages

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  Status bind_status_;
};

// An open database handle; closes it on destruction. Statements prepared from it must
// be destroyed first.
class Connection {
 public:
  Connection() = default;
  explicit Connection(sqlite3* db) : db_(db) {}
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* get() const { return db_; }

  Result<Statement> Prepare(std::string_view sql);
  // Runs one or more statements that take no parameters (schema scripts, pragmas).
  Status Exec(const char* sql);
  // Runs a statement returning a single text value, e.g. "PRAGMA journal_mode=WAL".
  Result<std::string> QueryText(std::string_view sql);

  bool InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }
  int64_t LastInsertId() const { return sqlite3_last_insert_rowid(db_); }
  int Changes() const { return sqlite3_changes(db_); }

 private:
  sqlite3* db_ = nullptr;
};

// Makes a group of writes atomic whether or not the caller already has a transaction
// open: outside one it opens BEGIN IMMEDIATE, inside one it nests as a SAVEPOINT.
// Unless Release() succeeds, the destructor undoes every write made since construction
// and leaves any enclosing transaction open.
class WriteScope {
 public:
  explicit WriteScope(Connection& conn) : conn_(conn) {}
  ~WriteScope();
  WriteScope(const WriteScope&) = delete;
  WriteScope& operator=(const WriteScope&) = delete;

  Status Open();
  Status Release();

 private:
  Connection& conn_;
  bool owns_transaction_ = false;
  bool open_ = false;
};

}  // namespace kevolve::db

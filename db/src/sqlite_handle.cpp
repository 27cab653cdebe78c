#include "sqlite_handle.h"

#include <cmath>
#include <limits>
#include <utility>

namespace kevolve::db {
namespace {

// How much of a statement's SQL an error message quotes.
constexpr size_t kSqlExcerptChars = 60;

}  // namespace

Status Check(sqlite3* db, int rc, std::string_view call) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return Status::Ok();
  const char* why = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return Status::Error(std::string(call) + ": " + why);
}

// ---- Statement ----

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement::Statement(Statement&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      stmt_(std::exchange(other.stmt_, nullptr)),
      bind_status_(std::move(other.bind_status_)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = std::exchange(other.db_, nullptr);
    stmt_ = std::exchange(other.stmt_, nullptr);
    bind_status_ = std::move(other.bind_status_);
  }
  return *this;
}

std::string Statement::Describe() const {
  std::string sql = stmt_ != nullptr ? sqlite3_sql(stmt_) : "";
  std::string out;
  for (char c : sql) {
    bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out.push_back(space ? ' ' : c);
    if (out.size() >= kSqlExcerptChars) {
      out += "...";
      break;
    }
  }
  return out;
}

void Statement::Remember(int rc, std::string_view call) {
  if (rc == SQLITE_OK || !bind_status_.ok()) return;
  bind_status_ = Check(db_, rc, std::string(call) + " for '" + Describe() + "'");
}

Statement& Statement::Bind(int index, int64_t value) {
  Remember(sqlite3_bind_int64(stmt_, index, value), "sqlite3_bind_int64");
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  Remember(sqlite3_bind_double(stmt_, index, value), "sqlite3_bind_double");
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  Remember(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT,
                               SQLITE_UTF8),
           "sqlite3_bind_text64");
  return *this;
}

Statement& Statement::Bind(int index, const std::optional<int64_t>& value) {
  if (value) return Bind(index, *value);
  Remember(sqlite3_bind_null(stmt_, index), "sqlite3_bind_null");
  return *this;
}

Statement& Statement::Bind(int index, const std::optional<double>& value) {
  if (value) return Bind(index, *value);
  Remember(sqlite3_bind_null(stmt_, index), "sqlite3_bind_null");
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  // A null data pointer would bind NULL rather than an empty blob.
  static const char kEmpty = 0;
  const void* data = bytes.empty() ? &kEmpty : bytes.data();
  Remember(sqlite3_bind_blob64(stmt_, index, data, bytes.size(), SQLITE_TRANSIENT),
           "sqlite3_bind_blob64");
  return *this;
}

Result<bool> Statement::Step() {
  if (!bind_status_.ok()) return bind_status_;
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return Check(db_, rc, "sqlite3_step for '" + Describe() + "'");
}

Status Statement::Run() {
  Result<bool> row = Step();
  if (!row.ok()) return row.status();
  return Status::Ok();
}

void Statement::Reset() {
  // sqlite3_reset repeats the last step's error, which Step already reported.
  sqlite3_reset(stmt_);
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

int64_t Statement::ColumnInt64(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

double Statement::ColumnDouble(int column) const {
  if (ColumnIsNull(column)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, column);
}

std::optional<double> Statement::ColumnOptionalDouble(int column) const {
  if (ColumnIsNull(column)) return std::nullopt;
  return sqlite3_column_double(stmt_, column);
}

std::optional<int64_t> Statement::ColumnOptionalInt64(int column) const {
  if (ColumnIsNull(column)) return std::nullopt;
  return sqlite3_column_int64(stmt_, column);
}

std::string Statement::ColumnText(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::string Statement::ColumnBlob(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  if (data == nullptr) return {};
  return std::string(static_cast<const char*>(data),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

// ---- Connection ----

Connection::~Connection() { sqlite3_close_v2(db_); }

Connection::Connection(Connection&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
  }
  return *this;
}

Result<Statement> Connection::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  Statement owned(db_, stmt);
  Status s = Check(db_, rc, "sqlite3_prepare_v2");
  if (!s.ok()) return s;
  return owned;
}

Status Connection::Exec(const char* sql) {
  char* raw = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &raw);
  std::string why = raw != nullptr ? raw : "";
  sqlite3_free(raw);
  if (rc == SQLITE_OK) return Status::Ok();
  if (why.empty()) return Check(db_, rc, "sqlite3_exec");
  return Status::Error("sqlite3_exec: " + why);
}

Result<std::string> Connection::QueryText(std::string_view sql) {
  Result<Statement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  Result<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::string();
  return stmt->ColumnText(0);
}

// ---- WriteScope ----

namespace {
constexpr const char* kSavepoint = "SAVEPOINT kevolve_write";
constexpr const char* kReleaseSavepoint = "RELEASE kevolve_write";
constexpr const char* kRollbackSavepoint = "ROLLBACK TO kevolve_write; RELEASE kevolve_write";
}  // namespace

Status WriteScope::Open() {
  if (conn_.InTransaction()) {
    Status s = conn_.Exec(kSavepoint);
    if (!s.ok()) return s;
  } else {
    Status s = conn_.Exec("BEGIN IMMEDIATE");
    if (!s.ok()) return s;
    owns_transaction_ = true;
  }
  open_ = true;
  return Status::Ok();
}

Status WriteScope::Release() {
  Status s = conn_.Exec(owns_transaction_ ? "COMMIT" : kReleaseSavepoint);
  if (s.ok()) open_ = false;
  return s;
}

WriteScope::~WriteScope() {
  if (!open_) return;
  // Errors are ignored: SQLite may already have rolled the transaction back itself
  // (after SQLITE_FULL or SQLITE_IOERR), in which case there is nothing to undo.
  if (owns_transaction_) {
    if (conn_.InTransaction()) conn_.Exec("ROLLBACK");
  } else {
    conn_.Exec(kRollbackSavepoint);
  }
}

}  // namespace kevolve::db

// Run membership (table run_members, schema version 3).
#include <string>

#include "sqlite_store.h"

namespace kevolve::db {

Status SqliteStore::AddRunMember(const RunMemberRecord& m) {
  Result<Statement> insert = conn_.Prepare(
      "INSERT OR IGNORE INTO run_members (run_id, candidate_id, generation, island, operator) VALUES (?, ?, ?, ?, ?)");
  if (!insert.ok()) return WithContext("AddRunMember", insert.status());
  Status s = insert->Bind(1, m.run_id).Bind(2, m.candidate_id).Bind(3, m.generation).Bind(4, m.island).Bind(5, m.op_name).Run();
  return s.ok() ? s : WithContext("AddRunMember", s);
}

Result<std::vector<RunMemberRecord>> SqliteStore::ListRunMembers(int64_t run_id) {
  Result<Statement> query = conn_.Prepare(
      "SELECT run_id, candidate_id, generation, island, operator FROM run_members WHERE run_id = ? "
      "ORDER BY generation, rowid");
  if (!query.ok()) return WithContext("ListRunMembers", query.status());
  query->Bind(1, run_id);
  std::vector<RunMemberRecord> out;
  for (;;) {
    Result<bool> row = query->Step();
    if (!row.ok()) return WithContext("ListRunMembers", row.status());
    if (!*row) break;
    out.push_back({query->ColumnInt64(0), query->ColumnInt64(1), static_cast<int>(query->ColumnInt64(2)),
                   static_cast<int>(query->ColumnInt64(3)), query->ColumnText(4)});
  }
  return out;
}

}  // namespace kevolve::db

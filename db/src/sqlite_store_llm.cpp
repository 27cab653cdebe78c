// LLM calls (table llm_calls, schema version 2).
#include <string>

#include "sqlite_store.h"

namespace kevolve::db {
namespace {

constexpr const char* kLlmCallColumns =
    "id, run_id, candidate_id, parent_id, provider, model, operator, prompt, response, "
    "tokens_in, tokens_out, latency_s, cost_usd, outcome, error, created_at";

LlmCallRecord ReadLlmCall(const Statement& row) {
  LlmCallRecord c;
  c.id = row.ColumnInt64(0);
  c.run_id = row.ColumnOptionalInt64(1);
  c.candidate_id = row.ColumnOptionalInt64(2);
  c.parent_id = row.ColumnOptionalInt64(3);
  c.provider = row.ColumnText(4);
  c.model = row.ColumnText(5);
  c.op_name = row.ColumnText(6);
  c.prompt = row.ColumnText(7);
  c.response = row.ColumnText(8);
  c.tokens_in = row.ColumnInt64(9);
  c.tokens_out = row.ColumnInt64(10);
  c.latency_s = row.ColumnDouble(11);
  c.cost_usd = row.ColumnDouble(12);
  c.outcome = row.ColumnText(13);
  c.error = row.ColumnText(14);
  c.created_at = row.ColumnText(15);
  return c;
}

}  // namespace

Result<int64_t> SqliteStore::RecordLlmCall(const LlmCallRecord& call) {
  const std::string context = "RecordLlmCall(" + call.provider + ")";
  if (call.outcome.empty()) return Status::Error(context + ": the outcome is empty");
  Result<Statement> insert = conn_.Prepare(
      "INSERT INTO llm_calls (run_id, candidate_id, parent_id, provider, model, operator, "
      "prompt, response, tokens_in, tokens_out, latency_s, cost_usd, outcome, error) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!insert.ok()) return WithContext(context, insert.status());
  Status s = insert->Bind(1, call.run_id)
                 .Bind(2, call.candidate_id)
                 .Bind(3, call.parent_id)
                 .Bind(4, call.provider)
                 .Bind(5, call.model)
                 .Bind(6, call.op_name)
                 .Bind(7, call.prompt)
                 .Bind(8, call.response)
                 .Bind(9, call.tokens_in)
                 .Bind(10, call.tokens_out)
                 .Bind(11, call.latency_s)
                 .Bind(12, call.cost_usd)
                 .Bind(13, call.outcome)
                 .Bind(14, call.error)
                 .Run();
  if (!s.ok()) return WithContext(context, s);
  return conn_.LastInsertId();
}

Status SqliteStore::LinkLlmCall(int64_t call_id, int64_t candidate_id) {
  const std::string context = "LinkLlmCall(" + std::to_string(call_id) + ")";
  Result<Statement> update = conn_.Prepare("UPDATE llm_calls SET candidate_id = ? WHERE id = ?");
  if (!update.ok()) return WithContext(context, update.status());
  Status s = update->Bind(1, candidate_id).Bind(2, call_id).Run();
  if (!s.ok()) return WithContext(context, s);
  if (conn_.Changes() != 1) return Status::Error(context + ": no such call");
  return Status::Ok();
}

Result<std::vector<LlmCallRecord>> SqliteStore::ListLlmCalls(std::optional<int64_t> run_id) {
  std::string sql = std::string("SELECT ") + kLlmCallColumns + " FROM llm_calls";
  if (run_id) sql += " WHERE run_id = ?";
  sql += " ORDER BY id";
  Result<Statement> query = conn_.Prepare(sql);
  if (!query.ok()) return WithContext("ListLlmCalls", query.status());
  if (run_id) query->Bind(1, *run_id);
  std::vector<LlmCallRecord> calls;
  for (;;) {
    Result<bool> row = query->Step();
    if (!row.ok()) return WithContext("ListLlmCalls", row.status());
    if (!*row) break;
    calls.push_back(ReadLlmCall(*query));
  }
  return calls;
}

}  // namespace kevolve::db

// The SQLite implementation of Store. Internal to db/: callers use OpenSqliteStore.
//
// Every write that touches more than one row goes through a WriteScope, so it is atomic
// on its own and nests inside a transaction opened with Begin().
#pragma once

#include <string>
#include <utility>

#include "kevolve/db/store.h"
#include "sqlite_handle.h"

namespace kevolve::db {

// Prefixes a failed status with what was being done ("RecordEvaluation(candidate 7)").
inline Status WithContext(const std::string& context, Status s) {
  return s.ok() ? s : Status::Error(context + ": " + s.message());
}

class SqliteStore final : public Store {
 public:
  SqliteStore(Connection conn, int schema_version, bool read_only)
      : conn_(std::move(conn)), schema_version_(schema_version), read_only_(read_only) {}

  int SchemaVersion() override { return schema_version_; }

  Result<int64_t> CreateRun(const RunRecord& run) override;
  Result<RunRecord> GetRun(int64_t id) override;
  Status UpdateRun(const RunRecord& run) override;
  Result<std::vector<RunRecord>> ListRuns() override;

  Result<int64_t> PutSource(const SourceRecord& source) override;
  Result<SourceRecord> GetSource(int64_t id) override;

  Result<std::pair<int64_t, bool>> PutCandidate(const CandidateRecord& c) override;
  Result<std::optional<CandidateRecord>> FindCandidate(const std::string& hash) override;
  Result<CandidateRecord> GetCandidate(int64_t id) override;
  Result<std::vector<CandidateRecord>> ListCandidates(const CandidateQuery& q) override;

  // The rungs and timings are stored under e.candidate_id; their own candidate_id
  // fields are ignored.
  Status RecordEvaluation(const EvaluationRecord& e) override;
  Status AddRung(const RungRecord& rung) override;
  Result<std::vector<RungRecord>> GetRungs(int64_t candidate_id) override;
  Result<std::vector<TimingRecord>> GetTimings(int64_t candidate_id) override;
  Result<std::vector<std::pair<std::string, std::string>>> TimingProtocols(const std::string& op,
                                                                           const std::string& dtype) override;

  // An empty calibrated_at is stored as the current time.
  Status PutDevice(const DeviceRecord& d) override;
  Result<std::optional<DeviceRecord>> GetDevice(const std::string& uuid) override;

  Status PutArtifact(int64_t candidate_id, const std::string& kind,
                     const std::string& bytes) override;
  Result<std::optional<std::string>> GetArtifact(int64_t candidate_id,
                                                 const std::string& kind) override;

  Result<int64_t> RecordLlmCall(const LlmCallRecord& call) override;
  Status LinkLlmCall(int64_t call_id, int64_t candidate_id) override;
  Result<std::vector<LlmCallRecord>> ListLlmCalls(std::optional<int64_t> run_id) override;
  Status AddRunMember(const RunMemberRecord& m) override;
  Result<std::vector<RunMemberRecord>> ListRunMembers(int64_t run_id) override;

  // Begin() opens BEGIN IMMEDIATE (plain BEGIN when read-only), so the write lock is
  // taken up front and waits up to the busy timeout. Rollback() with no transaction
  // open is a no-op, so error paths may call it unconditionally.
  Status Begin() override;
  Status Commit() override;
  Status Rollback() override;

 private:
  // Reads the row a kCandidateColumns query is positioned on, parents included.
  Result<CandidateRecord> ReadCandidate(const Statement& row);
  // Runs a kCandidateColumns query and collects every row.
  Result<std::vector<CandidateRecord>> CollectCandidates(Statement& query);
  Status InsertRung(const RungRecord& rung, int64_t candidate_id);
  Status InsertTiming(const TimingRecord& timing, int64_t candidate_id);
  Status MergeEvaluationIntoCandidate(const EvaluationRecord& e);
  Status CheckOneProtocol(int64_t candidate_id);

  Connection conn_;
  const int schema_version_;
  const bool read_only_;
};

}  // namespace kevolve::db

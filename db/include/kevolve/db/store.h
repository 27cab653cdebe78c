// The one interface to persistent state. No SQL exists outside db/.
//
// Thread-safety: a Store is used by one thread (the search loop or a CLI command).
// Other processes may read the same file concurrently (SQLite WAL).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kevolve/core/status.h"
#include "kevolve/db/records.h"

namespace kevolve::db {

class Store {
 public:
  virtual ~Store() = default;

  virtual int SchemaVersion() = 0;

  // Runs
  virtual Result<int64_t> CreateRun(const RunRecord& run) = 0;  // returns the new id
  virtual Result<RunRecord> GetRun(int64_t id) = 0;              // error if absent
  virtual Status UpdateRun(const RunRecord& run) = 0;            // by run.id
  virtual Result<std::vector<RunRecord>> ListRuns() = 0;

  // Sources: deduplicated by hash; returns the id of the existing row when present.
  virtual Result<int64_t> PutSource(const SourceRecord& source) = 0;
  virtual Result<SourceRecord> GetSource(int64_t id) = 0;

  // Candidates: deduplicated by hash. Returns {id, inserted}; inserted is false when a
  // candidate with the same hash existed (its row is left unchanged).
  virtual Result<std::pair<int64_t, bool>> PutCandidate(const CandidateRecord& c) = 0;
  virtual Result<std::optional<CandidateRecord>> FindCandidate(const std::string& hash) = 0;
  virtual Result<CandidateRecord> GetCandidate(int64_t id) = 0;
  virtual Result<std::vector<CandidateRecord>> ListCandidates(const CandidateQuery& q) = 0;

  // Rungs and timings. RecordEvaluation is atomic: all of it lands or none. It fails (and
  // nothing lands) when its timings' protocol differs from the one already stored for the
  // candidate's op and dtype (TimingProtocols): a database keeps one per op and dtype.
  virtual Status RecordEvaluation(const EvaluationRecord& e) = 0;
  virtual Status AddRung(const RungRecord& rung) = 0;
  virtual Result<std::vector<RungRecord>> GetRungs(int64_t candidate_id) = 0;
  virtual Result<std::vector<TimingRecord>> GetTimings(int64_t candidate_id) = 0;
  // The distinct (timer, L2 flush) pairs that the timings of the op's candidates in this
  // dtype were measured with, from their protocol_json: "events" or "cupti"; "memset",
  // "read" or "none" (a timing stored before the flush was named: "memset", or "none" when
  // it did not flush).
  virtual Result<std::vector<std::pair<std::string, std::string>>> TimingProtocols(const std::string& op,
                                                                                   const std::string& dtype) = 0;

  // Devices and their calibration, keyed by UUID.
  virtual Status PutDevice(const DeviceRecord& d) = 0;  // insert or replace
  virtual Result<std::optional<DeviceRecord>> GetDevice(const std::string& uuid) = 0;

  // Binary artifacts per candidate (cubin, ptx, sass, ncu-rep, ...).
  virtual Status PutArtifact(int64_t candidate_id, const std::string& kind,
                             const std::string& bytes) = 0;
  virtual Result<std::optional<std::string>> GetArtifact(int64_t candidate_id,
                                                          const std::string& kind) = 0;

  // LLM calls, one row each (table llm_calls). ListLlmCalls returns them by id, all of
  // them when run_id is empty.
  virtual Result<int64_t> RecordLlmCall(const LlmCallRecord& call) = 0;
  // Sets the child candidate of a recorded call (calls are recorded as they return, before
  // their child is evaluated and has an id).
  virtual Status LinkLlmCall(int64_t call_id, int64_t candidate_id) = 0;
  virtual Result<std::vector<LlmCallRecord>> ListLlmCalls(std::optional<int64_t> run_id) = 0;

  // Run membership of candidates recorded elsewhere (insert-or-ignore), by generation.
  virtual Status AddRunMember(const RunMemberRecord& m) = 0;
  virtual Result<std::vector<RunMemberRecord>> ListRunMembers(int64_t run_id) = 0;

  // Groups writes into one transaction (the engine commits a generation's bookkeeping
  // at once). Nested Begin() is an error.
  virtual Status Begin() = 0;
  virtual Status Commit() = 0;
  virtual Status Rollback() = 0;
};

struct StoreOptions {
  bool read_only = false;
  int busy_timeout_ms = 10000;
};

// Opens (creating if needed, unless read_only) and migrates the database at `path`.
// Errors name the path and SQLite's message.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const StoreOptions& options = {});

}  // namespace kevolve::db

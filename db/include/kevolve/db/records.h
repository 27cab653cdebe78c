// Plain records that cross the store interface. JSON-valued columns are kept as
// nlohmann::json so callers never build SQL or JSON text by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kevolve::db {

using Json = nlohmann::json;

struct RunRecord {
  int64_t id = 0;
  std::string op;
  std::string dtype;
  uint64_t seed = 0;
  std::string status = "created";  // created | running | interrupted | finished | failed
  Json config = Json::object();    // the effective configuration
  Json devices = Json::array();    // device uuids/names used
  int generations_done = 0;
  double cost_usd = 0.0;
  std::string created_at;  // ISO-8601 UTC, filled by the store
  std::string updated_at;
};

// One kernel source text; many candidates (parameter assignments) share it.
struct SourceRecord {
  int64_t id = 0;
  std::string hash;    // sha256 of text
  std::string name;    // file name or a generated name ("llm-17.cu")
  std::string text;
  std::string origin;  // seed | user | llm | reference
  std::string created_at;
};

// A candidate is a source + assignment + dtype + arch + options; `hash` is its identity.
struct CandidateRecord {
  int64_t id = 0;
  std::string hash;
  int64_t source_id = 0;
  Json params = Json::object();  // {"BLOCK": 256, "VEC": 4}
  std::string op;
  std::string dtype;
  std::string arch;              // "sm_90"
  std::string compile_options;   // extra NVRTC options, canonical text
  std::optional<int64_t> run_id;
  int generation = 0;
  int island = 0;
  std::string op_name;           // the operator that made it: seed, param_tweak, ...
  std::vector<int64_t> parents;  // candidate ids
  std::string status = "pending";  // pending | ok | failed_<rung> | crashed | timeout | suspect
  std::optional<double> fitness;
  Json features = Json::object();  // for diversity (block size, regs, smem, ...)
  std::string created_at;
};

struct RungRecord {
  int64_t id = 0;
  int64_t candidate_id = 0;
  std::string name;  // static | compile | launch | correctness | timing | fitness | profile
  bool ok = false;
  Json metrics = Json::object();
  std::string log;
  double duration_ms = 0.0;
  std::string device_uuid;  // empty for CPU rungs
  std::string created_at;
};

struct TimingRecord {
  int64_t id = 0;
  int64_t candidate_id = 0;
  std::string device_uuid;
  std::string shape;  // "4096x1024"
  double median_us = 0, p10_us = 0, p90_us = 0;
  int64_t n = 0;
  Json samples_us = Json::array();
  Json protocol = Json::object();  // flush bytes, reps, timer, warmup, stop rule
  double roofline_us = 0;
  double fraction = 0;
};

struct DeviceRecord {
  std::string uuid;
  std::string name;
  std::string arch;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t mem_bytes = 0;
  double copy_gbps = 0;     // measured device-to-device copy, bytes read + written
  double fp32_gflops = 0;   // measured FMA peak
  Json calibration = Json::object();
  std::string calibrated_at;
};

// Everything one evaluation produced; the store commits it in one transaction and
// sets the candidate's status and fitness.
struct EvaluationRecord {
  int64_t candidate_id = 0;
  std::string status;
  std::optional<double> fitness;
  Json features = Json::object();  // merged into the candidate's features
  std::vector<RungRecord> rungs;
  std::vector<TimingRecord> timings;
};

struct CandidateQuery {
  std::optional<int64_t> run_id;
  std::optional<std::string> op;
  std::optional<std::string> dtype;
  std::optional<std::string> status;  // exact status
  bool only_ok = false;               // status == "ok"
  bool order_by_fitness = false;      // best first; else by id
  int limit = -1;
};

// One call to an LLM provider, whatever its outcome. Never holds an API key: the
// prompt and response are the messages exchanged, nothing from the request headers.
struct LlmCallRecord {
  int64_t id = 0;
  std::optional<int64_t> run_id;
  std::optional<int64_t> candidate_id;  // the child it produced, if any
  std::optional<int64_t> parent_id;     // the candidate the prompt was built from
  std::string provider;                 // the configured provider's name
  std::string model;
  std::string op_name;                  // the operator: llm_rewrite | llm_diff | repair
  std::string prompt;
  std::string response;
  int64_t tokens_in = 0;
  int64_t tokens_out = 0;
  double latency_s = 0;
  double cost_usd = 0;
  std::string outcome;                  // ok | rate_limited | timeout | ... | parse_error
  std::string error;                    // one line; "" when ok
  std::string created_at;               // filled by the store
};

// A candidate recorded elsewhere that a run adopted (table run_members).
struct RunMemberRecord {
  int64_t run_id = 0;
  int64_t candidate_id = 0;
  int generation = 0;
  int island = 0;
  std::string op_name;
};

}  // namespace kevolve::db

// LLM providers: openai (Chat Completions; any compatible server through base_url),
// anthropic (Messages API), command (an external program: prompt on stdin, reply on
// stdout) and replay (recorded responses from a folder). Each is configured by name
// (configs/llm.json); several may be weighted into an ensemble.
//
// API keys are read from the environment variable the config names, at call time, and
// are never stored, logged or put in error messages.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kevolve/core/status.h"
#include "kevolve/operators/llm/transport.h"

namespace kevolve::llm {

// One reply recorded earlier (a replay provider serves these in order).
struct RecordedReply {
  std::string text;
  int64_t tokens_in = 0, tokens_out = 0;
};

struct ProviderConfig {
  std::string name;               // the config's key, e.g. "local-qwen"
  std::string kind;               // openai | anthropic | command | replay
  std::string model;
  std::string base_url;           // openai: ".../v1"; anthropic: "https://api.anthropic.com"
  std::string api_key_env;        // name of the environment variable holding the key ("" = none)
  double temperature = 0.7;
  int max_tokens = 4096;
  double timeout_s = 120;
  int max_concurrency = 4;
  double price_in_per_mtok = 0;   // USD per million input tokens
  double price_out_per_mtok = 0;
  double weight = 1;              // ensemble weight
  std::string command;            // command: the program line, run by /bin/sh
  std::string replay_dir;         // replay: folder of recorded responses (*.txt or *.json, in name order)
  std::string replay_db;          // replay: an earlier run's database; its llm_calls responses, in order
  int64_t replay_run = 0;         // replay_db: only this run's calls (0: every run's)
  std::vector<RecordedReply> replay_replies;  // replay: the replies themselves (read from replay_db by the engine)
  int max_retries = 4;            // on 429, 5xx, timeouts and connection errors
  double backoff_s = 1.0;         // first retry delay; doubles, with jitter; Retry-After wins
  int breaker_failures = 5;       // consecutive failed calls that open the circuit breaker
};

struct Message {
  std::string role;     // system | user | assistant
  std::string content;
};

// The outcome of one call (after its retries).
struct Reply {
  std::string outcome = "ok";  // ok | rate_limited | http_error | timeout | connection | malformed |
                               // truncated | refused | breaker_open | budget | command_failed | exhausted
  std::string text;            // the model's text ("" unless ok or truncated)
  std::string error;           // one line, never containing a key
  int64_t tokens_in = 0, tokens_out = 0;
  double cost_usd = 0;
  double latency_s = 0;
  int attempts = 0;
  int http_status = 0;
  bool ok() const { return outcome == "ok"; }
};

// Sleeping and randomness, replaceable so tests of backoff need not wait.
struct RetryEnv {
  std::function<void(double seconds)> sleep;  // default: std::this_thread::sleep_for
  std::function<double()> jitter;             // in [0, 1); default: a thread-local RNG
};

class Provider {
 public:
  virtual ~Provider() = default;
  // Thread-safe; at most config().max_concurrency calls run at once (others wait).
  virtual Reply Complete(const std::vector<Message>& messages) = 0;
  virtual const ProviderConfig& config() const = 0;
  // True once the circuit breaker has opened (the run goes on without this provider).
  virtual bool broken() const = 0;
};

// Cancels the LLM calls of this process (Ctrl-C in a search): a call not yet started
// returns outcome "cancelled" at once; one in progress stops within about a second (an
// HTTP transfer is aborted, a command's process group killed, a backoff sleep cut
// short) and returns "cancelled". CancelLlmCalls(false) lifts it (a new search does).
void CancelLlmCalls(bool cancel = true);
bool LlmCallsCancelled();

// `transport` may be null for command and replay. The returned provider wraps retries,
// backoff with jitter (honouring Retry-After), the concurrency limit, token and cost
// accounting, and the circuit breaker.
Result<std::unique_ptr<Provider>> MakeProvider(const ProviderConfig& cfg, std::shared_ptr<HttpTransport> transport,
                                               RetryEnv env = {});

// Thread-safe spend tracking against --max-cost.
class CostMeter {
 public:
  explicit CostMeter(double max_usd = 0) : max_usd_(max_usd) {}  // 0: no limit
  // False (and records nothing) once the budget is spent.
  bool Allow() const;
  void Add(double usd);
  double spent() const;

 private:
  double max_usd_;
  mutable std::mutex mu_;
  double spent_ = 0;  // GUARDED_BY(mu_)
};

// Loads provider configs from a JSON-with-comments file: {"providers": {"name": {...}}}.
// Errors name the file and field.
Result<std::vector<ProviderConfig>> LoadProviderConfigs(const std::string& path);

}  // namespace kevolve::llm

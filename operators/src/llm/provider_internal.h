// Internals shared by the provider implementations. A Backend makes one attempt at a
// call; the wrapper in provider.cpp adds retries, the concurrency limit, cost and the
// circuit breaker, so each backend only speaks its own protocol.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kevolve/core/json_file.h"
#include "kevolve/core/status.h"
#include "kevolve/operators/llm/provider.h"
#include "kevolve/operators/llm/transport.h"

namespace kevolve::llm::internal {

// What one attempt produced, before any retry.
struct Attempt {
  Reply reply;                // outcome, text, error, tokens and http_status of this attempt
  bool retryable = false;     // 429, 5xx, timeouts, connection errors, malformed bodies
  double retry_after_s = -1;  // from a Retry-After header; < 0 when absent
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Thread-safe; never throws.
  virtual Attempt Call(const std::vector<Message>& messages) = 0;
};

// REQUIRES: cfg passed ValidateProviderConfig. The HTTP kinds need a non-null transport.
std::unique_ptr<Backend> MakeOpenAiBackend(const ProviderConfig& cfg, std::shared_ptr<HttpTransport> transport);
std::unique_ptr<Backend> MakeAnthropicBackend(const ProviderConfig& cfg, std::shared_ptr<HttpTransport> transport);
std::unique_ptr<Backend> MakeCommandBackend(const ProviderConfig& cfg);
// Fails when replay_dir cannot be listed or holds no response files.
Result<std::unique_ptr<Backend>> MakeReplayBackend(const ProviderConfig& cfg);

// The checks both MakeProvider and the config loader apply (kind, per-kind required
// fields, ranges): `error(field, what)` is called once per problem found.
void CheckProviderConfig(const ProviderConfig& cfg,
                         const std::function<void(const std::string& field, const std::string& what)>& error);
// The same as one Status: "provider 'NAME': field 'F': WHAT", one line per problem.
Status ValidateProviderConfig(const ProviderConfig& cfg);

// The key named by cfg.api_key_env, read now; "" when unset or api_key_env is "".
std::string ApiKey(const ProviderConfig& cfg);
// Replaces every secret we know of with "[redacted]": the value of cfg.api_key_env and
// the values of environment variables whose names look secret (KEY, TOKEN, SECRET,
// PASSWORD). Applied to all text a provider hands out, defensively.
std::string ScrubSecrets(std::string text, const ProviderConfig& cfg);
// Collapses whitespace runs (newlines included) to one space and cuts to max_chars.
std::string OneLine(const std::string& text, size_t max_chars);
// Nothing reports usage for command output; about 4 characters per token is the usual
// rule of thumb for English and source code, so that is the estimate.
int64_t EstimateTokens(size_t chars);
// "https://x/v1/" + "/chat/completions" without a doubled slash.
std::string JoinUrl(const std::string& base, const std::string& path);

// Posts `req` (a JSON body) and classifies the result: transport errors, 429, 5xx and
// other HTTP errors become failed attempts; a 2xx body that parses as JSON goes to
// `parse`, one that does not becomes "malformed".
// `parse` may throw Json::exception on an unexpected shape; that is "malformed" too.
using ParseFn = Attempt (*)(const Json& body);
Attempt PostJson(HttpTransport& transport, const HttpRequest& req, ParseFn parse);

// Lenient field access for response bodies: the value, or ""/0 when absent or of
// another type (servers differ in what they fill in).
std::string StringOr(const Json& obj, const char* key);
int64_t IntOr(const Json& obj, const char* key);
// The failed attempt for an error object in a body ({"error": {"message", "code"}} or
// {"error": "..."}), which some servers send with status 200. 429/5xx codes retry.
Attempt ErrorBodyAttempt(const Json& body, int http_status);
// A failed attempt with `outcome` and `error`; malformed attempts are retryable (once).
Attempt Failed(const std::string& outcome, const std::string& error, bool retryable);

}  // namespace kevolve::llm::internal

// The wrapper every provider kind shares: the concurrency limit, retries with backoff
// (honouring Retry-After), token cost, key scrubbing and the circuit breaker. The
// backends in provider_{openai,anthropic,command,replay}.cpp make single attempts.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "provider_internal.h"

namespace kevolve::llm {

namespace {

constexpr double kMaxRetryDelayS = 300;  // caps both backoff and a server's Retry-After
constexpr size_t kErrorChars = 400;
constexpr int kMaxMalformedAttempts = 2;  // a malformed body is retried once, no more
constexpr double kTokensPerMtok = 1e6;

constexpr char kDefaultOpenAiUrl[] = "https://api.openai.com/v1";
constexpr char kDefaultAnthropicUrl[] = "https://api.anthropic.com";

// Outcomes that say the provider is not working (the breaker counts them). A truncated
// or refused reply still came from a working model.
bool IsFailure(const std::string& outcome) {
  return outcome != "ok" && outcome != "truncated" && outcome != "refused" && outcome != "cancelled";
}

std::atomic<bool> g_cancelled{false};

// Sleeps in short steps so that a cancellation cuts a long backoff short.
void DefaultSleep(double seconds) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (!LlmCallsCancelled()) {
    const Clock::duration left = end - Clock::now();
    if (left <= Clock::duration::zero()) return;
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::milliseconds(50)));
  }
}

Reply CancelledReply() {
  Reply r;
  r.outcome = "cancelled";
  r.error = "cancelled: the search was interrupted";
  return r;
}

double DefaultJitter() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

// A counting semaphore: at most `n` holders.
class Slots {
 public:
  explicit Slots(int n) : free_(n) {}
  void Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return free_ > 0; });
    --free_;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;  // GUARDED_BY(mu_)
};

class SlotGuard {
 public:
  explicit SlotGuard(Slots& s) : s_(s) { s_.Acquire(); }
  ~SlotGuard() { s_.Release(); }
  SlotGuard(const SlotGuard&) = delete;
  SlotGuard& operator=(const SlotGuard&) = delete;

 private:
  Slots& s_;
};

class WrappedProvider : public Provider {
 public:
  WrappedProvider(ProviderConfig cfg, std::unique_ptr<internal::Backend> backend, RetryEnv env)
      : cfg_(std::move(cfg)), backend_(std::move(backend)), env_(std::move(env)), slots_(cfg_.max_concurrency) {}

  Reply Complete(const std::vector<Message>& messages) override {
    if (LlmCallsCancelled()) return CancelledReply();
    if (broken()) return BreakerReply();
    // The slot is held through the backoff sleeps too: a rate-limited provider should
    // see less traffic, not the waiting calls rushing in.
    SlotGuard slot(slots_);
    if (LlmCallsCancelled()) return CancelledReply();
    if (broken()) return BreakerReply();
    auto start = std::chrono::steady_clock::now();
    internal::Attempt last;
    int64_t tokens_in = 0, tokens_out = 0;
    int attempts = 0, malformed = 0;
    while (true) {
      last = backend_->Call(messages);
      ++attempts;
      tokens_in += last.reply.tokens_in;  // every attempt that reported usage is billed
      tokens_out += last.reply.tokens_out;
      if (last.reply.outcome == "malformed") ++malformed;
      bool retry = last.retryable && attempts <= cfg_.max_retries && malformed < kMaxMalformedAttempts;
      if (!retry || LlmCallsCancelled()) break;
      env_.sleep(RetryDelay(attempts - 1, last.retry_after_s));
      if (LlmCallsCancelled()) break;
    }
    if (LlmCallsCancelled() && last.reply.outcome != "ok") {
      // Aborted (or given up between attempts) because the search stopped: say so,
      // and keep it out of the breaker's count.
      const int64_t in = last.reply.tokens_in, out = last.reply.tokens_out;
      last.reply = CancelledReply();
      last.reply.tokens_in = in;
      last.reply.tokens_out = out;
    }

    Reply r = std::move(last.reply);
    r.tokens_in = tokens_in;
    r.tokens_out = tokens_out;
    r.cost_usd = static_cast<double>(tokens_in) * cfg_.price_in_per_mtok / kTokensPerMtok +
                 static_cast<double>(tokens_out) * cfg_.price_out_per_mtok / kTokensPerMtok;
    r.attempts = attempts;
    r.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r.outcome != "ok" && r.outcome != "truncated") r.text.clear();
    r.text = internal::ScrubSecrets(std::move(r.text), cfg_);
    r.error = internal::OneLine(internal::ScrubSecrets(r.error, cfg_), kErrorChars);
    RecordOutcome(r);
    return r;
  }

  const ProviderConfig& config() const override { return cfg_; }
  bool broken() const override { return broken_.load(std::memory_order_acquire); }

 private:
  // Retry-After wins; otherwise backoff_s * 2^attempt * (1 + jitter).
  double RetryDelay(int attempt, double retry_after_s) const {
    if (retry_after_s >= 0) return std::min(retry_after_s, kMaxRetryDelayS);
    double jitter = std::clamp(env_.jitter(), 0.0, 1.0);
    return std::min(cfg_.backoff_s * std::ldexp(1.0, attempt) * (1.0 + jitter), kMaxRetryDelayS);
  }

  void RecordOutcome(const Reply& r) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!IsFailure(r.outcome)) {
      consecutive_failures_ = 0;
      return;
    }
    ++consecutive_failures_;
    if (cfg_.breaker_failures <= 0 || consecutive_failures_ < cfg_.breaker_failures) return;
    if (broken_.exchange(true, std::memory_order_acq_rel)) return;
    breaker_note_ = "disabled by its circuit breaker after " + std::to_string(consecutive_failures_) +
                    " consecutive failures (last: " + r.outcome + ": " + r.error + ")";
    std::fprintf(stderr, "kevolve: LLM provider %s disabled after %d consecutive failures (last: %s: %s); going on without it\n",
                 cfg_.name.c_str(), consecutive_failures_, r.outcome.c_str(), r.error.c_str());
  }

  Reply BreakerReply() const {
    Reply r;
    r.outcome = "breaker_open";
    std::lock_guard<std::mutex> lock(mu_);
    r.error = "provider " + cfg_.name + " " + breaker_note_;
    return r;
  }

  const ProviderConfig cfg_;
  const std::unique_ptr<internal::Backend> backend_;
  const RetryEnv env_;
  Slots slots_;
  std::atomic<bool> broken_{false};
  mutable std::mutex mu_;
  int consecutive_failures_ = 0;  // GUARDED_BY(mu_)
  std::string breaker_note_;      // GUARDED_BY(mu_)
};

}  // namespace

void CancelLlmCalls(bool cancel) { g_cancelled.store(cancel, std::memory_order_release); }
bool LlmCallsCancelled() { return g_cancelled.load(std::memory_order_acquire); }

Result<std::unique_ptr<Provider>> MakeProvider(const ProviderConfig& cfg, std::shared_ptr<HttpTransport> transport,
                                               RetryEnv env) {
  Status s = internal::ValidateProviderConfig(cfg);
  if (!s.ok()) return s;
  ProviderConfig c = cfg;
  if (!env.sleep) env.sleep = DefaultSleep;
  if (!env.jitter) env.jitter = DefaultJitter;
  bool http = c.kind == "openai" || c.kind == "anthropic";
  if (http && !transport) transport = MakeCurlTransport();
  std::unique_ptr<internal::Backend> backend;
  if (c.kind == "openai") {
    if (c.base_url.empty()) c.base_url = kDefaultOpenAiUrl;
    backend = internal::MakeOpenAiBackend(c, transport);
  } else if (c.kind == "anthropic") {
    if (c.base_url.empty()) c.base_url = kDefaultAnthropicUrl;
    backend = internal::MakeAnthropicBackend(c, transport);
  } else if (c.kind == "command") {
    backend = internal::MakeCommandBackend(c);
  } else {
    auto replay = internal::MakeReplayBackend(c);
    if (!replay.ok()) return replay.status();
    backend = std::move(*replay);
  }
  std::unique_ptr<Provider> p = std::make_unique<WrappedProvider>(std::move(c), std::move(backend), std::move(env));
  return p;
}

}  // namespace kevolve::llm

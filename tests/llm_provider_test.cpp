// Tests for the LLM providers (operators/llm/provider.h, transport.h): both HTTP APIs
// over libcurl against a loopback mock server, retries and backoff (with a recorded,
// no-op sleep), the circuit breaker, the concurrency limit, key hygiene, the command
// and replay kinds, the config loader and the cost meter.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kevolve/operators/llm/provider.h"
#include "kevolve/operators/llm/transport.h"
#include "llm_mock_server.h"
#include "test_util.h"

namespace kevolve::llm {
namespace {

using Catch::Matchers::Contains;
using kevolve::testing::AnthropicBody;
using kevolve::testing::LlmMockServer;
using kevolve::testing::MockResponse;
using kevolve::testing::OpenAiBody;

constexpr char kKeyEnv[] = "KEVOLVE_TEST_LLM_API_KEY";
constexpr char kKey[] = "sk-kevolve-test-7f3a9c2e51d4";

const std::vector<Message> kMessages = {{"system", "You write CUDA kernels."}, {"user", "Make it faster."}};

// Records the backoff sleeps instead of sleeping; jitter is fixed at 0.5.
struct FakeClock {
  std::mutex mu;
  std::vector<double> sleeps;  // GUARDED_BY(mu)

  RetryEnv Env() {
    RetryEnv env;
    env.sleep = [this](double s) {
      std::lock_guard<std::mutex> lock(mu);
      sleeps.push_back(s);
    };
    env.jitter = [] { return 0.5; };
    return env;
  }
  std::vector<double> Sleeps() {
    std::lock_guard<std::mutex> lock(mu);
    return sleeps;
  }
};

ProviderConfig HttpConfig(const std::string& kind, const std::string& base_url) {
  ProviderConfig c;
  c.name = "mock-" + kind;
  c.kind = kind;
  c.model = "test-model";
  c.base_url = base_url;
  c.temperature = 0.25;
  c.max_tokens = 321;
  c.timeout_s = 5;
  c.max_retries = 3;
  c.backoff_s = 1;
  c.price_in_per_mtok = 2;
  c.price_out_per_mtok = 10;
  return c;
}

ProviderConfig OpenAi(const LlmMockServer& s) { return HttpConfig("openai", s.openai_url()); }
ProviderConfig Anthropic(const LlmMockServer& s) { return HttpConfig("anthropic", s.url()); }

std::unique_ptr<Provider> Make(const ProviderConfig& cfg, RetryEnv env = {}) {
  auto p = MakeProvider(cfg, MakeCurlTransport(), std::move(env));
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  return std::move(*p);
}

// Redirects stderr (fd 2) to a temporary file until Finish().
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    file_ = std::tmpfile();
    ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() {
    if (file_) Finish();
  }
  std::string Finish() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    std::rewind(file_);
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) text.append(buf, n);
    std::fclose(file_);
    file_ = nullptr;
    return text;
  }

 private:
  int saved_ = -1;
  std::FILE* file_ = nullptr;
};

TEST_CASE("openai: a successful call returns text, tokens and cost", "[llm]") {
  LlmMockServer server;
  server.Push({200, OpenAiBody("__global__ void k() {}", 1000, 500)});
  auto p = Make(OpenAi(server));
  Reply r = p->Complete(kMessages);
  INFO(r.error);
  REQUIRE(r.ok());
  CHECK(r.text == "__global__ void k() {}");
  CHECK(r.tokens_in == 1000);
  CHECK(r.tokens_out == 500);
  CHECK(r.cost_usd == Approx(1000 * 2 / 1e6 + 500 * 10 / 1e6));
  CHECK(r.attempts == 1);
  CHECK(r.http_status == 200);
  CHECK(r.latency_s > 0);

  auto reqs = server.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].path == "/v1/chat/completions");
  CHECK(reqs[0].headers.count("authorization") == 0);  // no api_key_env: no key sent
  auto body = nlohmann::json::parse(reqs[0].body);
  CHECK(body["model"] == "test-model");
  CHECK(body["temperature"] == Approx(0.25));
  CHECK(body["max_tokens"] == 321);
  REQUIRE(body["messages"].size() == 2);
  CHECK(body["messages"][0]["role"] == "system");
  CHECK(body["messages"][1]["content"] == "Make it faster.");
}

TEST_CASE("anthropic: a successful call returns text, tokens and cost", "[llm]") {
  LlmMockServer server;
  server.Push({200, AnthropicBody("fast kernel", 2000, 100)});
  auto p = Make(Anthropic(server));
  Reply r = p->Complete(kMessages);
  INFO(r.error);
  REQUIRE(r.ok());
  CHECK(r.text == "fast kernel");
  CHECK(r.tokens_in == 2000);
  CHECK(r.tokens_out == 100);
  CHECK(r.cost_usd == Approx(2000 * 2 / 1e6 + 100 * 10 / 1e6));

  auto reqs = server.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].path == "/v1/messages");
  CHECK(reqs[0].headers.at("anthropic-version") == "2023-06-01");
  CHECK_THAT(reqs[0].headers.at("content-type"), Contains("application/json"));
  auto body = nlohmann::json::parse(reqs[0].body);
  CHECK(body["system"] == "You write CUDA kernels.");
  REQUIRE(body["messages"].size() == 1);  // the system message is not a turn
  CHECK(body["messages"][0]["role"] == "user");
  CHECK(body["max_tokens"] == 321);
}

TEST_CASE("anthropic: text blocks are concatenated, others skipped", "[llm]") {
  LlmMockServer server;
  server.Push({200, R"({"type":"message","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"x"},)"
                    R"({"type":"text","text":"b"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}})"});
  Reply r = Make(Anthropic(server))->Complete(kMessages);
  REQUIRE(r.ok());
  CHECK(r.text == "ab");
}

TEST_CASE("429 with Retry-After is honoured, then backoff with jitter", "[llm]") {
  LlmMockServer server;
  server.Push({429, R"({"error":{"message":"slow down"}})", {{"Retry-After", "7"}}});
  server.Push({429, R"({"error":{"message":"slow down"}})"});
  server.Push({200, OpenAiBody("ok now")});
  FakeClock clock;
  Reply r = Make(OpenAi(server), clock.Env())->Complete(kMessages);
  INFO(r.error);
  REQUIRE(r.ok());
  CHECK(r.text == "ok now");
  CHECK(r.attempts == 3);
  // Retry-After wins; then backoff_s * 2^1 * (1 + 0.5).
  CHECK(clock.Sleeps() == std::vector<double>{7.0, 3.0});
}

TEST_CASE("500 then success is retried once", "[llm]") {
  LlmMockServer server;
  server.Push({500, "internal error"});
  server.Push({200, AnthropicBody("recovered")});
  FakeClock clock;
  Reply r = Make(Anthropic(server), clock.Env())->Complete(kMessages);
  REQUIRE(r.ok());
  CHECK(r.text == "recovered");
  CHECK(r.attempts == 2);
  CHECK(clock.Sleeps() == std::vector<double>{1.5});
}

TEST_CASE("an error object in a 200 body (OpenRouter style) is retried by its code", "[llm]") {
  LlmMockServer server;
  server.Push({200, R"({"error":{"message":"upstream overloaded","code":503}})", {{"Retry-After", "2"}}});
  server.Push({200, OpenAiBody("second try")});
  FakeClock clock;
  Reply r = Make(OpenAi(server), clock.Env())->Complete(kMessages);
  REQUIRE(r.ok());
  CHECK(r.attempts == 2);
  CHECK(clock.Sleeps() == std::vector<double>{1.5});  // Retry-After is read on HTTP errors only
}

TEST_CASE("a client error other than 429 is not retried", "[llm]") {
  LlmMockServer server;
  server.Push({400, R"({"error":{"message":"max_tokens too large"}})"});
  FakeClock clock;
  Reply r = Make(OpenAi(server), clock.Env())->Complete(kMessages);
  CHECK(r.outcome == "http_error");
  CHECK(r.http_status == 400);
  CHECK(r.attempts == 1);
  CHECK_THAT(r.error, Contains("max_tokens too large"));
  CHECK(r.text.empty());
  CHECK(server.request_count() == 1);
}

TEST_CASE("a refused connection is retried, then reported as connection", "[llm]") {
  auto cfg = HttpConfig("openai", "http://127.0.0.1:" + std::to_string(kevolve::testing::UnusedLoopbackPort()) + "/v1");
  cfg.max_retries = 2;
  FakeClock clock;
  Reply r = Make(cfg, clock.Env())->Complete(kMessages);
  CHECK(r.outcome == "connection");
  CHECK(r.error == "connection refused");
  CHECK(r.attempts == 3);
  CHECK(r.http_status == 0);
  CHECK(clock.Sleeps() == std::vector<double>{1.5, 3.0});
}

TEST_CASE("a server slower than timeout_s gives outcome timeout", "[llm]") {
  LlmMockServer server;
  server.SetFallback({200, OpenAiBody("too late"), {}, 5.0});
  auto cfg = OpenAi(server);
  cfg.timeout_s = 0.3;
  cfg.max_retries = 1;
  FakeClock clock;
  auto start = std::chrono::steady_clock::now();
  Reply r = Make(cfg, clock.Env())->Complete(kMessages);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.outcome == "timeout");
  CHECK(r.error == "timed out");
  CHECK(r.attempts == 2);
  CHECK(took < 3.0);
}

TEST_CASE("malformed JSON is retried once, then reported as malformed", "[llm]") {
  LlmMockServer server;
  server.SetFallback({200, "<html>this is not json</html>"});
  FakeClock clock;
  Reply r = Make(OpenAi(server), clock.Env())->Complete(kMessages);
  CHECK(r.outcome == "malformed");
  CHECK(r.attempts == 2);
  CHECK(r.text.empty());
  CHECK(server.request_count() == 2);
}

TEST_CASE("a JSON body of the wrong shape is malformed", "[llm]") {
  LlmMockServer server;
  server.SetFallback({200, R"({"choices": "nope"})"});
  auto cfg = OpenAi(server);
  cfg.max_retries = 0;
  Reply r = Make(cfg)->Complete(kMessages);
  CHECK(r.outcome == "malformed");
}

TEST_CASE("a reply cut at max_tokens is truncated, text kept", "[llm]") {
  LlmMockServer server;
  server.Push({200, OpenAiBody("half a kern", 10, 321, "length")});
  server.Push({200, AnthropicBody("half a kern", 10, 321, "max_tokens")});
  Reply a = Make(OpenAi(server))->Complete(kMessages);
  CHECK(a.outcome == "truncated");
  CHECK(a.text == "half a kern");
  CHECK(a.attempts == 1);
  Reply b = Make(Anthropic(server))->Complete(kMessages);
  CHECK(b.outcome == "truncated");
  CHECK(b.text == "half a kern");
}

TEST_CASE("a refusal is reported as refused with no text", "[llm]") {
  LlmMockServer server;
  server.Push({200, AnthropicBody("I can't help with that.", 10, 5, "refusal")});
  server.Push({200, R"({"choices":[{"message":{"role":"assistant","content":null,"refusal":"no"},"finish_reason":"stop"}]})"});
  Reply a = Make(Anthropic(server))->Complete(kMessages);
  CHECK(a.outcome == "refused");
  CHECK(a.text.empty());
  Reply b = Make(OpenAi(server))->Complete(kMessages);
  CHECK(b.outcome == "refused");
  CHECK(b.attempts == 1);
}

TEST_CASE("the circuit breaker opens after N failures and stops calling", "[llm]") {
  LlmMockServer server;  // the fallback answers 500 to everything
  auto cfg = OpenAi(server);
  cfg.name = "flaky";
  cfg.max_retries = 0;
  cfg.breaker_failures = 3;
  auto p = Make(cfg);
  StderrCapture capture;
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(p->broken());
    CHECK(p->Complete(kMessages).outcome == "http_error");
  }
  CHECK(p->broken());
  for (int i = 0; i < 3; ++i) {
    Reply r = p->Complete(kMessages);
    CHECK(r.outcome == "breaker_open");
    CHECK(r.attempts == 0);
  }
  std::string err = capture.Finish();
  CHECK(server.request_count() == 3);
  CHECK_THAT(err, Contains("kevolve: LLM provider flaky disabled after 3 consecutive failures (last: http_error"));
  CHECK_THAT(err, Contains("going on without it"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}

TEST_CASE("a success resets the breaker's count", "[llm]") {
  LlmMockServer server;
  for (int i = 0; i < 2; ++i) server.Push({500, "x"});
  server.Push({200, OpenAiBody("fine")});
  for (int i = 0; i < 2; ++i) server.Push({500, "x"});
  auto cfg = OpenAi(server);
  cfg.max_retries = 0;
  cfg.breaker_failures = 3;
  auto p = Make(cfg);
  for (int i = 0; i < 5; ++i) p->Complete(kMessages);
  CHECK_FALSE(p->broken());
}

TEST_CASE("max_concurrency bounds the calls in flight", "[llm]") {
  LlmMockServer server;
  server.SetFallback({200, OpenAiBody("x"), {}, 0.1});
  auto cfg = OpenAi(server);
  cfg.max_concurrency = 2;
  auto p = Make(cfg);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&] {
      if (p->Complete(kMessages).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == 6);
  CHECK(server.request_count() == 6);
  CHECK(server.max_in_flight() == 2);
}

TEST_CASE("the API key is sent but never appears in a reply", "[llm]") {
  REQUIRE(::setenv(kKeyEnv, kKey, 1) == 0);
  LlmMockServer server;
  // Servers echo keys in error messages; none of it may come back out.
  const std::string echo = std::string(R"({"error":{"message":"Incorrect API key provided: )") + kKey + "\"}}";
  server.Push({401, echo});
  server.Push({500, echo});
  server.Push({200, std::string("not json ") + kKey});
  server.Push({401, echo});

  auto oa = OpenAi(server);
  oa.api_key_env = kKeyEnv;
  oa.max_retries = 0;
  auto an = Anthropic(server);
  an.api_key_env = kKeyEnv;
  an.max_retries = 0;
  auto openai = Make(oa);
  auto anthropic = Make(an);
  std::vector<Reply> replies = {openai->Complete(kMessages), openai->Complete(kMessages),
                                openai->Complete(kMessages), anthropic->Complete(kMessages)};
  CHECK(replies[0].outcome == "http_error");
  CHECK(replies[1].outcome == "http_error");
  CHECK(replies[2].outcome == "malformed");
  CHECK(replies[3].outcome == "http_error");
  for (const auto& r : replies) {
    INFO(r.error);
    CHECK(r.error.find(kKey) == std::string::npos);
    CHECK(r.text.find(kKey) == std::string::npos);
    CHECK_THAT(r.error, Contains("[redacted]"));
  }
  auto reqs = server.requests();
  REQUIRE(reqs.size() == 4);
  CHECK(reqs[0].headers.at("authorization") == std::string("Bearer ") + kKey);
  CHECK(reqs[3].headers.at("x-api-key") == kKey);
  CHECK(reqs[0].body.find(kKey) == std::string::npos);
  ::unsetenv(kKeyEnv);
}

TEST_CASE("an empty key variable sends no key", "[llm]") {
  REQUIRE(::setenv(kKeyEnv, "", 1) == 0);
  LlmMockServer server;
  server.Push({200, AnthropicBody("x")});
  auto cfg = Anthropic(server);
  cfg.api_key_env = kKeyEnv;
  CHECK(Make(cfg)->Complete(kMessages).ok());
  CHECK(server.requests().at(0).headers.count("x-api-key") == 0);
  ::unsetenv(kKeyEnv);
}

ProviderConfig CommandConfig(const std::string& command) {
  ProviderConfig c;
  c.name = "cmd";
  c.kind = "command";
  c.command = command;
  c.timeout_s = 10;
  c.max_retries = 0;
  return c;
}

TEST_CASE("command: stdout is the reply; tokens are estimated", "[llm]") {
  Reply r = Make(CommandConfig("cat > /dev/null; printf hello"))->Complete(kMessages);
  INFO(r.error);
  REQUIRE(r.ok());
  CHECK(r.text == "hello");
  CHECK(r.tokens_out == 2);  // ceil(5 / 4)
  CHECK(r.tokens_in > 0);
}

TEST_CASE("command: the prompt is rendered as ### sections on stdin", "[llm]") {
  Reply r = Make(CommandConfig("cat"))->Complete(kMessages);
  REQUIRE(r.ok());
  CHECK(r.text == "### system\nYou write CUDA kernels.\n\n### user\nMake it faster.\n");
}

TEST_CASE("command: large prompts neither deadlock nor kill us", "[llm]") {
  std::vector<Message> big = {{"user", std::string(3u << 20, 'x')}};
  Reply echo = Make(CommandConfig("cat"))->Complete(big);
  REQUIRE(echo.ok());
  CHECK(echo.text.size() == (3u << 20) + 10);  // "### user\n" + body + "\n"
  // A command that never reads stdin: our writes hit EPIPE, not SIGPIPE.
  Reply early = Make(CommandConfig("printf early"))->Complete(big);
  INFO(early.error);
  CHECK(early.ok());
  CHECK(early.text == "early");
}

TEST_CASE("command: a failing command reports its status and stderr", "[llm]") {
  REQUIRE(::setenv(kKeyEnv, kKey, 1) == 0);
  auto cfg = CommandConfig(std::string("cat > /dev/null; echo \"bad key $") + kKeyEnv + "\" >&2; echo oops >&2; exit 3");
  cfg.api_key_env = kKeyEnv;
  Reply r = Make(cfg)->Complete(kMessages);
  CHECK(r.outcome == "command_failed");
  CHECK_THAT(r.error, Contains("status 3"));
  CHECK_THAT(r.error, Contains("oops"));
  CHECK(r.error.find(kKey) == std::string::npos);
  CHECK(r.text.empty());
  ::unsetenv(kKeyEnv);
}

TEST_CASE("command: a hung command is killed at timeout_s", "[llm]") {
  auto cfg = CommandConfig("sleep 30");
  cfg.timeout_s = 0.3;
  auto start = std::chrono::steady_clock::now();
  Reply r = Make(cfg)->Complete(kMessages);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.outcome == "timeout");
  CHECK(took < 3.0);
}

TEST_CASE("replay: files are served in name order, cycling", "[llm]") {
  auto dir = kevolve::testing::MakeTempDir("llm_replay");
  kevolve::testing::WriteFile(dir / "b_second.txt", "second");
  kevolve::testing::WriteFile(dir / "a_first.json", R"({"text": "first", "tokens_in": 7, "tokens_out": 3})");
  kevolve::testing::WriteFile(dir / "c_third.md", "third");
  kevolve::testing::WriteFile(dir / ".hidden", "never");
  ProviderConfig c;
  c.name = "rp";
  c.kind = "replay";
  c.replay_dir = dir.string();
  c.price_out_per_mtok = 1e6;  // one dollar per output token
  auto p = Make(c);
  std::vector<std::string> got;
  for (int i = 0; i < 4; ++i) got.push_back(p->Complete(kMessages).text);
  CHECK(got == std::vector<std::string>{"first", "second", "third", "first"});
  Reply second = p->Complete(kMessages);
  CHECK(second.text == "second");
  CHECK(second.tokens_out == 0);  // plain files carry no usage
  p->Complete(kMessages);         // third
  Reply first = p->Complete(kMessages);
  CHECK(first.tokens_in == 7);
  CHECK(first.tokens_out == 3);
  CHECK(first.cost_usd == Approx(3.0));
}

TEST_CASE("replay: a bad recording or folder is an error", "[llm]") {
  auto dir = kevolve::testing::MakeTempDir("llm_replay_bad");
  kevolve::testing::WriteFile(dir / "a.json", R"({"txt": "typo"})");
  ProviderConfig c;
  c.name = "rp";
  c.kind = "replay";
  c.replay_dir = dir.string();
  Reply r = Make(c)->Complete(kMessages);
  CHECK(r.outcome == "malformed");
  CHECK(r.attempts == 1);

  c.replay_dir = (dir / "missing").string();
  auto p = MakeProvider(c, nullptr);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.error(), Contains("replay_dir"));
}

TEST_CASE("MakeProvider rejects invalid configs", "[llm]") {
  ProviderConfig c;
  c.name = "x";
  c.kind = "gpt";
  auto p = MakeProvider(c, nullptr);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.error(), Contains("field 'kind'"));
  c.kind = "openai";  // no model
  c.max_concurrency = 0;
  p = MakeProvider(c, nullptr);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.error(), Contains("field 'model'"));
  CHECK_THAT(p.error(), Contains("field 'max_concurrency'"));
}

Result<std::vector<ProviderConfig>> LoadText(const std::string& text) {
  auto dir = kevolve::testing::MakeTempDir("llm_config");
  auto path = dir / "llm.json";
  kevolve::testing::WriteFile(path, text);
  return LoadProviderConfigs(path.string());
}

TEST_CASE("config loader: fields, defaults and comments", "[llm]") {
  auto r = LoadText(R"({
    // comments are allowed
    "providers": {
      "local": {"kind": "openai", "model": "qwen", "base_url": "http://localhost:8000/v1",
                "temperature": 0.2, "max_tokens": 1000, "max_concurrency": 8, "weight": 2},
      "agent": {"kind": "command", "command": "my-agent --print", "timeout_s": 60}
    }})");
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->size() == 2);
  const ProviderConfig& agent = (*r)[0];  // name order
  const ProviderConfig& local = (*r)[1];
  CHECK(agent.name == "agent");
  CHECK(agent.command == "my-agent --print");
  CHECK(agent.timeout_s == 60);
  CHECK(agent.max_retries == ProviderConfig().max_retries);
  CHECK(local.kind == "openai");
  CHECK(local.temperature == Approx(0.2));
  CHECK(local.max_tokens == 1000);
  CHECK(local.max_concurrency == 8);
  CHECK(local.weight == 2);
}

TEST_CASE("config loader: errors name the file and the field", "[llm]") {
  auto check = [](const std::string& text, const std::vector<std::string>& needles) {
    auto r = LoadText(text);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error(), Contains("llm.json"));
    for (const auto& n : needles) CHECK_THAT(r.error(), Contains(n));
  };
  check(R"({"providers": {"a": {"kind": "openai", "modle": "x"}}})",
        {"'providers.a.modle': unknown field", "'providers.a.model': required for kind openai"});
  check(R"({"providers": {"a": {"kind": "openai", "model": "x", "temperature": "hot"}}})",
        {"'providers.a.temperature': expected a number"});
  check(R"({"providers": {"a": {"kind": "gemini", "model": "x"}}})", {"'providers.a.kind': must be one of"});
  check(R"({"providers": {"a": {"model": "x"}}})", {"'providers.a.kind': missing"});
  check(R"({"providers": {"a": {"kind": "command"}}})", {"'providers.a.command': required"});
  check(R"({"providers": {"a": {"kind": "replay"}}})", {"'providers.a.replay_dir': required"});
  check(R"({"providers": {"a": {"kind": "openai", "model": "x", "max_concurrency": 0}}})",
        {"'providers.a.max_concurrency': must be >= 1"});
  check(R"({"provider": {}})", {"'provider': unknown field", "'providers': missing"});
  check(R"({"providers": {"a": {"kind": "openai", "model": "x", "api_key": "sk-secret-value"}}})",
        {"'providers.a.api_key': API keys are read from the environment only"});
  // A key pasted where the variable name goes: rejected without echoing it.
  auto r = LoadText(R"({"providers": {"a": {"kind": "openai", "model": "x", "api_key_env": "sk-pasted-key-123"}}})");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error(), Contains("'providers.a.api_key_env': must name an environment variable"));
  CHECK(r.error().find("sk-pasted-key-123") == std::string::npos);
  check("{\"providers\": {\n  \"a\": {,}}}", {"llm.json:2:"});
}

TEST_CASE("config loader: the shipped example loads", "[llm]") {
  auto r = LoadProviderConfigs((kevolve::testing::SourceRoot() / "configs" / "llm.example.json").string());
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->size() >= 4);
}

TEST_CASE("CostMeter stops allowing calls once the budget is spent", "[llm]") {
  CostMeter unlimited;
  unlimited.Add(1e9);
  CHECK(unlimited.Allow());

  CostMeter m(1.0);
  CHECK(m.Allow());
  m.Add(0.6);
  CHECK(m.Allow());
  m.Add(0.5);
  CHECK_FALSE(m.Allow());
  CHECK(m.spent() == Approx(1.1));

  CostMeter shared(100.0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 1000; ++k) shared.Add(0.01);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(shared.spent() == Approx(40.0));
}

// Cancellation (Ctrl-C in a search): CancelLlmCalls is process-wide, so each test lifts it.
struct CancelGuard {
  ~CancelGuard() { CancelLlmCalls(false); }
};

TEST_CASE("cancel: a call after CancelLlmCalls returns cancelled without a request", "[llm]") {
  CancelGuard lift;
  LlmMockServer server;
  server.SetFallback({200, OpenAiBody("never")});
  auto p = Make(OpenAi(server));
  CancelLlmCalls(true);
  Reply r = p->Complete(kMessages);
  CHECK(r.outcome == "cancelled");
  CHECK(r.text.empty());
  CHECK(server.requests().empty());
  CancelLlmCalls(false);
  CHECK(p->Complete(kMessages).ok());  // lifted: calls go out again
}

TEST_CASE("cancel: an HTTP call in flight is aborted, not waited for", "[llm]") {
  CancelGuard lift;
  LlmMockServer server;
  server.SetFallback({200, OpenAiBody("too late"), {}, 20.0});  // answers after 20 s
  auto p = Make(OpenAi(server));
  auto call = std::async(std::launch::async, [&] { return p->Complete(kMessages); });
  while (server.requests().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CancelLlmCalls(true);
  Reply r = call.get();
  // Without the cancellation this would be the server's "ok" reply, 20 s later.
  CHECK(r.outcome == "cancelled");
  CHECK(r.attempts == 1);
  CHECK(r.text.empty());
}

TEST_CASE("cancel: a backoff sleep is cut short and no retry follows", "[llm]") {
  CancelGuard lift;
  LlmMockServer server;
  server.Push({429, R"({"error":{"message":"slow down"}})", {{"Retry-After", "60"}}});
  server.SetFallback({200, OpenAiBody("after the wait")});
  auto p = Make(OpenAi(server));  // the real sleep: 60 s unless cut short
  auto call = std::async(std::launch::async, [&] { return p->Complete(kMessages); });
  while (server.requests().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // into the sleep
  CancelLlmCalls(true);
  Reply r = call.get();
  CHECK(r.outcome == "cancelled");
  CHECK(r.attempts == 1);
  CHECK(server.requests().size() == 1);  // no second attempt
}

TEST_CASE("cancel: a command provider's process is killed", "[llm]") {
  CancelGuard lift;
  auto cfg = CommandConfig("sleep 30; echo late");
  cfg.timeout_s = 60;
  auto p = Make(cfg);
  auto call = std::async(std::launch::async, [&] { return p->Complete(kMessages); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CancelLlmCalls(true);
  Reply r = call.get();
  CHECK(r.outcome == "cancelled");
  CHECK(r.text.empty());
}

TEST_CASE("cancel: cancelled calls do not open the circuit breaker", "[llm]") {
  CancelGuard lift;
  LlmMockServer server;
  server.SetFallback({200, OpenAiBody("fine")});
  auto cfg = OpenAi(server);
  cfg.breaker_failures = 2;
  auto p = Make(cfg);
  CancelLlmCalls(true);
  for (int i = 0; i < 4; ++i) CHECK(p->Complete(kMessages).outcome == "cancelled");
  CHECK_FALSE(p->broken());
}

}  // namespace
}  // namespace kevolve::llm

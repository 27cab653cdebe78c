// A loopback stand-in for LLM APIs, for tests. It listens on 127.0.0.1 on an ephemeral
// port and answers POST /v1/chat/completions (openai) and POST /v1/messages
// (anthropic) from a script: a queue of canned responses, served in order to whichever
// endpoint is called, then a fallback. Every request is recorded.
//
//   LlmMockServer server;
//   server.Push({200, OpenAiBody("hello")});
//   server.Push({429, "", {{"Retry-After", "7"}}});
//   cfg.base_url = server.openai_url();      // anthropic: server.url()
//   ... server.requests()[0].headers.at("authorization") ...
//
// Thread-safe. The destructor stops the server, cutting short any scripted delay.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace kevolve::testing {

struct MockResponse {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. {"Retry-After", "7"}
  double delay_s = 0;  // wait this long before answering
};

struct MockRequest {
  std::string path;                            // "/v1/chat/completions" or "/v1/messages"
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// A Chat Completions response body.
inline std::string OpenAiBody(const std::string& text, int tokens_in = 10, int tokens_out = 20,
                              const std::string& finish_reason = "stop") {
  nlohmann::json j = {
      {"id", "chatcmpl-mock"},
      {"object", "chat.completion"},
      {"choices",
       {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"finish_reason", finish_reason}}}},
      {"usage", {{"prompt_tokens", tokens_in}, {"completion_tokens", tokens_out}, {"total_tokens", tokens_in + tokens_out}}}};
  return j.dump();
}

// A Messages API response body.
inline std::string AnthropicBody(const std::string& text, int tokens_in = 10, int tokens_out = 20,
                                 const std::string& stop_reason = "end_turn") {
  nlohmann::json j = {{"id", "msg_mock"},
                      {"type", "message"},
                      {"role", "assistant"},
                      {"content", {{{"type", "text"}, {"text", text}}}},
                      {"stop_reason", stop_reason},
                      {"usage", {{"input_tokens", tokens_in}, {"output_tokens", tokens_out}}}};
  return j.dump();
}

// A loopback port with nothing listening on it (connections are refused).
inline int UnusedLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot find a free loopback port");
  return ntohs(addr.sin_port);
}

class LlmMockServer {
 public:
  LlmMockServer() {
    fallback_.status = 500;
    fallback_.body = R"({"error": {"message": "mock: no scripted response left"}})";
    auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
    server_.Post("/v1/chat/completions", handler);
    server_.Post("/v1/messages", handler);
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("mock LLM server: cannot bind 127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() is a no-op until the accept loop runs, so wait for it.
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_.is_running()) {
      if (std::chrono::steady_clock::now() > give_up) {
        server_.stop();
        thread_.join();
        throw std::runtime_error("mock LLM server: the accept loop did not start");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  ~LlmMockServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    server_.stop();
    thread_.join();
  }

  LlmMockServer(const LlmMockServer&) = delete;
  LlmMockServer& operator=(const LlmMockServer&) = delete;

  int port() const { return port_; }
  // The anthropic base_url; the openai one is openai_url().
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string openai_url() const { return url() + "/v1"; }

  // Queues a response; responses are served first in, first out.
  void Push(MockResponse r) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(r));
  }
  // Served whenever the queue is empty (default: 500 with an error body).
  void SetFallback(MockResponse r) {
    std::lock_guard<std::mutex> lock(mu_);
    fallback_ = std::move(r);
  }

  std::vector<MockRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  size_t request_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_.size();
  }
  // The most requests that were being handled at the same time.
  int max_in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_;
  }

 private:
  void Handle(const httplib::Request& req, httplib::Response& res) {
    MockResponse r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      MockRequest rec{req.path, {}, req.body};
      for (const auto& [name, value] : req.headers) {
        std::string lower = name;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        rec.headers[lower] = value;
      }
      requests_.push_back(std::move(rec));
      if (queue_.empty()) {
        r = fallback_;
      } else {
        r = std::move(queue_.front());
        queue_.pop_front();
      }
      max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    }
    if (r.delay_s > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, std::chrono::duration<double>(r.delay_s), [this] { return stopping_; });
    }
    res.status = r.status;
    for (const auto& [name, value] : r.headers) res.set_header(name.c_str(), value);
    res.set_content(r.body, "application/json");
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;

  mutable std::mutex mu_;
  std::condition_variable wake_;      // signalled when stopping
  bool stopping_ = false;             // GUARDED_BY(mu_)
  std::deque<MockResponse> queue_;    // GUARDED_BY(mu_)
  MockResponse fallback_;             // GUARDED_BY(mu_)
  std::vector<MockRequest> requests_;  // GUARDED_BY(mu_)
  int in_flight_ = 0;                 // GUARDED_BY(mu_)
  int max_in_flight_ = 0;             // GUARDED_BY(mu_)
};

}  // namespace kevolve::testing

// HTTP for the LLM providers. The real transport is libcurl; tests talk to a loopback
// cpp-httplib server through the same class, or substitute their own transport.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kevolve::llm {

struct HttpRequest {
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  double timeout_s = 120;
};

struct HttpResponse {
  int status = 0;                              // 0 when no HTTP response arrived
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string transport_error;                 // "connection refused", "timed out", ... ("" when a response arrived)
  bool timed_out = false;
};

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // Thread-safe; never throws.
  virtual HttpResponse Post(const HttpRequest& req) = 0;
};

std::unique_ptr<HttpTransport> MakeCurlTransport();

}  // namespace kevolve::llm

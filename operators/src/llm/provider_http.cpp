// Classifying HTTP results for the openai and anthropic backends.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "provider_internal.h"

namespace kevolve::llm::internal {

namespace {

constexpr size_t kErrorExcerptChars = 200;
constexpr size_t kMalformedExcerptChars = 80;

bool ParseSeconds(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 0) return false;
  *out = v;
  return true;
}

// Seconds to wait from "retry-after-ms" (OpenAI) or "Retry-After" in seconds; -1 when
// absent. The HTTP-date form of Retry-After is not parsed: plain backoff applies then.
double RetryAfter(const std::map<std::string, std::string>& headers) {
  double v = 0;
  if (auto it = headers.find("retry-after-ms"); it != headers.end() && ParseSeconds(it->second, &v)) {
    return v / 1000.0;
  }
  if (auto it = headers.find("retry-after"); it != headers.end() && ParseSeconds(it->second, &v)) return v;
  return -1;
}

// The API's own message when the body carries one, else the start of the body.
std::string ErrorText(const Json& body, const std::string& raw) {
  if (body.is_object()) {
    auto it = body.find("error");
    if (it != body.end() && it->is_string()) return OneLine(it->get<std::string>(), kErrorExcerptChars);
    if (it != body.end() && it->is_object()) {
      std::string msg = StringOr(*it, "message");
      if (!msg.empty()) return OneLine(msg, kErrorExcerptChars);
    }
  }
  return OneLine(raw, kErrorExcerptChars);
}

// dump() throws on invalid UTF-8 unless told to replace it.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

std::string StringOr(const Json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t IntOr(const Json& obj, const char* key) {
  if (!obj.is_object()) return 0;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number() ? it->get<int64_t>() : 0;
}

Attempt Failed(const std::string& outcome, const std::string& error, bool retryable) {
  Attempt a;
  a.reply.outcome = outcome;
  a.reply.error = error;
  a.retryable = retryable;
  return a;
}

Attempt ErrorBodyAttempt(const Json& body, int http_status) {
  int code = http_status;
  std::string type;
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const Json& e = body["error"];
    if (code < 300 && e.contains("code") && e["code"].is_number_integer()) code = e["code"].get<int>();
    type = StringOr(e, "type");
  }
  bool rate = code == 429 || type == "rate_limit_error";
  bool server = code >= 500 || type == "overloaded_error" || type == "api_error";
  std::string prefix = code >= 300 ? "HTTP " + std::to_string(code) + ": " : "error in response: ";
  Attempt a = Failed(rate ? "rate_limited" : "http_error", prefix + ErrorText(body, Dump(body)), rate || server);
  a.reply.http_status = http_status;
  return a;
}

Attempt PostJson(HttpTransport& transport, const HttpRequest& req, ParseFn parse) {
  HttpResponse r = transport.Post(req);
  if (r.status == 0 || !r.transport_error.empty()) {
    return Failed(r.timed_out ? "timeout" : "connection",
                  r.transport_error.empty() ? "no response" : r.transport_error, true);
  }
  Json body = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (r.status < 200 || r.status >= 300) {
    Attempt a;
    if (body.is_discarded()) {
      bool retry = r.status == 429 || r.status >= 500;
      a = Failed(r.status == 429 ? "rate_limited" : "http_error",
                 "HTTP " + std::to_string(r.status) + ": " + OneLine(r.body, kErrorExcerptChars), retry);
      a.reply.http_status = r.status;
    } else {
      a = ErrorBodyAttempt(body, r.status);
    }
    if (a.retryable) a.retry_after_s = RetryAfter(r.headers);
    return a;
  }
  if (body.is_discarded()) {
    Attempt a = Failed("malformed", "response is not JSON: " + OneLine(r.body, kMalformedExcerptChars), true);
    a.reply.http_status = r.status;
    return a;
  }
  Attempt a;
  try {
    a = parse(body);
  } catch (const Json::exception&) {
    a = Failed("malformed", "unexpected response shape: " + OneLine(Dump(body), kMalformedExcerptChars), true);
  }
  a.reply.http_status = r.status;
  return a;
}

}  // namespace kevolve::llm::internal

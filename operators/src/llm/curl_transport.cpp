// The libcurl transport: one easy handle per call (connection reuse matters little next
// to LLM latencies), no signals (CURLOPT_NOSIGNAL; SIGPIPE is blocked per thread), and
// transport failures reduced to a short, key-free phrase.
#include <curl/curl.h>

#include <cctype>
#include <cerrno>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kevolve/operators/llm/provider.h"
#include "kevolve/operators/llm/transport.h"
#include "transport_sigpipe.h"

namespace kevolve::llm {

namespace {

constexpr char kUserAgent[] = "kevolve/0.1";

struct EasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using EasyHandle = std::unique_ptr<CURL, EasyDeleter>;
using HeaderList = std::unique_ptr<curl_slist, SlistDeleter>;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// Called once per header line. A status line starts a new header block (after a
// 100 Continue or a redirect), so only the final response's headers are kept.
size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  std::string_view line(data, size * n);
  if (line.substr(0, 5) == "HTTP/") {
    headers->clear();
    return size * n;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name(Trim(line.substr(0, colon)));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  (*headers)[name] = std::string(Trim(line.substr(colon + 1)));
  return size * n;
}

// A short phrase for a failed transfer. Never includes the URL (some APIs take keys in
// query strings) or any header.
std::string DescribeError(CURLcode code, long os_errno) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
      if (os_errno == ECONNREFUSED) return "connection refused";
      if (os_errno == ENETUNREACH || os_errno == EHOSTUNREACH) return "host unreachable";
      return "could not connect";
    case CURLE_OPERATION_TIMEDOUT: return "timed out";
    case CURLE_COULDNT_RESOLVE_HOST: return "could not resolve host";
    case CURLE_COULDNT_RESOLVE_PROXY: return "could not resolve proxy";
    case CURLE_GOT_NOTHING: return "empty reply from server";
    case CURLE_SEND_ERROR: return "send failed (connection reset)";
    case CURLE_RECV_ERROR: return "receive failed (connection reset)";
    case CURLE_PARTIAL_FILE: return "response cut short";
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL: return "bad URL";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE: return std::string("TLS error: ") + curl_easy_strerror(code);
    default: return curl_easy_strerror(code);
  }
}

class CurlTransport : public HttpTransport {
 public:
  HttpResponse Post(const HttpRequest& req) override {
    try {
      return PostOrThrow(req);
    } catch (const std::exception&) {  // bad_alloc: keep the "never throws" contract
      HttpResponse r;
      r.transport_error = "out of memory";
      return r;
    }
  }

 private:
  static int OnProgress(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) { return LlmCallsCancelled() ? 1 : 0; }

  static HttpResponse PostOrThrow(const HttpRequest& req) {
    HttpResponse resp;
    EasyHandle easy(curl_easy_init());
    if (!easy) {
      resp.transport_error = "curl_easy_init failed";
      return resp;
    }
    HeaderList headers;
    for (const auto& [name, value] : req.headers) {
      std::string line = name + ": " + value;
      curl_slist* grown = curl_slist_append(headers.get(), line.c_str());
      if (!grown) {
        resp.transport_error = "curl_slist_append failed";
        return resp;
      }
      headers.release();  // now owned through `grown`
      headers.reset(grown);
    }
    // Without this curl waits for "100 Continue" before sending large prompts.
    if (curl_slist* grown = curl_slist_append(headers.get(), "Expect:")) {
      headers.release();
      headers.reset(grown);
    }

    CURL* c = easy.get();
    curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, req.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_USERAGENT, kUserAgent);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");  // whatever curl can decode
    if (req.timeout_s > 0) {
      long ms = static_cast<long>(req.timeout_s * 1000.0);
      curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms < 1 ? 1L : ms);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp.body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &resp.headers);
    // Called about once a second even while idle: aborts the transfer once the search
    // has cancelled its LLM calls.
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);

    CURLcode code;
    {
      internal::ScopedSigpipeBlock no_sigpipe;
      code = curl_easy_perform(c);
    }
    if (code != CURLE_OK) {
      long os_errno = 0;
      curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
      resp.transport_error = DescribeError(code, os_errno);
      resp.timed_out = code == CURLE_OPERATION_TIMEDOUT;
      resp.status = 0;
      resp.headers.clear();
      resp.body.clear();
      return resp;
    }
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    resp.status = static_cast<int>(status);
    return resp;
  }
};

}  // namespace

std::unique_ptr<HttpTransport> MakeCurlTransport() {
  // curl_global_init is not thread-safe; do it once, and never clean up (the transport
  // may be used until exit).
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::make_unique<CurlTransport>();
}

}  // namespace kevolve::llm

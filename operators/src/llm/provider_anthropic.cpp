// The anthropic kind: the Messages API at {base_url}/v1/messages. System messages go to
// the top-level "system" field; the rest must be user or assistant turns.
#include <memory>
#include <string>
#include <utility>

#include "provider_internal.h"

namespace kevolve::llm::internal {

namespace {

constexpr char kAnthropicVersion[] = "2023-06-01";

Attempt ParseMessage(const Json& body) {
  if (StringOr(body, "type") == "error") return ErrorBodyAttempt(body, 200);
  const Json& content = body.at("content");
  if (!content.is_array()) return Failed("malformed", "no content array in the response", true);
  Attempt a;
  for (const auto& block : content) {
    if (StringOr(block, "type") == "text") a.reply.text += StringOr(block, "text");
  }
  if (const auto it = body.find("usage"); it != body.end()) {
    a.reply.tokens_in = IntOr(*it, "input_tokens");
    a.reply.tokens_out = IntOr(*it, "output_tokens");
  }
  std::string stop = StringOr(body, "stop_reason");
  if (stop == "max_tokens") {
    a.reply.outcome = "truncated";
    a.reply.error = "the reply hit max_tokens";
  } else if (stop == "refusal") {
    a.reply.outcome = "refused";
    a.reply.error = "refused by the model";
  }
  return a;
}

class AnthropicBackend : public Backend {
 public:
  AnthropicBackend(ProviderConfig cfg, std::shared_ptr<HttpTransport> transport)
      : cfg_(std::move(cfg)), transport_(std::move(transport)) {}

  Attempt Call(const std::vector<Message>& messages) override {
    std::string system;
    Json turns = Json::array();
    for (const auto& m : messages) {
      if (m.role == "system") {
        system += (system.empty() ? "" : "\n\n") + m.content;
      } else {
        turns.push_back({{"role", m.role}, {"content", m.content}});
      }
    }
    Json body = {{"model", cfg_.model},
                 {"max_tokens", cfg_.max_tokens},
                 {"temperature", cfg_.temperature},
                 {"messages", std::move(turns)}};
    if (!system.empty()) body["system"] = system;
    HttpRequest req;
    req.url = JoinUrl(cfg_.base_url, "/v1/messages");
    req.timeout_s = cfg_.timeout_s;
    req.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
    req.headers.emplace_back("content-type", "application/json");
    req.headers.emplace_back("anthropic-version", kAnthropicVersion);
    std::string key = ApiKey(cfg_);  // read per call: never kept in the provider
    if (!key.empty()) req.headers.emplace_back("x-api-key", key);
    return PostJson(*transport_, req, ParseMessage);
  }

 private:
  const ProviderConfig cfg_;
  const std::shared_ptr<HttpTransport> transport_;
};

}  // namespace

std::unique_ptr<Backend> MakeAnthropicBackend(const ProviderConfig& cfg, std::shared_ptr<HttpTransport> transport) {
  return std::make_unique<AnthropicBackend>(cfg, std::move(transport));
}

}  // namespace kevolve::llm::internal

// The openai kind: Chat Completions at {base_url}/chat/completions. Any compatible
// server (vLLM, llama.cpp's server, Ollama, OpenRouter) works through base_url.
#include <memory>
#include <string>
#include <utility>

#include "provider_internal.h"

namespace kevolve::llm::internal {

namespace {

constexpr size_t kRefusalExcerptChars = 200;

Attempt ParseChatCompletion(const Json& body) {
  if (!body.contains("choices") && body.contains("error")) return ErrorBodyAttempt(body, 200);
  const Json& choices = body.at("choices");
  if (!choices.is_array() || choices.empty()) return Failed("malformed", "no choices in the response", true);
  const Json& choice = choices.at(0);
  const Json& message = choice.at("message");

  Attempt a;
  if (const auto it = body.find("usage"); it != body.end()) {
    a.reply.tokens_in = IntOr(*it, "prompt_tokens");
    a.reply.tokens_out = IntOr(*it, "completion_tokens");
  }
  std::string finish = StringOr(choice, "finish_reason");
  std::string refusal = StringOr(message, "refusal");
  const auto content = message.find("content");
  bool has_text = content != message.end() && content->is_string();
  if (!refusal.empty() || finish == "content_filter") {
    a.reply.outcome = "refused";
    a.reply.error = refusal.empty() ? "refused (content filter)" : "refused: " + OneLine(refusal, kRefusalExcerptChars);
    return a;
  }
  if (!has_text) {
    a.reply.outcome = "malformed";
    a.reply.error = "no message content in the response";
    a.retryable = true;
    return a;
  }
  a.reply.text = content->get<std::string>();
  if (finish == "length") {
    a.reply.outcome = "truncated";
    a.reply.error = "the reply hit max_tokens";
  }
  return a;
}

class OpenAiBackend : public Backend {
 public:
  OpenAiBackend(ProviderConfig cfg, std::shared_ptr<HttpTransport> transport)
      : cfg_(std::move(cfg)), transport_(std::move(transport)) {}

  Attempt Call(const std::vector<Message>& messages) override {
    Json msgs = Json::array();
    for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
    Json body = {{"model", cfg_.model},
                 {"messages", std::move(msgs)},
                 {"temperature", cfg_.temperature},
                 {"max_tokens", cfg_.max_tokens}};
    HttpRequest req;
    req.url = JoinUrl(cfg_.base_url, "/chat/completions");
    req.timeout_s = cfg_.timeout_s;
    req.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
    req.headers.emplace_back("Content-Type", "application/json");
    std::string key = ApiKey(cfg_);  // read per call: never kept in the provider
    if (!key.empty()) req.headers.emplace_back("Authorization", "Bearer " + key);
    return PostJson(*transport_, req, ParseChatCompletion);
  }

 private:
  const ProviderConfig cfg_;
  const std::shared_ptr<HttpTransport> transport_;
};

}  // namespace

std::unique_ptr<Backend> MakeOpenAiBackend(const ProviderConfig& cfg, std::shared_ptr<HttpTransport> transport) {
  return std::make_unique<OpenAiBackend>(cfg, std::move(transport));
}

}  // namespace kevolve::llm::internal

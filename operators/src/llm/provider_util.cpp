// Small helpers shared by the providers: keys, scrubbing, one-line errors, URLs.
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>

#include "provider_internal.h"

extern char** environ;  // POSIX

namespace kevolve::llm::internal {

namespace {

constexpr char kRedacted[] = "[redacted]";
// Values shorter than this are not scrubbed: replacing "1" or "on" everywhere would
// mangle replies, and no real key is that short.
constexpr size_t kMinConfiguredKeyChars = 4;
constexpr size_t kMinEnvSecretChars = 8;

void ReplaceAll(std::string& text, std::string_view what) {
  if (what.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(what, pos)) != std::string::npos) {
    text.replace(pos, what.size(), kRedacted);
    pos += sizeof(kRedacted) - 1;
  }
}

bool LooksSecret(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* word : {"KEY", "TOKEN", "SECRET", "PASSWORD"}) {
    if (upper.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::string ApiKey(const ProviderConfig& cfg) {
  if (cfg.api_key_env.empty()) return "";
  const char* v = std::getenv(cfg.api_key_env.c_str());
  return v ? std::string(v) : std::string();
}

std::string ScrubSecrets(std::string text, const ProviderConfig& cfg) {
  std::string key = ApiKey(cfg);
  if (key.size() >= kMinConfiguredKeyChars) ReplaceAll(text, key);
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos || !LooksSecret(entry.substr(0, eq))) continue;
    std::string_view value = entry.substr(eq + 1);
    if (value.size() >= kMinEnvSecretChars) ReplaceAll(text, value);
  }
  return text;
}

std::string OneLine(const std::string& text, size_t max_chars) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars) + "...";
  return out;
}

int64_t EstimateTokens(size_t chars) { return static_cast<int64_t>((chars + 3) / 4); }

std::string JoinUrl(const std::string& base, const std::string& path) {
  std::string b = base;
  while (!b.empty() && b.back() == '/') b.pop_back();
  return b + path;
}

}  // namespace kevolve::llm::internal

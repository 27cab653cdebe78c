// The replay kind: recorded responses from a folder (served in file-name order) or from
// an earlier run's database (in call order; the engine reads them into
// ProviderConfig::replay_replies), cycling round, for reproducible offline runs and
// tests. In a folder, a .json file holds
// {"text": "...", "tokens_in": N, "tokens_out": M} (the token counts optional); any
// other file is the reply text itself. Hidden files are skipped.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "provider_internal.h"

namespace kevolve::llm::internal {

namespace {

namespace fs = std::filesystem;

class ReplayBackend : public Backend {
 public:
  explicit ReplayBackend(std::vector<std::string> files) : files_(std::move(files)) {}

  Attempt Call(const std::vector<Message>&) override {
    // Which file is served depends only on how many calls came before, so a run with
    // one LLM worker replays identically.
    size_t i = next_.fetch_add(1, std::memory_order_relaxed) % files_.size();
    const std::string& path = files_[i];
    auto text = ReadTextFile(path);
    // Not retryable: a retry would serve the next recording instead.
    if (!text.ok()) return Failed("malformed", text.error(), false);
    Attempt a;
    if (fs::path(path).extension() != ".json") {
      a.reply.text = std::move(*text);
      return a;
    }
    Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      return Failed("malformed", path + ": expected {\"text\": \"...\", \"tokens_in\": N, \"tokens_out\": M}", false);
    }
    a.reply.text = j["text"].get<std::string>();
    a.reply.tokens_in = IntOr(j, "tokens_in");
    a.reply.tokens_out = IntOr(j, "tokens_out");
    return a;
  }

 private:
  const std::vector<std::string> files_;  // sorted by name; never empty
  std::atomic<size_t> next_{0};
};

// Replies held in memory (from a database).
class RecordedBackend : public Backend {
 public:
  explicit RecordedBackend(std::vector<RecordedReply> replies) : replies_(std::move(replies)) {}

  Attempt Call(const std::vector<Message>&) override {
    const RecordedReply& r = replies_[next_.fetch_add(1, std::memory_order_relaxed) % replies_.size()];
    Attempt a;
    a.reply.text = r.text;
    a.reply.tokens_in = r.tokens_in;
    a.reply.tokens_out = r.tokens_out;
    return a;
  }

 private:
  const std::vector<RecordedReply> replies_;  // never empty
  std::atomic<size_t> next_{0};
};

}  // namespace

Result<std::unique_ptr<Backend>> MakeReplayBackend(const ProviderConfig& cfg) {
  if (!cfg.replay_db.empty() || !cfg.replay_replies.empty()) {
    if (cfg.replay_replies.empty())
      return Status::Error("provider '" + cfg.name + "': replay_db '" + cfg.replay_db +
                           "' holds no recorded responses" +
                           (cfg.replay_run ? " for run " + std::to_string(cfg.replay_run) : std::string()));
    std::unique_ptr<Backend> backend = std::make_unique<RecordedBackend>(cfg.replay_replies);
    return backend;
  }
  std::error_code ec;
  std::vector<std::string> files;
  fs::directory_iterator it(cfg.replay_dir, ec);
  if (ec) return Status::Error("provider '" + cfg.name + "': cannot list replay_dir '" + cfg.replay_dir + "': " + ec.message());
  for (const auto& entry : it) {
    std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !entry.is_regular_file(ec)) continue;
    files.push_back(entry.path().string());
  }
  if (files.empty()) return Status::Error("provider '" + cfg.name + "': replay_dir '" + cfg.replay_dir + "' holds no response files");
  std::sort(files.begin(), files.end());
  std::unique_ptr<Backend> backend = std::make_unique<ReplayBackend>(std::move(files));
  return backend;
}

}  // namespace kevolve::llm::internal

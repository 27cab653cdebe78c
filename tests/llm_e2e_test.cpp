// LLM operators end to end, without a GPU: `kevolve mutate` with the replay provider and
// against a loopback OpenAI-compatible server; the repair loop; budgets; key hygiene.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "kevolve/core/json_file.h"
#include "kevolve/db/store.h"
#include "kevolve/engine/llm_breeder.h"
#include "kevolve/evaluators/nvrtc_compiler.h"
#include "kevolve/evaluators/rungs.h"
#include "kevolve/operators/llm/mutator.h"
#include "llm_mock_server.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace kevolve;

namespace {

const char* kEdit = R"(Here is a change: eight warps per block by default.

<<<<<<< SEARCH
// @kevolve param   WARPS  4 2 8 1
=======
// @kevolve param   WARPS  8 4 2 1
>>>>>>> REPLACE
)";

std::string Kevolve(const std::string& args) {
  return "cd '" + testing::SourceRoot().string() + "' && '" + testing::KevolveBinary().string() + "' " + args;
}

std::string WarpRow() { return testing::ReadFile(testing::SourceRoot() / "configs/ops/softmax/seeds/warp_row.cu"); }

// A replay config serving the given replies in order.
fs::path ReplaySetup(const fs::path& dir, const std::vector<std::string>& replies) {
  for (size_t i = 0; i < replies.size(); ++i)
    testing::WriteFile(dir / "replies" / ("r" + std::to_string(i) + ".txt"), replies[i]);
  testing::WriteFile(dir / "llm.json", "{\"providers\": {\"rec\": {\"kind\": \"replay\", \"replay_dir\": \"" +
                                           (dir / "replies").string() + "\"}}}");
  return dir / "llm.json";
}

}  // namespace

TEST_CASE("kevolve mutate with the replay provider writes a child that passes the compile rung", "[llm][cli]") {
  auto dir = testing::MakeTempDir("mutate-replay");
  auto cfg = ReplaySetup(dir, {kEdit});
  std::string out;
  int rc = testing::RunCommand(Kevolve("mutate --op softmax --operator llm_diff --parent configs/ops/softmax/seeds/warp_row.cu "
                                       "--llm-config '" + cfg.string() + "' --out '" + (dir / "child.cu").string() +
                                       "' --db '" + (dir / "k.db").string() + "'"),
                               &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("[compile] ok") != std::string::npos);
  CHECK(out.find("prompt ") != std::string::npos);
  std::string child = testing::ReadFile(dir / "child.cu");
  CHECK(child.find("@kevolve param   WARPS  8 4 2 1") != std::string::npos);
  auto store = db::OpenSqliteStore((dir / "k.db").string());
  REQUIRE(store.ok());
  auto calls = (*store)->ListLlmCalls(std::nullopt);
  REQUIRE(calls.ok());
  REQUIRE(calls->size() == 1);
  CHECK((*calls)[0].outcome == "ok");
  CHECK((*calls)[0].op_name == "llm_diff");
  CHECK((*calls)[0].prompt.find("warp_row.cu") != std::string::npos);
}

TEST_CASE("a prompt budget too small for the parent is refused before any call, exit 2", "[llm][cli]") {
  auto dir = testing::MakeTempDir("mutate-budget");
  auto cfg = ReplaySetup(dir, {kEdit});
  std::string out;
  const std::string base = "mutate --op softmax --operator llm_diff --parent configs/ops/softmax/seeds/warp_row.cu "
                           "--llm-config '" + cfg.string() + "' --out '" + (dir / "child.cu").string() +
                           "' --db '" + (dir / "k.db").string() + "' --max-prompt-chars 9000";
  // 9000 is far below the system prompt, task, interface and parent together (about 20000
  // characters): refused before any call.
  CHECK(testing::RunCommand(Kevolve(base), &out) == 2);
  CHECK(out.find("--max-prompt-chars 9000 is too small") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "child.cu"));
  CHECK(testing::RunCommand(Kevolve(base + " --dry-run"), &out) == 2);  // the dry run says so too
  CHECK(out.find("is too small") != std::string::npos);
  // With room for it, the dry run's prompt holds the parent whole.
  // (stderr, which says the size, goes elsewhere: it would land inside the buffered prompt.)
  CHECK(testing::RunCommand("(" + Kevolve("mutate --op softmax --operator llm_diff --parent configs/ops/softmax/seeds/warp_row.cu "
                                          "--dry-run --max-prompt-chars 24000") + " 2>/dev/null)", &out) == 0);
  CHECK(out.find(WarpRow()) != std::string::npos);
  // No call was made: the database, if created, holds no call.
  if (fs::exists(dir / "k.db")) {
    auto store = db::OpenSqliteStore((dir / "k.db").string());
    REQUIRE(store.ok());
    auto calls = (*store)->ListLlmCalls(std::nullopt);
    REQUIRE(calls.ok());
    CHECK(calls->empty());
  }
}

TEST_CASE("a reply with no usable code, or a diff that does not apply, is a recorded failure", "[llm][cli]") {
  for (const std::string& reply : {std::string("I'm sorry, I can't help with that."),
                                  std::string("<<<<<<< SEARCH\nthis line is not in the parent\n=======\nx\n>>>>>>> REPLACE\n")}) {
    auto dir = testing::MakeTempDir("mutate-bad");
    auto cfg = ReplaySetup(dir, {reply});
    std::string out;
    int rc = testing::RunCommand(Kevolve("mutate --op softmax --operator llm_diff --parent configs/ops/softmax/seeds/warp_row.cu "
                                         "--llm-config '" + cfg.string() + "' --out '" + (dir / "child.cu").string() +
                                         "' --db '" + (dir / "k.db").string() + "'"),
                                 &out);
    INFO(out);
    CHECK(rc == 1);
    CHECK(out.find("no usable child") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "child.cu"));
    auto store = db::OpenSqliteStore((dir / "k.db").string());
    REQUIRE(store.ok());
    auto calls = (*store)->ListLlmCalls(std::nullopt);
    REQUIRE(calls.ok());
    REQUIRE(calls->size() == 1);
    CHECK((*calls)[0].outcome == "parse_error");
    CHECK(!(*calls)[0].error.empty());
  }
}

TEST_CASE("a compile error is sent back and the repaired reply is accepted", "[llm]") {
  auto dir = testing::MakeTempDir("repair");
  std::string broken = WarpRow();
  broken.replace(broken.find("const int lane = threadIdx.x % 32;"), 34, "const int lane = threadIdx.x % 32 + oops;");
  auto cfg = ReplaySetup(dir, {"```cuda\n" + broken + "```\n", "Fixed:\n```cuda\n" + WarpRow() + "```\n"});
  auto configs = llm::LoadProviderConfigs(cfg.string());
  REQUIRE(configs.ok());
  auto provider = llm::MakeProvider((*configs)[0], nullptr);
  REQUIRE(provider.ok());
  llm::Mutator m(provider->get(), nullptr, {60000, 2});
  llm::MutationContext ctx;
  ctx.op_name = "softmax";
  ctx.parent_name = "warp_row.cu";
  ctx.parent_source = WarpRow();
  // The parent itself is the second reply, so make the rewrite differ: change a default.
  NvrtcCompiler nvrtc;
  auto op = LoadOpSpec((testing::SourceRoot() / "configs/ops/softmax").string());
  REQUIRE(op.ok());
  std::vector<std::string> logs;
  auto check = [&](const std::string& src) {
    CandidateSource parsed;
    auto p0 = CandidateSource::Parse(src, "child.cu");
    RungResult s = StaticRung(*op, DType::kF32, "child.cu", src, p0.ok() ? p0->DefaultAssignment() : Assignment{}, &parsed);
    if (!s.ok) return s.log;
    auto c = nvrtc.Compile(MakeCompileRequest(parsed, parsed.DefaultAssignment(), DType::kF32, "sm_90"));
    logs.push_back(c.log);
    return c.ok ? std::string() : c.log;
  };
  ctx.parent_source = WarpRow() + "\n// an older parent\n";
  llm::MutationOutcome o = m.Mutate(ctx, false, check);
  INFO(o.error);
  REQUIRE(o.ok);
  CHECK(o.repair_turns == 1);
  REQUIRE(o.calls.size() == 2);
  CHECK(o.calls[1].op_name == "repair");
  CHECK(o.calls[1].prompt.find("oops") != std::string::npos);  // the compile log went back
}

TEST_CASE("cost is accounted, --max-cost stops calls, and no API key reaches the database", "[llm]") {
  testing::LlmMockServer server;
  const std::string key = "sk-kevolve-test-4f1c9e7b2d";
  ::setenv("KEVOLVE_TEST_LLM_KEY", key.c_str(), 1);
  auto dir = testing::MakeTempDir("budget");
  testing::WriteFile(dir / "llm.json", "{\"providers\": {\"srv\": {\"kind\": \"openai\", \"model\": \"m\", \"base_url\": \"" +
                                           server.openai_url() + "\", \"api_key_env\": \"KEVOLVE_TEST_LLM_KEY\", "
                                           "\"price_in_per_mtok\": 1000, \"price_out_per_mtok\": 2000, \"max_retries\": 0}}}");
  server.Push({200, testing::OpenAiBody(kEdit, 1000, 500)});  // $1 + $1
  server.Push({401, R"({"error": {"message": "bad key sk-kevolve-test-4f1c9e7b2d"}})"});
  std::string out;
  std::string db = (dir / "k.db").string();
  std::string base = "mutate --op softmax --operator llm_diff --parent configs/ops/softmax/seeds/warp_row.cu --llm-config '" +
                     (dir / "llm.json").string() + "' --db '" + db + "' --out '" + (dir / "c.cu").string() + "'";
  REQUIRE(testing::RunCommand(Kevolve(base), &out) == 0);
  CHECK(out.find("cost $2.0000") != std::string::npos);
  CHECK(server.requests().at(0).headers.at("authorization") == "Bearer " + key);
  // The second call fails with the key echoed in the body: it must not be stored.
  CHECK(testing::RunCommand(Kevolve(base), &out) == 1);
  CHECK(out.find(key) == std::string::npos);
  // A budget already spent stops the call before it is made.
  llm::ProviderConfig pc;
  pc.name = "srv";
  pc.kind = "openai";
  pc.model = "m";
  pc.base_url = server.openai_url();
  pc.price_in_per_mtok = 1000;
  pc.max_retries = 0;
  auto provider = llm::MakeProvider(pc, nullptr);
  REQUIRE(provider.ok());
  llm::CostMeter meter(0.5);
  meter.Add(0.6);
  llm::Mutator m(provider->get(), &meter, {});
  size_t before = server.request_count();
  llm::MutationContext ctx;
  ctx.parent_source = WarpRow();
  auto o = m.Mutate(ctx, true, {});
  CHECK_FALSE(o.ok);
  CHECK(o.error.find("budget") != std::string::npos);
  CHECK(server.request_count() == before);
  ::unsetenv("KEVOLVE_TEST_LLM_KEY");
  std::string bytes = testing::ReadFile(db) + testing::ReadFile(db + "-wal");
  CHECK(bytes.find(key) == std::string::npos);
}

TEST_CASE("the replay provider serves an earlier run's recorded replies from its database", "[llm][cli]") {
  auto dir = testing::MakeTempDir("replay-db");
  const std::string old_db = (dir / "old.db").string();
  {
    auto store = db::OpenSqliteStore(old_db);
    REQUIRE(store.ok());
    // Only replies that arrived are served: ok and parse_error, not a timeout or the
    // partial text of a truncated reply.
    for (auto [response, outcome] : std::vector<std::pair<std::string, std::string>>{
             {kEdit, "ok"}, {"", "timeout"}, {"half a reply", "truncated"}, {"no code in this one", "parse_error"}}) {
      db::LlmCallRecord c;
      c.provider = "srv";
      c.op_name = "llm_diff";
      c.prompt = "p";
      c.response = response;
      c.tokens_in = 100;
      c.tokens_out = 20;
      c.outcome = outcome;
      REQUIRE((*store)->RecordLlmCall(c).ok());
    }
  }
  const std::string before = testing::ReadFile(old_db);
  testing::WriteFile(dir / "llm.json", "{\"providers\": {\"again\": {\"kind\": \"replay\", \"replay_db\": \"" + old_db + "\"}}}");
  auto providers = LoadProviders((dir / "llm.json").string());
  INFO(providers.status().ToString());
  REQUIRE(providers.ok());
  REQUIRE(providers->size() == 1);
  llm::Provider& p = *providers->front();
  CHECK(p.Complete({{"user", "x"}}).text == kEdit);
  auto second = p.Complete({{"user", "x"}});
  CHECK(second.text == "no code in this one");
  CHECK(second.tokens_in == 100);
  CHECK(p.Complete({{"user", "x"}}).text == kEdit);  // cycles round
  CHECK(testing::ReadFile(old_db) == before);         // opened read-only: not migrated, not rewritten

  // End to end: kevolve mutate replays the recorded edit and compiles the child.
  std::string out;
  int rc = testing::RunCommand(Kevolve("mutate --op softmax --operator llm_diff --parent configs/ops/softmax/seeds/warp_row.cu "
                                       "--llm-config '" + (dir / "llm.json").string() + "' --out '" +
                                       (dir / "child.cu").string() + "'"),
                               &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("[compile] ok") != std::string::npos);
  CHECK(testing::ReadFile(dir / "child.cu").find("@kevolve param   WARPS  8 4 2 1") != std::string::npos);

  // A missing database is a one-line error, and nothing is created at that path.
  testing::WriteFile(dir / "bad.json", "{\"providers\": {\"again\": {\"kind\": \"replay\", \"replay_db\": \"" +
                                           (dir / "nope.db").string() + "\"}}}");
  auto bad = LoadProviders((dir / "bad.json").string());
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().find("is no database file") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "nope.db"));
  // Both sources at once is a configuration error that names the field.
  testing::WriteFile(dir / "both.json", "{\"providers\": {\"again\": {\"kind\": \"replay\", \"replay_db\": \"" + old_db +
                                            "\", \"replay_dir\": \"" + dir.string() + "\"}}}");
  auto both = LoadProviders((dir / "both.json").string());
  REQUIRE_FALSE(both.ok());
  CHECK(both.error().find("replay_db") != std::string::npos);
}

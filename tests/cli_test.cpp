// The kevolve command as a user runs it, on a machine that may have no GPU.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kevolve/db/store.h"
#include "kevolve/engine/run_config.h"
#include "test_util.h"

using namespace kevolve;
using testing::RunCommand;

namespace {

std::string Kevolve(const std::string& args) {
  return "cd '" + testing::SourceRoot().string() + "' && '" + testing::KevolveBinary().string() + "' " + args;
}

int CountLines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("--help works on every command, with examples", "[cli]") {
  std::string out;
  REQUIRE(RunCommand(Kevolve("--help"), &out) == 0);
  CHECK(out.find("kevolve --op softmax --gens 50") != std::string::npos);
  for (const char* sub : {"ops", "compile", "runs", "show"}) {
    INFO(sub);
    REQUIRE(RunCommand(Kevolve(std::string(sub) + " --help"), &out) == 0);
    CHECK(out.find("Example") != std::string::npos);
  }
}

TEST_CASE("option errors are one line with exit 2; search options without --op are an error", "[cli]") {
  std::string out;
  // CLI11's parse errors (range, conversion, missing file) in kevolve's one-line format.
  CHECK(RunCommand(Kevolve("--op softmax --population 0"), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.rfind("kevolve: error: --population: Value 0 not in range 1 to", 0) == 0);
  CHECK(RunCommand(Kevolve("compile --op softmax no_such_file.cu"), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("kevolve: error: File does not exist: no_such_file.cu") != std::string::npos);
  CHECK(RunCommand(Kevolve("show abc --db /tmp/kevolve-cli-show.db"), &out) == 2);
  CHECK(CountLines(out) == 1);
  // An architecture NVRTC does not know is bad input, not a failed compile.
  const std::string seed = " configs/ops/softmax/seeds/warp_row.cu";
  CHECK(RunCommand(Kevolve("compile --op softmax --arch sm_99" + seed), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("does not compile for it (it supports ") != std::string::npos);
  CHECK(RunCommand(Kevolve("compile --op softmax --arch sm90" + seed), &out) == 2);
  CHECK(out.find("--arch must be a real architecture") != std::string::npos);
  CHECK(RunCommand(Kevolve("compile --op softmax -q --arch sm_90" + seed), &out) == 0);
  CHECK(out.rfind("1 compiled, 0 failed", 0) == 0);  // -q on one good file still prints the summary
  // A provider that cannot start is named once, with the configuration file.
  testing::WriteFile("/tmp/kevolve-cli-nodir.json",
                     "{\"providers\": {\"rec\": {\"kind\": \"replay\", \"replay_dir\": \"/tmp/kevolve-cli-no-such-dir\"}}}");
  CHECK(RunCommand(Kevolve("--op softmax --gens 1 --llm-config /tmp/kevolve-cli-nodir.json"), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("kevolve-cli-nodir.json: provider 'rec': cannot list replay_dir") != std::string::npos);
  CHECK(out.find("provider rec") == std::string::npos);
  // --target is a roofline fraction: a negative one is refused, not taken as "none".
  CHECK(RunCommand(Kevolve("--op softmax --gens 1 --target -1"), &out) == 2);
  CHECK(out.find("--target: '-1' is no roofline fraction in [0, 1.5]") != std::string::npos);
  // An L2 flush kevolve does not know, before any GPU work.
  CHECK(RunCommand(Kevolve("eval --op softmax --flush clean" + seed), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("--flush must be memset, read or none") != std::string::npos);
  CHECK(RunCommand(Kevolve("--op softmax --gens 1 --flush clean"), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("flush must be \"memset\", \"read\" or \"none\"") != std::string::npos);
  // Search options but no op: not a request for help.
  CHECK(RunCommand(Kevolve("--gens 1"), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("a search needs --op NAME") != std::string::npos);
  // --version names the tool.
  CHECK(RunCommand(Kevolve("--version"), &out) == 0);
  CHECK(out == "kevolve " KEVOLVE_TEST_VERSION "\n");
  // No arguments at all: the help, exit 0.
  CHECK(RunCommand(Kevolve(""), &out) == 0);
  CHECK(out.find("kevolve --op softmax --gens 50") != std::string::npos);
}

TEST_CASE("a GPU command without a GPU fails with one clear line", "[cli]") {
  std::string why;
  if (testing::GpuAvailable(&why)) {
    WARN("a GPU is present: the no-GPU message cannot be checked here");
    return;
  }
  std::string out;
  int rc = RunCommand(Kevolve("--op softmax --gens 1 --db /tmp/kevolve-cli-test.db"), &out);
  CHECK(rc == 3);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("no usable NVIDIA GPU") != std::string::npos);
  CHECK(out.find("'kevolve compile'") != std::string::npos);  // says what still works
}

TEST_CASE("bad input to the run gives a one-line error and exit 2", "[cli]") {
  std::string out;
  CHECK(RunCommand(Kevolve("--op no_such_op --gens 1"), &out) == 2);
  CHECK(out.find("unknown op 'no_such_op' (known: ") != std::string::npos);
  CHECK(RunCommand(Kevolve("--op softmax --dtype f64 --gens 1"), &out) == 2);
  CHECK(out.find("has no dtype 'f64'") != std::string::npos);
  CHECK(RunCommand(Kevolve("--op softmax --gens banana"), &out) == 2);
  CHECK(RunCommand(Kevolve("export --run 1 --per-shape --confirm -1"), &out) == 2);
  CHECK(out.find("--confirm: Value -1 not in range 0 to 100") != std::string::npos);
  // kevolve eval --shape: a malformed shape, and --shape with --db (whose ladders a search
  // could reuse), are refused before any GPU is looked for.
  const std::string seed = " configs/ops/softmax/seeds/split_row.cu";
  CHECK(RunCommand(Kevolve("eval --op softmax --shape 1024x" + seed), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("--shape: '1024x': cols '' is not a positive integer (op 'softmax' takes rows x cols") !=
        std::string::npos);
  CHECK(RunCommand(Kevolve("eval --op matmul --shape 4096x4096 configs/ops/matmul/seeds/mma_sync.cu"), &out) == 2);
  CHECK(out.find("expected 3 sizes (op 'matmul' takes M x N x K") != std::string::npos);
  CHECK(RunCommand(Kevolve("eval --op softmax --shape 64x64 --db /tmp/kevolve-cli-shape.db" + seed), &out) == 2);
  CHECK(out.find("--shape cannot be combined with --db") != std::string::npos);
  // A KEVOLVE_NCU_ARGS that ncu could not take stops --profile before any candidate runs;
  // without --profile it is not read.
  for (std::string cmd : {"eval --op softmax --profile" + seed, std::string("--op softmax --gens 1 --profile")}) {
    INFO(cmd);
    CHECK(RunCommand("export KEVOLVE_NCU_ARGS='--section X --metrics'; " + Kevolve(cmd), &out) == 2);
    CHECK(CountLines(out) == 1);
    CHECK(out.find("kevolve: error: KEVOLVE_NCU_ARGS: --metrics needs a comma-separated list") != std::string::npos);
  }
  CHECK(RunCommand("export KEVOLVE_NCU_ARGS=\"--section 'X\"; " + Kevolve("export --run 1 --profile"), &out) == 2);
  CHECK(out.find("KEVOLVE_NCU_ARGS: unterminated ' quote") != std::string::npos);
  CHECK(RunCommand("export KEVOLVE_NCU_ARGS='--metrics'; " + Kevolve("eval --op softmax --no-timing" + seed), &out) != 2);
  // --shape and --param take one value each: the candidate files after them stay files
  // (the command gets as far as looking for a GPU, exit 3, or runs with one, exit 0).
  const std::string two = " configs/ops/softmax/seeds/split_row.cu configs/ops/softmax/seeds/block_row.cu";
  for (const char* opt : {"--shape 64x64", "--no-timing --param BLOCK=256"}) {
    INFO(opt);
    int rc = RunCommand(Kevolve(std::string("eval --op softmax ") + opt + two), &out);
    INFO(out);
    CHECK(rc != 2);
    CHECK(out.find("is not a positive integer") == std::string::npos);
  }
}

TEST_CASE("kevolve eval and compile --sweep: the cross product, and a bad sweep is one line and exit 2 before any GPU is looked for", "[cli]") {
  std::string out;
  const std::string seed = " configs/ops/layernorm/seeds/block_row.cu";
  struct Case {
    std::string args, says;
  };
  for (const Case& c : std::vector<Case>{
           {"--sweep SHIFT", "--sweep 'SHIFT': expected NAME=V1,V2,..."},
           {"--sweep SHIFT=0,one", "'one' is not an integer value of SHIFT"},
           {"--sweep SHIFT=1,1", "the value 1 is given twice"},
           {"--sweep NOPE=1,2", "--sweep NOPE: block_row.cu has no parameter 'NOPE'"},
           {"--sweep SHIFT=0,1 --param SHIFT=1", "--sweep SHIFT: also set by --param SHIFT=1"},
           {"--sweep SHIFT=0,1 --sweep SHIFT=1,0", "SHIFT is swept twice"},
           {"--sweep SHIFT=0,1 --variants 4", "--sweep and --variants cannot be combined"},
           {"--sweep BLOCK=1,2,3,4,5,6,7,8 --sweep CHUNKS=1,2,3,4,5,6,7,8 --sweep VBYTES=1,2,3,4,5",
            "more than 256 assignments per file"},
       }) {
    INFO(c.args);
    CHECK(RunCommand(Kevolve("eval --op layernorm " + c.args + seed), &out) == 2);
    INFO(out);
    CHECK(CountLines(out) == 1);
    CHECK(out.find(c.says) != std::string::npos);
  }
  // kevolve compile takes the same flags (no GPU needed): the cross product, the first sweep
  // slowest, on top of --param, and the same errors.
  REQUIRE(RunCommand(Kevolve("compile --op layernorm --dtype bf16 --json --param CHUNKS=8 --sweep SHIFT=0,1 "
                             "--sweep BLOCK=128,256" + seed), &out) == 0);
  auto j = nlohmann::json::parse(out);
  REQUIRE(j.size() == 4);
  const std::vector<std::pair<int, int>> order = {{0, 128}, {0, 256}, {1, 128}, {1, 256}};
  for (size_t i = 0; i < order.size(); ++i) {
    INFO(i);
    CHECK(j[i]["params"]["SHIFT"] == order[i].first);
    CHECK(j[i]["params"]["BLOCK"] == order[i].second);
    CHECK(j[i]["params"]["CHUNKS"] == 8);
  }
  // Blanks around a value are fine, within one not.
  CHECK(RunCommand(Kevolve("compile --op layernorm -q --sweep 'SHIFT=0, 1'" + seed), &out) == 0);
  CHECK(RunCommand(Kevolve("compile --op layernorm -q --sweep 'SHIFT=0 1'" + seed), &out) == 2);
  CHECK(out.find("'0 1' is not an integer value of SHIFT") != std::string::npos);
  // A bad sweep stops compile before its --db is created.
  const std::string db = (testing::MakeTempDir("sweepdb") / "new.db").string();
  CHECK(RunCommand(Kevolve("compile --op layernorm --db '" + db + "' --sweep SHIFT" + seed), &out) == 2);
  CHECK_FALSE(std::filesystem::exists(db));
  // A file whose directives do not parse fails its static rung once, not once per value.
  const auto bad = testing::MakeTempDir("sweepbad") / "bad.cu";
  {
    std::ofstream f(bad);
    f << "// @kevolve param SHIFT 0 1\n// @kevolve launch k grid=rows block=NOPE(\n";
  }
  CHECK(RunCommand(Kevolve("compile --op layernorm --json --sweep SHIFT=0,1 '" + bad.string() + "'"), &out) == 1);
  CHECK(nlohmann::json::parse(out).size() == 1);
  CHECK(RunCommand(Kevolve("compile --op layernorm --sweep NOPE=1,2" + seed), &out) == 2);
  CHECK(out.find("--sweep NOPE: block_row.cu has no parameter 'NOPE'") != std::string::npos);
  // A good sweep takes one value list per use: the files after it stay files (the command
  // gets as far as looking for a GPU, exit 3, or runs with one, exit 0).
  int rc = RunCommand(Kevolve("eval --op layernorm --no-timing --sweep SHIFT=0,1" + seed +
                              " configs/ops/layernorm/seeds/split_row.cu"), &out);
  INFO(out);
  CHECK(rc != 2);
}

TEST_CASE("kevolve ops lists the shipped ops", "[cli]") {
  std::string out;
  REQUIRE(RunCommand(Kevolve("ops --json"), &out) == 0);
  auto j = nlohmann::json::parse(out);
  REQUIRE(j.is_array());
  bool softmax = false;
  for (const auto& op : j) {
    if (op["name"] != "softmax") continue;
    softmax = true;
    // The arguments in order, and each seed's search space.
    REQUIRE(op["args"].size() == 4);
    CHECK(op["args"][0] == nlohmann::json{{"name", "x"}, {"kind", "buffer"}, {"role", "in"}, {"dtype", "T"}});
    CHECK(op["args"][1]["role"] == "out");
    CHECK(op["args"][2] == nlohmann::json{{"name", "rows"}, {"kind", "int"}});
    REQUIRE(op["seed_details"].size() == op["seeds"].size());
    for (const auto& d : op["seed_details"]) {
      INFO(d.dump());
      CHECK(d["params"].is_object());
      CHECK(d["space"].get<int64_t>() > 1);
    }
    CHECK(op["seed_details"][0]["file"] == "warp_row.cu");
    CHECK(op["seed_details"][0]["params"]["WARPS"].is_array());
  }
  CHECK(softmax);
}

TEST_CASE("kevolve ops OP shows the kernel's arguments and each seed's parameters", "[cli]") {
  std::string out;
  REQUIRE(RunCommand(Kevolve("ops layernorm"), &out) == 0);
  CHECK_THAT(out, Catch::Matchers::Contains("args:    x, w, b, y, int rows, int cols, float eps"));
  CHECK_THAT(out, Catch::Matchers::Contains("seed:    bulk_row.cu      SLICE CLUSTER ROWS TILES BLOCK STCS (1296 assignments"));
  CHECK_THAT(out, Catch::Matchers::Contains("seed:    warp_row.cu"));
}

TEST_CASE("a malformed op spec is reported with file and field", "[cli]") {
  auto root = testing::MakeTempDir("badspec");
  testing::WriteFile(root / "configs/ops/broken/op.json",
                     "// broken on purpose\n{\"name\": \"broken\", \"sizes\": [\"n\"], \"dtypes\": [\"f33\"]}\n");
  std::string out;
  int rc = RunCommand("KEVOLVE_HOME='" + root.string() + "' '" + testing::KevolveBinary().string() + "' ops", &out);
  CHECK(rc == 2);
  CHECK(out.find("op.json: field 'dtypes[0]'") != std::string::npos);
  CHECK(out.find("op.json: field 'buffers': missing") != std::string::npos);
  CHECK(out.find("exception") == std::string::npos);
}

TEST_CASE("kevolve compile prints the ladder and its exit code tells pass from fail", "[cli]") {
  std::string out;
  REQUIRE(RunCommand(Kevolve("compile --op softmax configs/ops/softmax/seeds/warp_row.cu"), &out) == 0);
  CHECK(out.find("[static] ok") != std::string::npos);
  CHECK(out.find("[compile] ok regs=") != std::string::npos);

  auto dir = testing::MakeTempDir("clicompile");
  testing::WriteFile(dir / "broken.cu",
                     "// @kevolve launch k grid=rows block=32\n"
                     "extern \"C\" __global__ void k(const T* x, T* y, int rows, int cols) {\n"
                     "  y[0] = oops;\n}\n");
  CHECK(RunCommand(Kevolve("compile --op softmax '" + (dir / "broken.cu").string() + "'"), &out) == 1);
  CHECK(out.find("[compile] FAILED") != std::string::npos);
  CHECK(out.find("broken.cu(3): error") != std::string::npos);

  REQUIRE(RunCommand(Kevolve("compile --op softmax --dtype bf16 --json configs/ops/softmax/seeds/block_row.cu"), &out) == 0);
  auto j = nlohmann::json::parse(out);
  REQUIRE(j.size() == 1);
  CHECK(j[0]["ok"] == true);
  CHECK(j[0]["dtype"] == "bf16");
  CHECK(j[0]["rungs"][1]["name"] == "compile");
  CHECK(j[0]["rungs"][1]["metrics"]["regs"].get<int>() > 0);

  CHECK(RunCommand(Kevolve("compile --op softmax --param NOPE=3 configs/ops/softmax/seeds/block_row.cu"), &out) == 2);
  CHECK(out.find("has no parameter 'NOPE'") != std::string::npos);
}

TEST_CASE("compile --db records candidates that the database commands read back", "[cli][db]") {
  auto dir = testing::MakeTempDir("clidb");
  std::string db = (dir / "k.db").string();
  std::string out;
  REQUIRE(RunCommand(Kevolve("compile --op softmax --variants 3 --db '" + db + "' configs/ops/softmax/seeds/warp_row.cu"),
                     &out) == 0);
  REQUIRE(RunCommand(Kevolve("runs --db '" + db + "'"), &out) == 0);
  CHECK(out.find("3 candidates") != std::string::npos);
  REQUIRE(RunCommand(Kevolve("show 1 --db '" + db + "'"), &out) == 0);
  CHECK(out.find("status=compiled") != std::string::npos);
  CHECK(out.find("[compile] ok") != std::string::npos);
  // Compiling the same variants again stores nothing twice.
  REQUIRE(RunCommand(Kevolve("compile --op softmax --variants 3 --db '" + db + "' configs/ops/softmax/seeds/warp_row.cu"),
                     &out) == 0);
  REQUIRE(RunCommand(Kevolve("runs --db '" + db + "'"), &out) == 0);
  CHECK(out.find("3 candidates") != std::string::npos);
  CHECK(RunCommand(Kevolve("show 99 --db '" + db + "'"), &out) == 2);
  CHECK(RunCommand(Kevolve("runs --db '" + (dir / "none.db").string() + "'"), &out) == 2);
}

TEST_CASE("a resumed run keeps its timer and its L2 flush", "[cli][db]") {
  auto dir = testing::MakeTempDir("cliresume");
  const std::string db = (dir / "k.db").string();
  {
    auto store = db::OpenSqliteStore(db);
    REQUIRE(store.ok());
    db::RunRecord run;
    run.op = "softmax";
    run.dtype = "f32";
    run.config = RunConfig().ToJson();  // events, memset
    REQUIRE((*store)->CreateRun(run).ok());
  }
  std::string out;
  for (const std::string flag : {"--timer cupti", "--flush read"}) {
    INFO(flag);
    CHECK(RunCommand(Kevolve("--resume 1 " + flag + " --db '" + db + "'"), &out) == 2);
    INFO(out);
    CHECK(CountLines(out) == 1);
    CHECK(out.find("; a resumed run keeps it") != std::string::npos);
  }
}

TEST_CASE("a search or eval --db timing with another L2 flush or timer than the database's is refused before any GPU work", "[cli][db]") {
  auto dir = testing::MakeTempDir("clidbproto");
  const std::string db = (dir / "k.db").string();
  const std::string seed = " configs/ops/softmax/seeds/warp_row.cu";
  std::string out;
  REQUIRE(RunCommand(Kevolve("compile --op softmax --db '" + db + "'" + seed), &out) == 0);
  {
    // One candidate timed the default way (events, memset), as a GPU run would store it.
    auto store = db::OpenSqliteStore(db);
    REQUIRE(store.ok());
    db::EvaluationRecord e;
    e.candidate_id = 1;
    e.status = "ok";
    db::TimingRecord t;
    t.shape = "4096x1024";
    t.median_us = 10;
    t.protocol = {{"timer", "events"}, {"flush_l2", true}, {"flush", "memset"}};
    e.timings = {t};
    REQUIRE((*store)->RecordEvaluation(e).ok());
  }
  for (const std::string& cmd : {"--op softmax --gens 1 --flush read --db '" + db + "'",
                                "--op softmax --gens 1 --timer cupti --db '" + db + "'",
                                "eval --op softmax --flush none --db '" + db + "'" + seed}) {
    INFO(cmd);
    CHECK(RunCommand(Kevolve(cmd), &out) == 2);
    INFO(out);
    CHECK(CountLines(out) == 1);
    CHECK(out.find("holds softmax f32 timings measured with --timer events --flush memset") != std::string::npos);
    CHECK(out.find("another --db") != std::string::npos);
  }
  // An untimed eval would replace the timed result in the database.
  CHECK(RunCommand(Kevolve("eval --op softmax --no-timing --db '" + db + "'" + seed), &out) == 2);
  CHECK(CountLines(out) == 1);
  CHECK(out.find("--no-timing cannot be combined with --db") != std::string::npos);
  // Another dtype of the op has no timings: its protocol is free (past the check: no GPU
  // here, exit 3; on a GPU machine it runs).
  CHECK(RunCommand(Kevolve("eval --op softmax --dtype bf16 --flush read --db '" + db + "'" + seed), &out) != 2);
  CHECK(out.find("timings measured with") == std::string::npos);
  // Nothing was recorded: still one candidate and no run.
  REQUIRE(RunCommand(Kevolve("runs --db '" + db + "'"), &out) == 0);
  CHECK(out.find("1 candidates") != std::string::npos);
  CHECK(CountLines(out) == 2);  // the header and the count: no run
}

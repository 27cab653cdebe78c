// WorkerPool against kevolve_fake_worker: round trips, the watchdog, crashes, garbage,
// lost contexts, concurrency and clean shutdown. No GPU needed.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "kevolve/evaluators/worker_pool.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace kevolve;

namespace {

WorkerPoolOptions FakeOptions(std::vector<std::string> extra, std::vector<int> devices = {0}) {
  WorkerPoolOptions o;
  o.exe = KEVOLVE_FAKE_WORKER;
  o.extra_args = std::move(extra);
  o.devices = std::move(devices);
  o.start_timeout_ms = 10000;
  o.min_deadline_ms = 300;
  return o;
}

std::unique_ptr<WorkerPool> StartPool(const WorkerPoolOptions& o) {
  auto pool = WorkerPool::Start(o);
  INFO(pool.status().ToString());
  REQUIRE(pool.ok());
  return std::move(pool).value();
}

// A request with no shapes: its deadline is the floor.
EvalRequest Request(int64_t id) {
  EvalRequest r;
  r.id = id;
  r.candidate.cubin = std::string("\0cubin", 6);
  return r;
}

void CheckServed(WorkerPool& pool, int64_t id) {
  auto r = pool.Evaluate(Request(id));
  REQUIRE(r.ok());
  REQUIRE(r->rungs.size() == 1);
  CHECK(r->rungs[0].name == "correctness");
  CHECK(r->rungs[0].ok);
  CHECK(r->rungs[0].metrics["id"] == id);
  CHECK(r->id == id);
}

const RungResult& OnlyRung(const Result<EvalResult>& r) {
  REQUIRE(r.ok());
  REQUIRE(r->rungs.size() == 1);
  return r->rungs[0];
}

// A process's state letter and parent, from /proc/PID/stat; false when it is gone.
bool ProcStat(pid_t pid, char* state, int* ppid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  return close != std::string::npos && std::sscanf(stat.c_str() + close + 1, " %c %d", state, ppid) == 2;
}

char ProcState(pid_t pid) {
  char state = 0;
  int ppid = 0;
  return ProcStat(pid, &state, &ppid) ? state : 0;
}

// The pids of this process's children.
std::set<pid_t> ChildPids() {
  std::set<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (ProcStat(std::stoi(name), &state, &ppid) && ppid == ::getpid()) out.insert(std::stoi(name));
  }
  return out;
}

}  // namespace

TEST_CASE("a worker pool serves requests and calibrations", "[workers]") {
  auto pool = StartPool(FakeOptions({"--mode", "ok"}));
  auto devs = pool->Devices();
  REQUIRE(devs.size() == 1);
  CHECK(devs[0].uuid == "FAKE-0");
  CHECK(devs[0].name == "fake");
  CheckServed(*pool, 11);
  CheckServed(*pool, 12);
  auto r = pool->Evaluate(Request(13));
  REQUIRE(r.ok());
  CHECK(r->device_uuid == "FAKE-0");
  auto cal = pool->Calibrate(0);
  REQUIRE(cal.ok());
  CHECK(cal->uuid == "FAKE-0");
  CHECK(cal->copy_gbps == 4000);
  CHECK_FALSE(pool->Calibrate(1).ok());
  CHECK(pool->restarts() == 0);
}

TEST_CASE("a worker whose calibration broke its context or failed is replaced, and the next one serves", "[workers]") {
  for (const char* how : {"lose-context", "error"}) {
    INFO(how);
    auto pool = StartPool(FakeOptions({"--mode", "ok", "--calibrate", how}));
    auto cal = pool->Calibrate(0);
    if (std::string(how) == "error") {
      CHECK_FALSE(cal.ok());
    } else {
      REQUIRE(cal.ok());
      CHECK(cal->copy_gbps == 4000);  // the figures measured before the probes stand
      CHECK(cal->details["l2"].value("context_lost", false));
    }
    CHECK(pool->restarts() == 1);
    CheckServed(*pool, 21);
  }
}

TEST_CASE("the watchdog kills a hanging worker and its replacement serves", "[workers]") {
  fs::path dir = testing::MakeTempDir("hang");
  auto pool = StartPool(FakeOptions({"--mode", "hang-once", "--marker", (dir / "marker").string()}));
  auto t0 = std::chrono::steady_clock::now();
  auto r = pool->Evaluate(Request(1));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const RungResult& rung = OnlyRung(r);
  CHECK(rung.name == "launch");
  CHECK_FALSE(rung.ok);
  CHECK(rung.reason == "timeout");
  CHECK_THAT(rung.log, Catch::Contains("watchdog deadline of 300 ms") && Catch::Contains("killed and replaced"));
  CHECK(r->device_uuid == "FAKE-0");
  CHECK(r->id == 1);
  CHECK(ms >= 290);
  CHECK(ms < 5000);
  CHECK(pool->restarts() == 1);
  CheckServed(*pool, 2);
  fs::remove_all(dir);
}

TEST_CASE("a crashing worker gives a crashed rung with its stderr, and is replaced", "[workers]") {
  fs::path dir = testing::MakeTempDir("crash");
  auto pool = StartPool(FakeOptions({"--mode", "crash", "--marker", (dir / "marker").string()}));
  auto r1 = pool->Evaluate(Request(1));
  const RungResult& rung = OnlyRung(r1);
  CHECK_FALSE(rung.ok);
  CHECK(rung.reason == "crashed");
  CHECK_THAT(rung.log, Catch::Contains("signal 6") && Catch::Contains("crashing on purpose"));
  CHECK(pool->restarts() == 1);
  CheckServed(*pool, 2);
  fs::remove_all(dir);
}

TEST_CASE("a worker sending garbage gives a failed rung, not a broken pool", "[workers]") {
  fs::path dir = testing::MakeTempDir("garbage");
  auto pool = StartPool(FakeOptions({"--mode", "garbage", "--marker", (dir / "marker").string()}));
  auto r1 = pool->Evaluate(Request(1));
  const RungResult& rung = OnlyRung(r1);
  CHECK_FALSE(rung.ok);
  CHECK(rung.reason == "worker_error");
  CHECK_THAT(rung.log, Catch::Contains("malformed"));
  CHECK(pool->restarts() == 1);
  CheckServed(*pool, 2);
  fs::remove_all(dir);
}

TEST_CASE("an error message from the worker is a worker_error rung; the worker stays", "[workers]") {
  fs::path dir = testing::MakeTempDir("error");
  auto pool = StartPool(FakeOptions({"--mode", "error", "--marker", (dir / "marker").string()}));
  auto r1 = pool->Evaluate(Request(1));
  const RungResult& rung = OnlyRung(r1);
  CHECK_FALSE(rung.ok);
  CHECK(rung.reason == "worker_error");
  CHECK(rung.log == "fake failure on purpose");
  CHECK(pool->restarts() == 0);
  CheckServed(*pool, 2);
  fs::remove_all(dir);
}

TEST_CASE("a lost context replaces the worker", "[workers]") {
  fs::path dir = testing::MakeTempDir("lost");
  auto pool = StartPool(FakeOptions({"--mode", "lose-context", "--marker", (dir / "marker").string()}));
  auto r = pool->Evaluate(Request(1));
  REQUIRE(r.ok());
  CHECK(r->context_lost);
  CHECK(r->id == 1);
  CHECK(pool->restarts() == 1);
  auto next = pool->Evaluate(Request(2));
  REQUIRE(next.ok());
  CHECK_FALSE(next->context_lost);
  CHECK(next->rungs.at(0).ok);
  fs::remove_all(dir);
}

TEST_CASE("when no worker can be respawned, Evaluate is an error", "[workers]") {
  fs::path dir = testing::MakeTempDir("dead");
  auto pool = StartPool(FakeOptions({"--mode", "crash", "--marker", (dir / "marker").string(), "--no-restart"}));
  auto r1 = pool->Evaluate(Request(1));
  const RungResult& rung = OnlyRung(r1);
  CHECK(rung.reason == "crashed");
  CHECK_THAT(rung.log, Catch::Contains("no replacement"));
  CHECK(pool->restarts() == 0);
  auto r = pool->Evaluate(Request(2));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error(), Catch::Contains("no GPU worker"));
  CHECK_FALSE(pool->Calibrate(0).ok());
  CHECK(pool->Devices().size() == 1);
  fs::remove_all(dir);
}

TEST_CASE("Start fails only when no worker starts", "[workers]") {
  WorkerPoolOptions missing = FakeOptions({});
  missing.exe = "/nonexistent/kevolve";
  auto none = WorkerPool::Start(missing);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error(), Catch::Contains("no GPU worker could be started"));

  auto partial = StartPool(FakeOptions({"--fail-device", "1"}, {0, 1}));
  auto devs = partial->Devices();
  REQUIRE(devs.size() == 1);
  CHECK(devs[0].uuid == "FAKE-0");

  auto all_fail = WorkerPool::Start(FakeOptions({"--fail-device", "0"}));
  REQUIRE_FALSE(all_fail.ok());
  CHECK_THAT(all_fail.error(), Catch::Contains("refusing to start"));
}

TEST_CASE("two devices are served concurrently from two threads", "[workers]") {
  auto pool = StartPool(FakeOptions({"--mode", "ok", "--delay-ms", "150"}, {0, 1}));
  REQUIRE(pool->Devices().size() == 2);
  std::vector<std::string> uuids[2];
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        auto r = pool->Evaluate(Request(t * 100 + i));
        uuids[t].push_back(r.ok() && r->id == t * 100 + i ? r->device_uuid : "failed");
      }
    });
  }
  for (auto& th : threads) th.join();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::set<std::string> seen;
  for (const auto& u : uuids)
    for (const auto& x : u) seen.insert(x);
  CHECK(seen == std::set<std::string>{"FAKE-0", "FAKE-1"});
  CHECK(ms < 8 * 150);  // serial would take 1200 ms at least
}

TEST_CASE("a worker that died while idle is replaced before the next request", "[workers]") {
  auto pool = StartPool(FakeOptions({"--mode", "ok"}));
  std::set<pid_t> kids = ChildPids();
  REQUIRE(kids.size() == 1);
  pid_t pid = *kids.begin();
  REQUIRE(::kill(pid, SIGKILL) == 0);
  for (int i = 0; i < 200 && ProcState(pid) != 'Z'; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(ProcState(pid) == 'Z');
  CheckServed(*pool, 5);  // not blamed on this request
  CHECK(pool->restarts() == 1);
}

TEST_CASE("the pool leaves no zombie and no worker behind", "[workers]") {
  fs::path dir = testing::MakeTempDir("zombie");
  std::set<pid_t> workers;
  {
    auto pool = StartPool(FakeOptions({"--mode", "hang-once", "--marker", (dir / "marker").string()}, {0, 1}));
    CHECK(pool->Evaluate(Request(1))->rungs.at(0).reason == "timeout");  // one replacement
    workers = ChildPids();
    CHECK(workers.size() == 2);
  }
  for (pid_t pid : workers) CHECK_FALSE(fs::exists("/proc/" + std::to_string(pid)));
  errno = 0;
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
  fs::remove_all(dir);
}

TEST_CASE("the watchdog deadline grows with the work in a request", "[workers]") {
  EvalRequest r;
  CHECK(WorkerPool::DeadlineMs(r, 1000) == 1000);
  r.launch_timeout_ms = 100;
  r.draws = 2;
  r.check.resize(2);
  r.tune.resize(1);
  r.timing.max_ms_per_shape = 500;
  CHECK(WorkerPool::DeadlineMs(r, 1000) == 1000 + 2 * 100 * 3 * 2 + (500 * 3 + 100));
}

namespace {

// Spawns `kevolve worker --device 0` with stdin from `in_fd` and stdout/stderr to
// /dev/null, telling it (as the pool does) that the calling process is its coordinator.
pid_t SpawnRealWorker(int in_fd) {
  const std::string exe = testing::KevolveBinary().string();  // before fork: no allocation in the child
  const std::string parent = "KEVOLVE_PARENT_PID=" + std::to_string(::getpid());
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in_fd, 0);
    int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    ::close(null_fd);
    ::putenv(const_cast<char*>(parent.c_str()));
    ::execl(exe.c_str(), exe.c_str(), "worker", "--device", "0", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The number of threads of a process (0 when it is gone).
int Threads(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

// Waits (up to 5 s) until the worker runs its parent watch: a second thread.
bool WatchRunning(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (Threads(pid) >= 2) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool Alive(pid_t pid) {
  char s = ProcState(pid);
  return s != 0 && s != 'Z';
}

}  // namespace

// Regression: PR_SET_PDEATHSIG fired when the short-lived *thread* that spawned a worker
// exited, killing every worker on the H200 right after its hello.
TEST_CASE("a real worker outlives the thread that spawned it", "[workers]") {
  int in[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  pid_t pid = -1;
  bool watching = false;
  // The spawning thread lives until the worker is up (so a death signal tied to that
  // thread would be armed), then exits.
  std::thread([&] {
    pid = SpawnRealWorker(in[0]);
    watching = WatchRunning(pid);
  }).join();
  REQUIRE(pid > 0);
  CHECK(watching);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // past the 200 ms parent poll
  CHECK(Alive(pid));
  ::close(in[1]);  // EOF: the worker exits by itself
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  ::close(in[0]);
}

TEST_CASE("a real worker dies with its coordinator even while its stdin stays open", "[workers]") {
  int in[2], report[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  pid_t coordinator = ::fork();
  if (coordinator == 0) {  // stands in for a coordinator killed by kill -9
    pid_t w = SpawnRealWorker(in[0]);
    (void)!::write(report[1], &w, sizeof(w));
    // Exit only once the worker runs its parent watch, and say whether it did.
    ::_exit(WatchRunning(w) ? 0 : 3);
  }
  pid_t worker = -1;
  REQUIRE(::read(report[0], &worker, sizeof(worker)) == sizeof(worker));
  int cstatus = 0;
  REQUIRE(::waitpid(coordinator, &cstatus, 0) == coordinator);
  REQUIRE(WIFEXITED(cstatus));
  REQUIRE(WEXITSTATUS(cstatus) == 0);  // the worker did run (else "gone" would prove nothing)
  // We still hold the write end of its stdin, so only the parent watch can end it.
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = !Alive(worker);
  }
  CHECK(gone);
  if (!gone) ::kill(worker, SIGKILL);
  for (int fd : {in[0], in[1], report[0], report[1]}) ::close(fd);
}

TEST_CASE("the pool tells a real worker its coordinator's pid", "[workers]") {
  std::string why;
  if (testing::GpuAvailable(&why)) {
    SUCCEED("a GPU is present: the [gpu] tests start real workers through the pool");
    return;
  }
  // Without a GPU the real worker starts, passes its parent check, and answers the hello
  // with its reason; a worker that rejected its parent would exit silently instead.
  WorkerPoolOptions o;
  o.exe = testing::KevolveBinary().string();
  o.devices = {0};
  o.start_timeout_ms = 20000;
  auto pool = WorkerPool::Start(o);
  REQUIRE_FALSE(pool.ok());
  INFO(pool.error());
  CHECK(pool.error().find("could not start") != std::string::npos);
  CHECK(pool.error().find("coordinator") == std::string::npos);
}

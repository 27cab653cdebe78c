// WorkerPool: one `exe worker --device N` process per GPU, talking over two pipes.
//
// Locking. mu_ guards busy_, restarts_ and the pointers in workers_ (Replace swaps them).
// A slot is owned by whoever set busy_[slot] (Acquire, or Calibrate for its device);
// only the owner touches the WorkerProcess in that slot (its channel, its pid), and it
// does so without holding mu_, so no lock is held while waiting on a worker. A
// WorkerProcess's desc never changes once it is in workers_, so Devices() may read it
// under mu_ at any time. A slot whose worker could not be respawned is dead: its
// WorkerProcess stays (for its desc) with no channel and pid -1.
#include "kevolve/evaluators/worker_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <utility>

extern char** environ;

namespace kevolve {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kNoSlot = static_cast<size_t>(-1);
constexpr double kCalibrateTimeoutMs = 120000;
constexpr int kShutdownGraceMs = 2000;  // the destructor's wait for workers to exit
constexpr int kExitGraceMs = 2000;      // a worker that closed its channel or lost its context
constexpr std::streamoff kStderrTailBytes = 2048;

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Creates an empty, uniquely named file for a worker's stderr; "" on failure.
std::string MakeStderrFile(int device) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/kevolve-worker" + std::to_string(device) + "-XXXXXX";
  int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) return "";
  ::close(fd);
  return path;
}

// The last kStderrTailBytes of a worker's stderr.
std::string StderrTail(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  std::streamoff size = in.tellg();
  std::streamoff start = size > kStderrTailBytes ? size - kStderrTailBytes : 0;
  in.seekg(start);
  std::string tail(static_cast<size_t>(size - start), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  return (start > 0 ? "..." : "") + tail;
}

// Waits up to grace_ms for `pid` to exit by itself, then SIGKILLs it. Always reaps it.
// Returns its wait status, or nothing when it was not our child to reap.
std::optional<int> ReapWithin(pid_t pid, int grace_ms) {
  if (pid <= 0) return std::nullopt;  // waitpid would take any child
  auto end = Clock::now() + std::chrono::milliseconds(grace_ms);
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (Clock::now() >= end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return std::nullopt;
  return status;
}

// Starts args[0] with its stdin and stdout on two new pipes and its stderr on err_path;
// fills *pid, *read_fd (its stdout) and *write_fd (its stdin). Returns 0 or an errno value.
// Every pipe end is close-on-exec, so no other child inherits one; dup2 onto the worker's
// 0 and 1 clears the flag there. The worker starts with no blocked signals and SIGPIPE at
// its default, whatever this thread has.
int SpawnWithPipes(const std::vector<std::string>& args, const std::string& err_path, pid_t* pid, int* read_fd,
                   int* write_fd) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return errno;
  if (::pipe2(out, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(in[0]);
    ::close(in[1]);
    return e;
  }
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, pipe_only;
  sigemptyset(&none);
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &pipe_only);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  // The worker's environment: ours, plus the pid it must die with (see RunWorker).
  std::vector<std::string> env_store;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "KEVOLVE_PARENT_PID=", 19) != 0) env_store.emplace_back(*e);
  env_store.push_back("KEVOLVE_PARENT_PID=" + std::to_string(::getpid()));
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  int rc = ::posix_spawn(pid, args[0].c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    return rc;
  }
  *read_fd = out[0];
  *write_fd = in[1];
  return 0;
}

std::string DescribeExit(std::optional<int> status) {
  if (!status) return "could not be reaped";
  if (WIFEXITED(*status)) return "exited with status " + std::to_string(WEXITSTATUS(*status));
  if (WIFSIGNALED(*status)) {
    int sig = WTERMSIG(*status);
    const char* name = ::strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "stopped with wait status " + std::to_string(*status);
}

// One request/reply exchange with a worker. kCrashed: the channel closed (the worker
// died). kProtocol: anything else failed (a malformed reply, an oversized request). On
// anything but kReply, Talk has reaped the worker (pid -1) and its slot needs Replace.
struct Exchange {
  enum class Kind { kReply, kTimeout, kCrashed, kProtocol };
  Kind kind = Kind::kReply;
  Message reply;
  std::string detail;  // kCrashed: how it ended, and its stderr; kProtocol: what went wrong
};

// REQUIRES: the caller owns w's slot and w is live.
Exchange Talk(WorkerProcess& w, const Message& m, double timeout_ms) {
  Exchange ex;
  Status sent = w.channel->Send(m);
  Result<Message> reply = sent.ok() ? w.channel->Receive(timeout_ms) : Result<Message>(sent);
  if (reply.ok()) {
    ex.reply = std::move(reply).value();
    return ex;
  }
  const std::string& err = reply.error();
  w.channel.reset();  // out of step now; closing also tells the worker to go
  if (err.rfind("timeout", 0) == 0) {
    ex.kind = Exchange::Kind::kTimeout;
    KillAndReap(w.pid);
  } else if (err.rfind("closed", 0) == 0) {
    ex.kind = Exchange::Kind::kCrashed;
    ex.detail = "the worker " + DescribeExit(ReapWithin(w.pid, kExitGraceMs));
    std::string tail = StderrTail(w.stderr_path);
    if (!tail.empty()) ex.detail += "\nits last stderr:\n" + tail;
  } else {
    ex.kind = Exchange::Kind::kProtocol;
    ex.detail = err;
    KillAndReap(w.pid);
  }
  w.pid = -1;
  return ex;
}

EvalResult FailedLaunch(const EvalRequest& req, const std::string& uuid, const std::string& reason,
                        const std::string& log, Clock::time_point t0) {
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EvalResult r;
  r.id = req.id;
  r.device_uuid = uuid;
  r.rungs.push_back(RungResult{"launch", false, reason, nlohmann::json::object(), log, ms});
  return r;
}

std::string ErrorText(const Message& m) {
  auto it = m.body.find("message");
  return it != m.body.end() && it->is_string() ? it->get<std::string>() : m.body.dump();
}

}  // namespace

void KillAndReap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// deadline = floor_ms
//   + per check shape: launch_timeout_ms * (draws + 1) * 2   (every draw plus the
//       determinism repeat, each at its own launch limit, for candidate and reference)
//   + per tune shape: timing.max_ms_per_shape * 3 + launch_timeout_ms   (the measuring
//       cap, with room for warm-up and L2 flushes, plus one launch at its limit)
double WorkerPool::DeadlineMs(const EvalRequest& req, double floor_ms) {
  double ms = floor_ms;
  double draws = req.draws > 0 ? req.draws : 0;
  ms += static_cast<double>(req.check.size()) * req.launch_timeout_ms * (draws + 1) * 2;
  ms += static_cast<double>(req.tune.size()) * (req.timing.max_ms_per_shape * 3 + req.launch_timeout_ms);
  return ms;
}

Result<std::unique_ptr<WorkerPool>> WorkerPool::Start(const WorkerPoolOptions& options) {
  WorkerPoolOptions opts = options;
  if (opts.devices.empty()) opts.devices = {0};  // the CLI lists the GPUs; alone, assume one
  std::unique_ptr<WorkerPool> pool(new WorkerPool(std::move(opts)));
  const std::vector<int>& devices = pool->options_.devices;
  // In parallel: each worker spends seconds creating its CUDA context.
  std::vector<std::unique_ptr<WorkerProcess>> started(devices.size());
  std::vector<std::string> errors(devices.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < devices.size(); ++i) {
    threads.emplace_back([&, i] {
      auto w = pool->Spawn(devices[i]);
      if (w.ok())
        started[i] = std::move(w).value();
      else
        errors[i] = w.error();
    });
  }
  for (auto& t : threads) t.join();
  std::string failures;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (started[i]) {
      pool->workers_.push_back(std::move(started[i]));
      pool->busy_.push_back(false);
    } else {
      failures += "\n" + errors[i];
    }
  }
  if (pool->workers_.empty()) return Status::Error("no GPU worker could be started:" + failures);
  if (!failures.empty())
    std::fprintf(stderr, "kevolve: going on with %zu of %zu GPU workers:%s\n", pool->workers_.size(), devices.size(),
                 failures.c_str());
  return Result<std::unique_ptr<WorkerPool>>(std::move(pool));
}

Result<std::unique_ptr<WorkerProcess>> WorkerPool::Spawn(int device) {
  std::string exe = options_.exe.empty() ? SelfExe() : options_.exe;
  std::string what = "the worker for device " + std::to_string(device);
  if (exe.empty()) return Status::Error(what + ": cannot find the kevolve executable");
  std::string err_path = MakeStderrFile(device);
  if (err_path.empty()) return Status::Error(what + ": cannot create its stderr file: " + std::strerror(errno));
  std::vector<std::string> args = {exe, "worker", "--device", std::to_string(device)};
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  auto w = std::make_unique<WorkerProcess>();
  int read_fd = -1, write_fd = -1;
  if (int rc = SpawnWithPipes(args, err_path, &w->pid, &read_fd, &write_fd); rc != 0) {
    ::unlink(err_path.c_str());
    return Status::Error(what + " could not be spawned (" + exe + "): " + std::strerror(rc));
  }
  w->device = device;
  w->channel = std::make_unique<PipeChannel>(read_fd, write_fd, true);
  w->stderr_path = err_path;

  Exchange ex = Talk(*w, MakeMessage("hello"), options_.start_timeout_ms);
  std::string why;
  if (ex.kind == Exchange::Kind::kTimeout)
    why = "no hello reply within " + std::to_string(int64_t(options_.start_timeout_ms)) + " ms";
  else if (ex.kind != Exchange::Kind::kReply)
    why = ex.detail;
  else if (ex.reply.type == "error")
    why = ErrorText(ex.reply);
  else if (auto desc = DeviceDescFromMessage(ex.reply); !desc.ok())
    why = desc.error();
  else
    w->desc = std::move(desc).value();
  if (why.empty()) return w;

  if (w->pid > 0) {
    w->channel.reset();
    KillAndReap(w->pid);
  }
  std::string tail = StderrTail(err_path);
  if (!tail.empty() && why.find(tail) == std::string::npos) why += "; its stderr:\n" + tail;
  ::unlink(err_path.c_str());
  return Status::Error(what + " did not start: " + why);
}

WorkerPool::~WorkerPool() {
  // REQUIRES: no Evaluate or Calibrate in flight.
  for (auto& w : workers_)
    if (w->channel) (void)w->channel->Send(MakeMessage("shutdown"));
  for (auto& w : workers_) w->channel.reset();  // EOF on stdin is a shutdown too
  auto end = Clock::now() + std::chrono::milliseconds(kShutdownGraceMs);
  for (auto& w : workers_) {
    if (w->pid > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      ReapWithin(w->pid, left > 0 ? static_cast<int>(left) : 0);
      w->pid = -1;
    }
    if (!w->stderr_path.empty()) ::unlink(w->stderr_path.c_str());
  }
}

std::vector<DeviceDesc> WorkerPool::Devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DeviceDesc> out;
  for (const auto& w : workers_) out.push_back(w->desc);
  return out;
}

int WorkerPool::restarts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return restarts_;
}

size_t WorkerPool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    bool any_busy = false;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (busy_[i]) {
        any_busy = true;  // its owner may still bring it back
      } else if (workers_[i]->channel) {
        busy_[i] = true;
        return i;
      }
    }
    if (!any_busy) return kNoSlot;  // every slot is dead
    free_cv_.wait(lock);
  }
}

void WorkerPool::Release(size_t slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_[slot] = false;
  }
  free_cv_.notify_all();  // all: a waiter may need to learn that every slot is dead
}

void WorkerPool::RetireAndReplace(size_t slot) {
  WorkerProcess& w = *workers_[slot];
  w.channel.reset();
  ReapWithin(w.pid, kExitGraceMs);  // gives it the time to exit by itself, then kills it
  w.pid = -1;
  Replace(slot);
}

void WorkerPool::Replace(size_t slot) {
  WorkerProcess& old = *workers_[slot];
  old.channel.reset();
  KillAndReap(old.pid);
  old.pid = -1;
  if (!old.stderr_path.empty()) ::unlink(old.stderr_path.c_str());
  old.stderr_path.clear();
  auto fresh = Spawn(old.device);
  if (!fresh.ok()) {
    std::fprintf(stderr, "kevolve: %s; its slot stays empty\n", fresh.error().c_str());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  workers_[slot] = std::move(fresh).value();  // frees `old`
  ++restarts_;
}

Result<EvalResult> WorkerPool::Evaluate(const EvalRequest& req) {
  size_t slot = kNoSlot;
  for (;;) {
    slot = Acquire();
    if (slot == kNoSlot) return Status::Error("no GPU worker is left: every worker died and could not be respawned");
    // A worker that died while idle is not this request's fault: replace it first.
    int status = 0;
    if (::waitpid(workers_[slot]->pid, &status, WNOHANG) != workers_[slot]->pid) break;
    workers_[slot]->pid = -1;
    Replace(slot);
    if (workers_[slot]->channel) break;
    Release(slot);
  }
  auto t0 = Clock::now();
  WorkerProcess& w = *workers_[slot];  // we own the slot: nobody swaps it
  std::string uuid = w.desc.uuid;
  double deadline_ms = DeadlineMs(req, options_.min_deadline_ms);
  Exchange ex = Talk(w, ToMessage(req), deadline_ms);

  std::optional<EvalResult> out;
  if (ex.kind == Exchange::Kind::kReply && ex.reply.type != "error") {
    auto r = EvalResultFromMessage(ex.reply);
    if (r.ok() && r->id == req.id) {
      out = std::move(r).value();
      if (out->device_uuid.empty()) out->device_uuid = uuid;
    } else {  // the worker is out of step: Replace kills it
      ex.kind = Exchange::Kind::kProtocol;
      ex.detail = r.ok() ? "a result for request " + std::to_string(r->id) : r.error();
    }
  }
  if (out && out->context_lost) {
    RetireAndReplace(slot);  // the worker exits by itself after a lost context
  } else if (ex.kind != Exchange::Kind::kReply) {
    Replace(slot);
  }
  if (!out) {
    std::string reason = "worker_error", log;
    switch (ex.kind) {
      case Exchange::Kind::kReply:  // an "error" message; the worker carries on
        log = ErrorText(ex.reply);
        break;
      case Exchange::Kind::kTimeout:
        reason = "timeout";
        log = "the evaluation passed its watchdog deadline of " + std::to_string(int64_t(deadline_ms)) +
              " ms; the worker was killed and replaced";
        break;
      case Exchange::Kind::kCrashed:
        reason = "crashed";
        log = "the worker died during the evaluation and was replaced: " + ex.detail;
        break;
      case Exchange::Kind::kProtocol:
        log = "the exchange with the worker failed (" + ex.detail + "); it was killed and replaced";
        break;
    }
    if (!workers_[slot]->channel) log += "\n(no replacement worker could be started; see the log)";
    out = FailedLaunch(req, uuid, reason, log, t0);
  }
  Release(slot);
  return std::move(*out);
}

Result<Calibration> WorkerPool::Calibrate(int device_index) {
  if (device_index < 0 || static_cast<size_t>(device_index) >= workers_.size())
    return Status::Error("no device " + std::to_string(device_index) + " in the worker pool");
  size_t slot = static_cast<size_t>(device_index);
  {
    std::unique_lock<std::mutex> lock(mu_);
    free_cv_.wait(lock, [&] { return !busy_[slot]; });
    if (!workers_[slot]->channel)
      return Status::Error("the worker for device " + std::to_string(workers_[slot]->device) + " is dead");
    busy_[slot] = true;
  }
  WorkerProcess& w = *workers_[slot];
  std::string what = "calibration on device " + std::to_string(w.device);
  Exchange ex = Talk(w, MakeMessage("calibrate"), kCalibrateTimeoutMs);
  Result<Calibration> out = Status::Error(what + " failed");
  if (ex.kind == Exchange::Kind::kTimeout)
    out = Status::Error(what + " timed out; the worker was replaced");
  else if (ex.kind != Exchange::Kind::kReply)
    out = Status::Error(what + " failed: " + ex.detail);
  else if (ex.reply.type == "error")
    out = Status::Error(what + " failed: " + ErrorText(ex.reply));
  else
    out = CalibrationFromMessage(ex.reply);
  // A worker whose calibration failed, or whose L2 probes broke its context, may be dead or
  // about to exit (it does after a lost context): give it the time to, then start anew.
  const bool lost = ex.kind == Exchange::Kind::kReply &&
                    (ex.reply.type == "error" ||
                     (out.ok() && out->details.contains("l2") && out->details["l2"].value("context_lost", false)));
  if (lost) {
    RetireAndReplace(slot);
  } else if (ex.kind != Exchange::Kind::kReply) {
    Replace(slot);
  }
  Release(slot);
  return out;
}

}  // namespace kevolve

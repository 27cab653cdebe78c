// The command kind: `/bin/sh -c COMMAND` with the prompt on stdin and the reply on
// stdout, so any command-line coding agent can act as the mutation operator.
//
// The child runs in its own process group so a timeout kills everything it started.
// stdin, stdout and stderr are serviced together with poll(), so a large prompt cannot
// deadlock against a child that writes before it has read everything.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "provider_internal.h"
#include "transport_sigpipe.h"

extern char** environ;  // POSIX

namespace kevolve::llm::internal {

namespace {

constexpr size_t kMaxStdoutBytes = 64u << 20;  // more is not a reply; the rest is drained
constexpr size_t kStderrTailBytes = 4096;
constexpr size_t kErrorTailChars = 300;
constexpr size_t kChunkBytes = 64u << 10;
constexpr int kExitPollMs = 50;  // how often to look for an exited child whose pipes stay open

using Clock = std::chrono::steady_clock;

// A file descriptor closed on destruction.
class Fd {
 public:
  Fd() = default;
  ~Fd() { Close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Both ends close-on-exec, so a concurrent spawn never inherits another call's pipe
// (which would keep that call's stdin from reaching EOF).
bool MakePipe(Fd* read_end, Fd* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  read_end->Reset(fds[0]);
  write_end->Reset(fds[1]);
  return true;
}

// RAII for the posix_spawn attribute objects.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

struct ChildResult {
  std::string spawn_error;  // non-empty when the child could not be started
  bool timed_out = false;
  int wait_status = 0;
  std::string out;
  std::string err_tail;
};

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Reads what is available; closes `fd` at EOF or on error.
void ReadSome(Fd& fd, std::string* sink, size_t cap, bool keep_tail) {
  char buf[kChunkBytes];
  while (fd.open()) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n > 0) {
      sink->append(buf, static_cast<size_t>(n));
      if (sink->size() > cap) {
        if (keep_tail) {
          sink->erase(0, sink->size() - cap);
        } else {
          sink->resize(cap);
        }
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    fd.Close();
  }
}

ChildResult RunShell(const std::string& command, const std::string& input, double timeout_s) {
  ChildResult res;
  Fd in_r, in_w, out_r, out_w, err_r, err_w;
  if (!MakePipe(&in_r, &in_w) || !MakePipe(&out_r, &out_w) || !MakePipe(&err_r, &err_w)) {
    res.spawn_error = std::string("pipe: ") + std::strerror(errno);
    return res;
  }
  SpawnSetup setup;
  posix_spawn_file_actions_adddup2(&setup.actions, in_r.get(), STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&setup.actions, out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&setup.actions, err_w.get(), STDERR_FILENO);
  // Own process group (to kill it whole); SIGPIPE default and nothing blocked in the
  // child whatever this thread has blocked.
  sigset_t none, pipe_only;
  sigemptyset(&none);
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  posix_spawnattr_setflags(&setup.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&setup.attr, 0);
  posix_spawnattr_setsigmask(&setup.attr, &none);
  posix_spawnattr_setsigdefault(&setup.attr, &pipe_only);

  std::string arg0 = "sh", arg1 = "-c", arg2 = command;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, "/bin/sh", &setup.actions, &setup.attr, argv, environ);
  in_r.Close();
  out_w.Close();
  err_w.Close();
  if (rc != 0) {
    res.spawn_error = std::string("cannot run /bin/sh: ") + std::strerror(rc);
    return res;
  }

  ScopedSigpipeBlock no_sigpipe;  // a child that exits early turns our writes into EPIPE
  SetNonBlocking(in_w.get());
  SetNonBlocking(out_r.get());
  SetNonBlocking(err_r.get());
  size_t written = 0;
  if (input.empty()) in_w.Close();
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  bool reaped = false;
  while (true) {
    if (::waitpid(pid, &res.wait_status, WNOHANG) == pid) {
      reaped = true;
      break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || LlmCallsCancelled()) break;  // timed out, or the search was interrupted
    pollfd fds[3];
    nfds_t n = 0;
    if (in_w.open()) fds[n++] = {in_w.get(), POLLOUT, 0};
    if (out_r.open()) fds[n++] = {out_r.get(), POLLIN, 0};
    if (err_r.open()) fds[n++] = {err_r.get(), POLLIN, 0};
    int wait_ms = static_cast<int>(std::min<long long>(left, kExitPollMs));
    // With all pipes at EOF the child is exiting: wait for it in short steps.
    if (::poll(fds, n, wait_ms) < 0 && errno != EINTR) break;
    if (in_w.open()) {
      ssize_t w = ::write(in_w.get(), input.data() + written, std::min(kChunkBytes, input.size() - written));
      if (w > 0) written += static_cast<size_t>(w);
      bool fatal = w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // EPIPE: it stopped reading
      if (fatal || written == input.size()) in_w.Close();
    }
    ReadSome(out_r, &res.out, kMaxStdoutBytes, /*keep_tail=*/false);
    ReadSome(err_r, &res.err_tail, kStderrTailBytes, /*keep_tail=*/true);
  }
  if (!reaped) {
    res.timed_out = true;
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &res.wait_status, 0) < 0 && errno == EINTR) {
    }
    return res;
  }
  // Exited: what it wrote is in the pipes already (a writer blocked on a full pipe would
  // not have exited). Take it without waiting on descendants that keep the pipes open.
  ReadSome(out_r, &res.out, kMaxStdoutBytes, false);
  ReadSome(err_r, &res.err_tail, kStderrTailBytes, true);
  return res;
}

std::string RenderPrompt(const std::vector<Message>& messages) {
  std::string prompt;
  for (const auto& m : messages) {
    if (!prompt.empty()) prompt += "\n\n";
    prompt += "### " + m.role + "\n" + m.content;
  }
  return prompt + "\n";
}

std::string Describe(double seconds) {
  std::ostringstream s;
  s << seconds;
  return s.str();
}

class CommandBackend : public Backend {
 public:
  explicit CommandBackend(ProviderConfig cfg) : cfg_(std::move(cfg)) {}

  Attempt Call(const std::vector<Message>& messages) override {
    std::string prompt = RenderPrompt(messages);
    ChildResult r = RunShell(cfg_.command, prompt, cfg_.timeout_s);
    if (!r.spawn_error.empty()) return Failed("command_failed", r.spawn_error, false);
    if (r.timed_out) return Failed("timeout", "command timed out after " + Describe(cfg_.timeout_s) + " s", true);
    Attempt a;
    a.reply.tokens_in = EstimateTokens(prompt.size());
    a.reply.tokens_out = EstimateTokens(r.out.size());
    if (WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0) {
      a.reply.text = std::move(r.out);
      return a;
    }
    std::string why = WIFEXITED(r.wait_status) ? "command exited with status " + std::to_string(WEXITSTATUS(r.wait_status))
                      : WIFSIGNALED(r.wait_status) ? "command killed by signal " + std::to_string(WTERMSIG(r.wait_status))
                                                   : std::string("command failed");
    std::string tail = OneLine(r.err_tail, kStderrTailBytes);
    if (tail.size() > kErrorTailChars) tail = "..." + tail.substr(tail.size() - kErrorTailChars);
    a.reply.outcome = "command_failed";
    a.reply.error = tail.empty() ? why : why + ": " + tail;
    return a;
  }

 private:
  const ProviderConfig cfg_;
};

}  // namespace

std::unique_ptr<Backend> MakeCommandBackend(const ProviderConfig& cfg) { return std::make_unique<CommandBackend>(cfg); }

}  // namespace kevolve::llm::internal

// PipeChannel: frames are a 4-byte little-endian length, then that many bytes of
// EncodeMessage output.
//
// SIGPIPE: writing to a pipe whose reader is gone raises SIGPIPE, which would kill the
// coordinator when a worker dies. Rather than ignoring SIGPIPE for the whole process
// (which would change how the CLI behaves when its own stdout is a closed pipe), every
// write blocks SIGPIPE in the calling thread only (pthread_sigmask), and a SIGPIPE that
// the write raised is consumed (sigtimedwait) before the mask is restored. The write
// then fails with EPIPE, which Send reports as "closed".
#include "kevolve/evaluators/channel.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace kevolve {

namespace {

using Clock = std::chrono::steady_clock;

// Blocks SIGPIPE in this thread for its lifetime; Discard() drops one the scope raised.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~ScopedSigpipeBlock() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

  void Discard() {
    if (was_pending_) return;  // not ours to take
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) == -1 && errno == EINTR) {
    }
  }

 private:
  sigset_t set_, old_;
  bool was_pending_ = false;
};

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

Status WriteAll(int fd, const char* data, size_t n) {
  ScopedSigpipeBlock block;
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) {
        block.Discard();
        return Status::Error("closed: the peer closed the channel");
      }
      return Status::Error(Errno("write failed"));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Milliseconds left until `deadline` as a poll() timeout: -1 when there is no deadline.
int PollTimeout(bool has_deadline, Clock::time_point deadline) {
  if (!has_deadline) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  // Round up, so a sub-millisecond remainder does not spin with timeout 0.
  if (left < 0) return 0;
  constexpr long long kMaxPollMs = 1 << 30;  // poll takes an int; longer waits poll again
  return static_cast<int>(left < kMaxPollMs ? left + 1 : kMaxPollMs);
}

// Reads exactly n bytes, polling before every read with whatever time is left. A timeout
// or EOF mid-frame leaves the stream out of step: the caller discards the channel.
Status ReadAll(int fd, char* data, size_t n, bool has_deadline, Clock::time_point deadline) {
  size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    int timeout = PollTimeout(has_deadline, deadline);
    int r = ::poll(&p, 1, timeout);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::Error(Errno("poll failed"));
    }
    if (r == 0) {
      if (has_deadline && Clock::now() >= deadline) return Status::Error("timeout: no message in time");
      continue;
    }
    if (p.revents & POLLNVAL) return Status::Error("read failed: invalid file descriptor");
    ssize_t k = ::read(fd, data + got, n - got);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::Error(Errno("read failed"));
    }
    if (k == 0) {
      if (got == 0) return Status::Error("closed: the peer closed the channel");
      return Status::Error("closed: the peer closed the channel mid-frame");
    }
    got += static_cast<size_t>(k);
  }
  return Status::Ok();
}

}  // namespace

PipeChannel::PipeChannel(int read_fd, int write_fd, bool own) : read_fd_(read_fd), write_fd_(write_fd), own_(own) {}

PipeChannel::~PipeChannel() {
  if (!own_) return;
  if (read_fd_ >= 0) ::close(read_fd_);
  if (write_fd_ >= 0 && write_fd_ != read_fd_) ::close(write_fd_);
}

Status PipeChannel::Send(const Message& m) {
  std::string bytes = EncodeMessage(m);
  if (bytes.size() > kMaxMessageBytes)
    return Status::Error("message of " + std::to_string(bytes.size()) + " bytes is over the limit of " +
                         std::to_string(kMaxMessageBytes));
  uint32_t n = static_cast<uint32_t>(bytes.size());
  char header[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                    static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  if (Status s = WriteAll(write_fd_, header, sizeof(header)); !s.ok()) return s;
  return WriteAll(write_fd_, bytes.data(), bytes.size());
}

Result<Message> PipeChannel::Receive(double timeout_ms) {
  constexpr double kForeverMs = 1e12;  // past this (~30 years) the deadline would overflow
  bool has_deadline = timeout_ms >= 0 && timeout_ms < kForeverMs;
  Clock::time_point deadline = Clock::now();
  if (has_deadline)
    deadline += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(timeout_ms));
  unsigned char header[4];
  if (Status s = ReadAll(read_fd_, reinterpret_cast<char*>(header), sizeof(header), has_deadline, deadline); !s.ok())
    return s;
  uint32_t n =
      uint32_t(header[0]) | (uint32_t(header[1]) << 8) | (uint32_t(header[2]) << 16) | (uint32_t(header[3]) << 24);
  if (n > kMaxMessageBytes)
    return Status::Error("message of " + std::to_string(n) + " bytes is over the limit of " +
                         std::to_string(kMaxMessageBytes));
  std::string bytes(n, '\0');
  if (Status s = ReadAll(read_fd_, bytes.data(), n, has_deadline, deadline); !s.ok()) return s;
  return DecodeMessage(bytes);
}

}  // namespace kevolve

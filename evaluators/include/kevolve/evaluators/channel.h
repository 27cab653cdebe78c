// A Channel carries protocol messages between two processes. PipeChannel frames them
// over file descriptors (4-byte little-endian length, then the bytes); an MPI channel
// can implement the same interface later.
#pragma once

#include <memory>
#include <string>

#include "kevolve/core/status.h"
#include "kevolve/evaluators/protocol.h"

namespace kevolve {

class Channel {
 public:
  virtual ~Channel() = default;
  virtual Status Send(const Message& m) = 0;
  // Waits at most timeout_ms (< 0: forever). A timeout's error message starts with
  // "timeout"; the peer closing reads "closed".
  virtual Result<Message> Receive(double timeout_ms) = 0;
};

// Owns neither fd unless `own` is set. Messages above kMaxMessageBytes are refused.
class PipeChannel : public Channel {
 public:
  static constexpr uint32_t kMaxMessageBytes = 1u << 30;
  PipeChannel(int read_fd, int write_fd, bool own);
  ~PipeChannel() override;
  PipeChannel(const PipeChannel&) = delete;
  PipeChannel& operator=(const PipeChannel&) = delete;
  Status Send(const Message& m) override;
  Result<Message> Receive(double timeout_ms) override;

 private:
  int read_fd_, write_fd_;
  bool own_;
};

}  // namespace kevolve

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "gpu_eval.h"
#include "kevolve/evaluators/channel.h"
#include "kevolve/evaluators/worker.h"

namespace kevolve {

namespace {

void SendError(Channel& ch, const std::string& what) {
  ch.Send(MakeMessage("error", {{"message", what}}));
}

}  // namespace

int RunWorker(int device) {
  // Die with the coordinator: a killed run leaves no worker (or spinning kernel) behind.
  // PR_SET_PDEATHSIG cannot do this: it fires when the *thread* that spawned us exits,
  // and the pool spawns workers from short-lived threads. So a detached thread polls the
  // parent's pid instead; it works even while the main thread waits on a hung kernel.
  // The coordinator passes its pid (KEVOLVE_PARENT_PID): a worker whose coordinator died
  // before this line, and was adopted by another process, must not watch the adopter.
  // Without the variable (started by hand), the current parent is watched.
  pid_t parent = ::getppid();
  if (const char* want = std::getenv("KEVOLVE_PARENT_PID"); want && *want) {
    if (std::to_string(parent) != want) {
      std::fprintf(stderr, "kevolve worker %d: its coordinator (pid %s) is gone\n", device, want);
      return 1;
    }
  }
  std::thread([parent] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (::getppid() != parent) ::kill(::getpid(), SIGKILL);
    }
  }).detach();
  // fd 1 carries the protocol; anything a library prints to stdout goes to /dev/null.
  int proto_out = ::dup(1);
  int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (proto_out < 0 || devnull < 0 || ::dup2(devnull, 1) < 0) {
    std::fprintf(stderr, "kevolve worker: cannot set up its channel\n");
    return 1;
  }
  ::close(devnull);
  PipeChannel ch(0, proto_out, false);
  auto t0 = std::chrono::steady_clock::now();
  auto log = [&](const std::string& what) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "kevolve worker %d [%.3f s]: %s\n", device, s, what.c_str());
    std::fflush(stderr);
  };
  log("started");
  auto dev = gpu::Device::Open(device);
  std::unique_ptr<gpu::Harness> harness;
  std::unique_ptr<gpu::Evaluator> eval;
  std::string open_error;
  if (dev.ok()) {
    log("device opened: " + (*dev)->desc().name + " " + (*dev)->desc().arch);
    auto h = gpu::Harness::Build(**dev);
    if (h.ok()) {
      harness = std::move(*h);
      eval = std::make_unique<gpu::Evaluator>(**dev, *harness);
      log("harness built");
    } else {
      open_error = h.error();
    }
  } else {
    open_error = dev.error();
  }
  if (!open_error.empty()) log("cannot serve: " + open_error);
  for (;;) {
    auto msg = ch.Receive(-1);
    if (!msg.ok()) return msg.error().rfind("closed", 0) == 0 ? 0 : 1;
    const std::string& type = msg->type;
    log("request: " + type);
    if (type == "shutdown") return 0;
    if (!eval) {
      SendError(ch, "worker for GPU " + std::to_string(device) + " could not start: " + open_error);
      return 1;
    }
    if (type == "hello") {
      ch.Send(ToMessage((*dev)->desc()));
    } else if (type == "calibrate") {
      auto cal = eval->Calibrate();
      if (cal.ok()) ch.Send(ToMessage(*cal));
      else SendError(ch, "calibration failed: " + cal.error());
      if (gpu::ContextLost()) {
        std::fflush(stderr);
        kill(getpid(), SIGKILL);  // as after an evaluation that broke the context
      }
    } else if (type == "eval") {
      auto req = EvalRequestFromMessage(*msg);
      if (!req.ok()) {
        SendError(ch, "bad request: " + req.error());
        continue;
      }
      EvalResult res = eval->Run(*req);
      ch.Send(ToMessage(res));
      if (res.context_lost) {
        // The context is broken (or a kernel still spins): only a new process recovers.
        std::fflush(stderr);
        kill(getpid(), SIGKILL);
      }
    } else {
      SendError(ch, "unknown message type '" + type + "'");
    }
  }
}

int RunReplay(int device, const std::string& request_file, int reps) {
  std::FILE* f = std::fopen(request_file.c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "kevolve replay: cannot read %s\n", request_file.c_str());
    return 2;
  }
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  std::fclose(f);
  auto msg = DecodeMessage(bytes);
  if (!msg.ok()) {
    std::fprintf(stderr, "kevolve replay: %s\n", msg.error().c_str());
    return 2;
  }
  auto req = EvalRequestFromMessage(*msg);
  if (!req.ok()) {
    std::fprintf(stderr, "kevolve replay: %s\n", req.error().c_str());
    return 2;
  }
  auto dev = gpu::Device::Open(device);
  if (!dev.ok()) {
    std::fprintf(stderr, "kevolve replay: %s\n", dev.error().c_str());
    return 3;
  }
  auto h = gpu::Harness::Build(**dev);
  if (!h.ok()) {
    std::fprintf(stderr, "kevolve replay: %s\n", h.error().c_str());
    return 1;
  }
  gpu::Evaluator eval(**dev, **h);
  Status s = eval.Replay(*req, reps);
  if (!s.ok()) {
    std::fprintf(stderr, "kevolve replay: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace kevolve

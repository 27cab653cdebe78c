#include <signal.h>
#include <unistd.h>

#include <cstdio>

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
  PipeChannel ch(0, 1, false);
  // stdout carries the protocol; anything a library prints must go elsewhere.
  std::FILE* devnull = std::fopen("/dev/null", "w");
  if (devnull) *stdout = *devnull;  // NOLINT: redirect stray printf output away from the channel

  auto dev = gpu::Device::Open(device);
  std::unique_ptr<gpu::Harness> harness;
  std::unique_ptr<gpu::Evaluator> eval;
  std::string open_error;
  if (dev.ok()) {
    auto h = gpu::Harness::Build(**dev);
    if (h.ok()) {
      harness = std::move(*h);
      eval = std::make_unique<gpu::Evaluator>(**dev, *harness);
    } else {
      open_error = h.error();
    }
  } else {
    open_error = dev.error();
  }
  for (;;) {
    auto msg = ch.Receive(-1);
    if (!msg.ok()) return msg.error().rfind("closed", 0) == 0 ? 0 : 1;
    const std::string& type = msg->type;
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

}  // namespace kevolve

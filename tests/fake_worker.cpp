// A stand-in for `kevolve worker`, for the WorkerPool tests: it speaks the protocol on
// stdin/stdout and misbehaves on request.
//
//   kevolve_fake_worker worker --device N [--mode M] [--marker PATH] [--delay-ms T]
//                              [--fail-device N] [--no-restart]
//
// Modes, applied to every eval: ok (a passing "correctness" rung whose metrics echo the
// request id), hang (sleeps forever), crash (abort()), garbage (a malformed frame),
// lose-context (context_lost = true, then exit), error (an "error" message).
// hang-once is hang with a marker.
// --marker PATH: the mode applies only to the first eval that finds PATH absent (it
//   creates PATH); later evals, in this process or its replacements, answer ok.
// --delay-ms T: ok replies wait T ms first.
// --fail-device N: on device N, exit(2) before answering hello.
// --no-restart: exit(2) before hello when the marker exists (a replacement cannot start).
// --calibrate C: how calibrations are answered: ok (the default), lose-context (a
//   calibration whose "l2" details say the context was lost, then exit, as the real worker
//   does), error (an "error" message, then exit).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "kevolve/evaluators/channel.h"

using namespace kevolve;

namespace {

struct Flags {
  int device = 0;
  std::string mode = "ok";
  std::string marker;
  int delay_ms = 0;
  int fail_device = -1;
  bool no_restart = false;
  std::string calibrate = "ok";
};

bool Exists(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), F_OK) == 0;
}

// True when this eval should misbehave; claims the marker.
bool Misbehave(const Flags& f) {
  if (f.mode == "ok") return false;
  if (f.marker.empty()) return true;
  if (Exists(f.marker)) return false;
  std::ofstream(f.marker) << "claimed\n";
  return true;
}

EvalResult OkResult(const Flags& f, const EvalRequest& req) {
  EvalResult r;
  r.id = req.id;
  r.device_uuid = "FAKE-" + std::to_string(f.device);
  RungResult rung;
  rung.name = "correctness";
  rung.ok = true;
  rung.metrics = {{"id", req.id}, {"shapes", req.check.size()}};
  r.rungs.push_back(rung);
  return r;
}

[[noreturn]] void HangForever() {
  for (;;) ::pause();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (argc < 2 || std::string(argv[1]) != "worker") {
    std::fprintf(stderr, "usage: %s worker --device N [--mode M] ...\n", argv[0]);
    return 2;
  }
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--device" && has_value)
      f.device = std::atoi(argv[++i]);
    else if (a == "--mode" && has_value)
      f.mode = argv[++i];
    else if (a == "--marker" && has_value)
      f.marker = argv[++i];
    else if (a == "--delay-ms" && has_value)
      f.delay_ms = std::atoi(argv[++i]);
    else if (a == "--fail-device" && has_value)
      f.fail_device = std::atoi(argv[++i]);
    else if (a == "--no-restart")
      f.no_restart = true;
    else if (a == "--calibrate" && has_value)
      f.calibrate = argv[++i];
    else {
      std::fprintf(stderr, "fake worker: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (f.mode == "hang-once") f.mode = "hang";
  if (f.device == f.fail_device || (f.no_restart && Exists(f.marker))) {
    std::fprintf(stderr, "fake worker: refusing to start on device %d\n", f.device);
    return 2;
  }
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);  // crash mode should not litter core files

  PipeChannel ch(0, 1, false);
  for (;;) {
    auto m = ch.Receive(-1);
    if (!m.ok()) return m.error().rfind("closed", 0) == 0 ? 0 : 1;
    if (m->type == "shutdown") return 0;
    if (m->type == "hello") {
      DeviceDesc d;
      d.uuid = "FAKE-" + std::to_string(f.device);
      d.name = "fake";
      d.arch = "sm_90";
      d.ordinal = f.device;
      ch.Send(ToMessage(d));
    } else if (m->type == "calibrate") {
      Calibration c;
      c.uuid = "FAKE-" + std::to_string(f.device);
      c.copy_gbps = 4000;
      c.fp32_gflops = 60000;
      if (f.calibrate == "error") {
        ch.Send(MakeMessage("error", {{"message", "calibration failed: on purpose"}}));
        return 3;
      }
      if (f.calibrate == "lose-context")
        c.details["l2"] = {{"error", "the L2 probes left the GPU context broken"}, {"context_lost", true}};
      ch.Send(ToMessage(c));
      if (f.calibrate == "lose-context") return 3;
    } else if (m->type == "eval") {
      auto req = EvalRequestFromMessage(*m);
      if (!req.ok()) {
        ch.Send(MakeMessage("error", {{"message", "bad request: " + req.error()}}));
        continue;
      }
      if (!Misbehave(f)) {
        if (f.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.delay_ms));
        ch.Send(ToMessage(OkResult(f, *req)));
      } else if (f.mode == "hang") {
        HangForever();
      } else if (f.mode == "crash") {
        std::fprintf(stderr, "fake worker: crashing on purpose\n");
        std::fflush(stderr);
        std::abort();
      } else if (f.mode == "garbage") {
        // A length of 5, then bytes that are no MessagePack (0xc1 is never used).
        const char frame[] = "\x05\x00\x00\x00\xc1\xc1\xc1\xc1\xc1";
        if (::write(1, frame, sizeof(frame) - 1) < 0) return 1;
      } else if (f.mode == "lose-context") {
        EvalResult r = OkResult(f, *req);
        r.rungs[0].ok = false;
        r.rungs[0].reason = "context_lost";
        r.context_lost = true;
        ch.Send(ToMessage(r));
        return 3;
      } else if (f.mode == "error") {
        ch.Send(MakeMessage("error", {{"message", "fake failure on purpose"}}));
      } else {
        std::fprintf(stderr, "fake worker: unknown mode %s\n", f.mode.c_str());
        return 2;
      }
    } else {
      ch.Send(MakeMessage("error", {{"message", "unknown message type '" + m->type + "'"}}));
    }
  }
}

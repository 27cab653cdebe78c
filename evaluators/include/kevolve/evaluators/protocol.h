// The coordinator <-> worker messages. Versioned and transport-neutral: each message is
// one self-contained byte string (MessagePack of a JSON object), with no pointers or
// shared memory, so the same messages can travel over pipes now and MPI later.
//
// Every message has "v" (kProtocolVersion) and "type":
//   coordinator -> worker: hello, calibrate, eval, shutdown
//   worker -> coordinator: hello_reply, calibration, result, error
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kevolve/core/status.h"
#include "kevolve/evaluators/rungs.h"

namespace kevolve {

constexpr int kProtocolVersion = 1;

// A compiled module: CUBIN bytes and, per entry, the symbol to look up.
struct ModuleImage {
  std::string hash;
  std::string cubin;                          // binary
  std::map<std::string, std::string> symbols;  // entry -> lowered name
};

struct LaunchDesc {
  std::string entry;
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  int64_t smem = 0;
  std::array<int64_t, 3> cluster{0, 0, 0};    // 0: no cluster
};

struct ScratchDesc {
  int64_t bytes = 0;
  bool zeroed = false;
};

struct BufferDesc {
  std::string name;
  bool output = false;
  std::string dtype;       // "f32", "bf16", "f16"
  std::string dist = "normal";                // inputs: normal | uniform
  double scale_lo = 1, scale_hi = 1, offset_lo = 0, offset_hi = 0;
};

struct ScalarDesc {
  std::string name;
  std::string type;        // "f32" | "i32"
  double value = 0;
};

// One shape, fully resolved by the coordinator: element counts and launch geometry.
struct ShapeJob {
  std::string label;                          // "4096x1024"
  std::vector<int64_t> sizes;                 // in the op's size order
  std::vector<int64_t> elements;              // per buffer
  std::vector<LaunchDesc> launches;           // the candidate's sequence
  std::vector<ScratchDesc> scratch;
  std::vector<LaunchDesc> ref_launches;       // the reference's sequence (check shapes)
  std::vector<ScratchDesc> ref_scratch;
  double bytes = 0, flops = 0;                // cost model (tune shapes)
  std::string unsupported;                    // non-empty: the candidate's requirement fails here
};

struct Tolerances {
  double atol = 0, rtol = 0, min_cossim = 0;
  int64_t max_mismatch = 0;
};

// How the timing rung measures. Stored with every timing (the protocol is data).
struct TimingProtocol {
  std::string timer = "events";   // events | cupti
  int warmup_reps = 3;
  double warmup_ms = 20;          // at least this long, or warmup_reps, whichever is more
  int min_reps = 10;
  int max_reps = 200;
  int batch = 10;                 // repetitions enqueued between host syncs
  double target_rse = 0.005;      // stop when the relative standard error is below this
  double max_ms_per_shape = 1500; // cap on measured time per shape
  int input_sets = 3;             // rotated
  bool flush_l2 = true;           // evict the L2 before every repetition (2x its size)
  // How: "memset" writes the flush buffer, as triton's do_bench does, and leaves the L2
  // full of its dirty lines, whose write-back the timed kernel then pays for; "read"
  // reads it, so that the kernel starts on a cold L2 holding no dirty lines; "none" goes
  // with flush_l2 false.
  std::string flush = "memset";
  bool reset_persisting_l2 = true;
  nlohmann::json ToJson() const;
  static TimingProtocol FromJson(const nlohmann::json& j);
};

// Sets t's L2 flush from a user's word: "memset", "read" or "none". False (t unchanged)
// for any other word.
bool SetL2Flush(TimingProtocol& t, const std::string& mode);
// The word for t's flush: "memset", "read" or "none".
std::string L2FlushName(const TimingProtocol& t);

struct EvalRequest {
  int64_t id = 0;
  std::string op;
  std::string dtype;
  std::vector<std::string> size_names;
  std::vector<BufferDesc> buffers;            // kernel order; reference outputs are f64
  std::vector<ScalarDesc> scalars;
  bool deterministic = true;
  Tolerances tolerance;
  ModuleImage candidate;
  ModuleImage reference;
  std::vector<ShapeJob> check;
  std::vector<ShapeJob> tune;
  uint64_t seed = 1;
  int draws = 2;                              // fresh draws per check shape (>= 2)
  TimingProtocol timing;
  double launch_timeout_ms = 2000;            // watchdog floor per launch sequence
  double timeout_factor = 50;                 // x the reference's time, when larger
  bool skip_timing = false;
};

struct ShapeTiming {
  std::string shape;
  double median_us = 0, p10_us = 0, p90_us = 0;
  int64_t n = 0;
  std::vector<double> samples_us;
  nlohmann::json protocol = nlohmann::json::object();  // as used: reps, flush bytes, timer, rse
  double bytes = 0, flops = 0;
};

struct EvalResult {
  int64_t id = 0;
  std::string device_uuid;
  std::vector<RungResult> rungs;              // launch, correctness, timing (as far as it got)
  std::vector<ShapeTiming> timings;
  bool context_lost = false;                  // the worker exits after sending this
};

struct DeviceDesc {
  std::string uuid, name, arch;
  int ordinal = 0, sm_count = 0;
  int64_t l2_bytes = 0, mem_bytes = 0, smem_per_block_optin = 0;
  int clock_khz = 0, mem_clock_khz = 0;
};

struct Calibration {
  std::string uuid;
  double copy_gbps = 0;       // device-to-device copy, bytes read + written per second / 1e9
  double fp32_gflops = 0;     // FMA peak
  nlohmann::json details = nlohmann::json::object();
};

// A message: its type and its JSON body (which includes "v" and "type").
struct Message {
  std::string type;
  nlohmann::json body;
};

// Bytes <-> message. Decode rejects other protocol versions with a clear error.
std::string EncodeMessage(const Message& m);
Result<Message> DecodeMessage(const std::string& bytes);

// Typed conversions. The *FromJson functions never throw; malformed input is an error.
Message ToMessage(const EvalRequest& r);
Message ToMessage(const EvalResult& r);
Message ToMessage(const DeviceDesc& d);       // type hello_reply
Message ToMessage(const Calibration& c);      // type calibration
Message MakeMessage(const std::string& type, nlohmann::json body = nlohmann::json::object());
Result<EvalRequest> EvalRequestFromMessage(const Message& m);
Result<EvalResult> EvalResultFromMessage(const Message& m);
Result<DeviceDesc> DeviceDescFromMessage(const Message& m);
Result<Calibration> CalibrationFromMessage(const Message& m);

}  // namespace kevolve

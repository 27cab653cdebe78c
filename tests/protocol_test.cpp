// The coordinator <-> worker messages and their framing over pipes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "kevolve/evaluators/channel.h"
#include "kevolve/evaluators/protocol.h"

using namespace kevolve;

namespace {

// Through the bytes, as a message really travels.
Message RoundTrip(const Message& m) {
  auto back = DecodeMessage(EncodeMessage(m));
  REQUIRE(back.ok());
  return std::move(back).value();
}

LaunchDesc Launch(const std::string& entry, int64_t gx) {
  LaunchDesc l;
  l.entry = entry;
  l.grid = {gx, 2, 1};
  l.block = {256, 1, 1};
  l.smem = 4096;
  l.cluster = {2, 1, 1};
  return l;
}

EvalRequest SampleRequest() {
  EvalRequest r;
  r.id = 42;
  r.op = "rmsnorm";
  r.dtype = "bf16";
  r.size_names = {"rows", "cols"};
  r.buffers = {{"x", false, "bf16", "uniform", 0.5, 2, -1, 1}, {"y", true, "bf16"}};
  r.scalars = {{"eps", "f32", 1e-6}, {"cols", "i32", 4096}};
  r.deterministic = false;
  r.tolerance = {1e-2, 2e-2, 0.999, 3};
  r.candidate.hash = "abc123";
  r.candidate.cubin = std::string(
                          "\x7f"
                          "ELF\0\0\x01\xff",
                          8) +
                      std::string(1000, '\0');
  r.candidate.symbols = {{"k", "_Z1kPf"}};
  r.reference.hash = "ref";
  r.reference.cubin = "REF";
  ShapeJob s;
  s.label = "4096x1024";
  s.sizes = {4096, 1024};
  s.elements = {4096 * 1024, 4096 * 1024};
  s.launches = {Launch("k", 4096), Launch("k2", 1)};
  s.scratch = {{1 << 20, true}};
  s.ref_launches = {Launch("ref", 4096)};
  s.ref_scratch = {{64, false}};
  s.bytes = 1.5e7;
  s.flops = 2e6;
  r.check = {s};
  s.label = "big";
  s.unsupported = "cols % 8 != 0";
  r.tune = {s, s};
  r.seed = 0xfedcba9876543210ull;
  r.draws = 3;
  r.timing.timer = "cupti";
  r.timing.max_reps = 77;
  r.timing.flush_l2 = false;
  r.launch_timeout_ms = 1234;
  r.timeout_factor = 20;
  r.skip_timing = true;
  return r;
}

void CheckLaunch(const LaunchDesc& a, const LaunchDesc& b) {
  CHECK(a.entry == b.entry);
  CHECK(a.grid == b.grid);
  CHECK(a.block == b.block);
  CHECK(a.smem == b.smem);
  CHECK(a.cluster == b.cluster);
}

}  // namespace

TEST_CASE("an eval request survives the round trip, CUBIN NUL bytes included", "[protocol]") {
  EvalRequest a = SampleRequest();
  Message m = RoundTrip(ToMessage(a));
  CHECK(m.type == "eval");
  CHECK(m.body["v"] == kProtocolVersion);
  CHECK(m.body["candidate"]["cubin"].is_binary());
  auto b = EvalRequestFromMessage(m);
  REQUIRE(b.ok());
  CHECK(b->id == 42);
  CHECK(b->op == "rmsnorm");
  CHECK(b->dtype == "bf16");
  CHECK(b->size_names == a.size_names);
  REQUIRE(b->buffers.size() == 2);
  CHECK(b->buffers[0].dist == "uniform");
  CHECK(b->buffers[0].scale_lo == 0.5);
  CHECK(b->buffers[0].offset_lo == -1);
  CHECK(b->buffers[1].output);
  REQUIRE(b->scalars.size() == 2);
  CHECK(b->scalars[0].value == 1e-6);
  CHECK(b->scalars[1].type == "i32");
  CHECK_FALSE(b->deterministic);
  CHECK(b->tolerance.rtol == 2e-2);
  CHECK(b->tolerance.min_cossim == 0.999);
  CHECK(b->tolerance.max_mismatch == 3);
  CHECK(b->candidate.cubin == a.candidate.cubin);
  CHECK(b->candidate.cubin.size() == 1008);
  CHECK(b->candidate.symbols == a.candidate.symbols);
  CHECK(b->reference.cubin == "REF");
  REQUIRE(b->check.size() == 1);
  REQUIRE(b->tune.size() == 2);
  const ShapeJob& s = b->check[0];
  CHECK(s.label == "4096x1024");
  CHECK(s.sizes == a.check[0].sizes);
  CHECK(s.elements == a.check[0].elements);
  REQUIRE(s.launches.size() == 2);
  CheckLaunch(s.launches[0], a.check[0].launches[0]);
  CheckLaunch(s.launches[1], a.check[0].launches[1]);
  CheckLaunch(s.ref_launches.at(0), a.check[0].ref_launches[0]);
  CHECK(s.scratch.at(0).bytes == 1 << 20);
  CHECK(s.scratch.at(0).zeroed);
  CHECK(s.ref_scratch.at(0).bytes == 64);
  CHECK(s.bytes == 1.5e7);
  CHECK(s.flops == 2e6);
  CHECK(b->tune[1].unsupported == "cols % 8 != 0");
  CHECK(b->seed == 0xfedcba9876543210ull);
  CHECK(b->draws == 3);
  CHECK(b->timing.timer == "cupti");
  CHECK(b->timing.max_reps == 77);
  CHECK_FALSE(b->timing.flush_l2);
  CHECK(b->timing.min_reps == TimingProtocol().min_reps);
  CHECK(b->launch_timeout_ms == 1234);
  CHECK(b->timeout_factor == 20);
  CHECK(b->skip_timing);
}

TEST_CASE("a 5 MB CUBIN travels as binary, not text", "[protocol]") {
  EvalRequest a;
  a.id = 7;
  a.candidate.cubin.resize(5u << 20);
  for (size_t i = 0; i < a.candidate.cubin.size(); ++i) a.candidate.cubin[i] = static_cast<char>(i * 131 % 251);
  std::string bytes = EncodeMessage(ToMessage(a));
  CHECK(bytes.size() < a.candidate.cubin.size() + 4096);  // no base64 blow-up
  auto m = DecodeMessage(bytes);
  REQUIRE(m.ok());
  auto b = EvalRequestFromMessage(*m);
  REQUIRE(b.ok());
  CHECK(b->candidate.cubin == a.candidate.cubin);
}

TEST_CASE("results, device descriptions and calibrations survive the round trip", "[protocol]") {
  EvalResult r;
  r.id = -5;
  r.device_uuid = "GPU-1234";
  RungResult rung;
  rung.name = "correctness";
  rung.ok = false;
  rung.reason = "mismatch";
  rung.metrics = {{"max_abs", 0.25}, {"shapes", {"a", "b"}}};
  rung.log = "line 1\nline 2";
  rung.duration_ms = 12.5;
  r.rungs = {rung, rung};
  ShapeTiming t;
  t.shape = "1x1";
  t.median_us = 3.5;
  t.p10_us = 3;
  t.p90_us = 4;
  t.n = 30;
  t.samples_us = {3, 3.5, 4};
  t.protocol = {{"reps", 30}, {"timer", "events"}};
  t.bytes = 100;
  t.flops = 200;
  r.timings = {t};
  r.context_lost = true;
  auto rb = EvalResultFromMessage(RoundTrip(ToMessage(r)));
  REQUIRE(rb.ok());
  CHECK(rb->id == -5);
  CHECK(rb->device_uuid == "GPU-1234");
  REQUIRE(rb->rungs.size() == 2);
  CHECK(rb->rungs[1].reason == "mismatch");
  CHECK(rb->rungs[1].metrics == rung.metrics);
  CHECK(rb->rungs[1].log == rung.log);
  CHECK(rb->rungs[1].duration_ms == 12.5);
  REQUIRE(rb->timings.size() == 1);
  CHECK(rb->timings[0].samples_us == t.samples_us);
  CHECK(rb->timings[0].protocol == t.protocol);
  CHECK(rb->timings[0].n == 30);
  CHECK(rb->timings[0].p90_us == 4);
  CHECK(rb->context_lost);

  DeviceDesc d{"GPU-abc", "NVIDIA H200", "sm_90", 3, 132, 50 << 20, int64_t(141) << 30, 232448, 1980000, 2619000};
  Message dm = RoundTrip(ToMessage(d));
  CHECK(dm.type == "hello_reply");
  auto db = DeviceDescFromMessage(dm);
  REQUIRE(db.ok());
  CHECK(db->uuid == d.uuid);
  CHECK(db->arch == "sm_90");
  CHECK(db->ordinal == 3);
  CHECK(db->sm_count == 132);
  CHECK(db->mem_bytes == d.mem_bytes);
  CHECK(db->smem_per_block_optin == 232448);
  CHECK(db->mem_clock_khz == 2619000);

  Calibration c{"GPU-abc", 4100.5, 61000, {{"runs", 5}}};
  Message cm = RoundTrip(ToMessage(c));
  CHECK(cm.type == "calibration");
  auto cb = CalibrationFromMessage(cm);
  REQUIRE(cb.ok());
  CHECK(cb->copy_gbps == 4100.5);
  CHECK(cb->fp32_gflops == 61000);
  CHECK(cb->details == c.details);
  CHECK_FALSE(EvalResultFromMessage(cm).ok());  // the type is checked

  Message hello = RoundTrip(MakeMessage("hello"));
  CHECK(hello.type == "hello");
  Message err = RoundTrip(MakeMessage("error", {{"message", "boom"}}));
  CHECK(err.body["message"] == "boom");
}

TEST_CASE("TimingProtocol keeps its defaults for missing or bad fields", "[protocol]") {
  TimingProtocol t;
  t.timer = "cupti";
  t.batch = 4;
  t.target_rse = 0.01;
  TimingProtocol back = TimingProtocol::FromJson(t.ToJson());
  CHECK(back.timer == "cupti");
  CHECK(back.batch == 4);
  CHECK(back.target_rse == 0.01);
  TimingProtocol partial = TimingProtocol::FromJson({{"max_reps", 9}, {"batch", "many"}});
  CHECK(partial.max_reps == 9);
  CHECK(partial.batch == TimingProtocol().batch);
  CHECK(partial.timer == "events");
  CHECK(TimingProtocol::FromJson(nlohmann::json::array()).min_reps == TimingProtocol().min_reps);
}

TEST_CASE("the L2 flush is memset, read or none, and travels with the protocol", "[protocol]") {
  TimingProtocol t;
  CHECK(L2FlushName(t) == "memset");
  CHECK(SetL2Flush(t, "read"));
  CHECK(t.flush_l2);
  CHECK(L2FlushName(TimingProtocol::FromJson(t.ToJson())) == "read");
  CHECK(SetL2Flush(t, "none"));
  CHECK_FALSE(t.flush_l2);
  CHECK(t.ToJson()["flush"] == "none");  // what the worker receives and the rung stores
  CHECK(L2FlushName(TimingProtocol::FromJson(t.ToJson())) == "none");
  CHECK(SetL2Flush(t, "memset"));
  CHECK(L2FlushName(t) == "memset");
  CHECK_FALSE(SetL2Flush(t, "clean"));
  CHECK(L2FlushName(t) == "memset");  // unchanged
  // A protocol stored before the field existed flushed with memset.
  CHECK(L2FlushName(TimingProtocol::FromJson({{"flush_l2", true}})) == "memset");
}

TEST_CASE("other protocol versions and malformed bytes are refused without throwing", "[protocol]") {
  nlohmann::json body = {{"v", kProtocolVersion + 1}, {"type", "hello"}};
  auto bytes = nlohmann::json::to_msgpack(body);
  auto m = DecodeMessage(std::string(bytes.begin(), bytes.end()));
  REQUIRE_FALSE(m.ok());
  CHECK(m.error() ==
        "protocol version " + std::to_string(kProtocolVersion + 1) + ", expected " + std::to_string(kProtocolVersion));

  for (std::string bad : {std::string(), std::string("\xc1"), std::string("\x82\xa1v", 3), std::string("{}"),
                          std::string("\x93\x01\x02\x03")}) {
    Result<Message> r = Status::Error("unset");
    REQUIRE_NOTHROW(r = DecodeMessage(bad));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().rfind("malformed message", 0) == 0);
  }
  auto no_type = nlohmann::json::to_msgpack({{"v", kProtocolVersion}});
  CHECK_FALSE(DecodeMessage(std::string(no_type.begin(), no_type.end())).ok());
}

TEST_CASE("a field of the wrong type is refused, naming the field", "[protocol]") {
  Message m = ToMessage(SampleRequest());
  m.body["check"][0]["launches"][1]["grid"] = "huge";
  auto r = EvalRequestFromMessage(RoundTrip(m));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error(), Catch::Contains("check[0].launches[1].grid"));

  m = ToMessage(SampleRequest());
  m.body["id"] = "forty-two";
  r = EvalRequestFromMessage(m);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error(), Catch::Contains("'id'") && Catch::Contains("string"));

  m = ToMessage(SampleRequest());
  m.body.erase("candidate");
  r = EvalRequestFromMessage(m);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error(), Catch::Contains("missing field 'candidate'"));

  Message res = ToMessage(EvalResult{});
  res.body["rungs"] = {{{"name", "launch"}, {"ok", 1}}};
  auto rr = EvalResultFromMessage(res);
  REQUIRE_FALSE(rr.ok());
  CHECK_THAT(rr.error(), Catch::Contains("rungs[0].ok"));

  Message dev = ToMessage(DeviceDesc{});
  dev.body["sm_count"] = int64_t(1) << 40;  // does not fit an int
  CHECK_THAT(DeviceDescFromMessage(dev).error(), Catch::Contains("sm_count"));
  dev.body = nlohmann::json::array();
  CHECK_FALSE(DeviceDescFromMessage(dev).ok());
}

TEST_CASE("PipeChannel frames several messages, times out, and sees the peer close", "[protocol]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  auto reader = std::make_unique<PipeChannel>(fds[0], -1, true);
  auto writer = std::make_unique<PipeChannel>(-1, fds[1], true);

  // Larger than the pipe's buffer, so the writer must wait for the reader.
  EvalRequest big;
  big.id = 3;
  big.candidate.cubin.assign(3u << 20, '\0');
  std::thread sender([&] {
    CHECK(writer->Send(MakeMessage("hello", {{"n", 1}})).ok());
    CHECK(writer->Send(ToMessage(big)).ok());
    CHECK(writer->Send(MakeMessage("shutdown")).ok());
  });
  auto a = reader->Receive(5000);
  auto b = reader->Receive(5000);
  auto c = reader->Receive(5000);
  sender.join();
  REQUIRE(a.ok());
  CHECK(a->type == "hello");
  CHECK(a->body["n"] == 1);
  REQUIRE(b.ok());
  CHECK(EvalRequestFromMessage(*b)->candidate.cubin.size() == 3u << 20);
  REQUIRE(c.ok());
  CHECK(c->type == "shutdown");

  auto t0 = std::chrono::steady_clock::now();
  auto none = reader->Receive(100);
  double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().rfind("timeout", 0) == 0);
  CHECK(waited >= 90);
  CHECK(waited < 2000);

  writer.reset();  // closes the write end
  auto closed = reader->Receive(1000);
  REQUIRE_FALSE(closed.ok());
  CHECK(closed.error().rfind("closed", 0) == 0);

  // Writing to a pipe nobody reads is an error, not SIGPIPE.
  int fds2[2];
  REQUIRE(::pipe2(fds2, O_CLOEXEC) == 0);
  ::close(fds2[0]);
  PipeChannel orphan(-1, fds2[1], true);
  Status s = orphan.Send(MakeMessage("hello"));
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().rfind("closed", 0) == 0);
}

TEST_CASE("PipeChannel refuses an oversized frame and a frame cut short", "[protocol]") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  PipeChannel reader(fds[0], -1, true);
  const char huge[] = "\xff\xff\xff\xff";
  REQUIRE(::write(fds[1], huge, 4) == 4);
  auto r = reader.Receive(1000);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error(), Catch::Contains("over the limit"));

  int fds2[2];
  REQUIRE(::pipe2(fds2, O_CLOEXEC) == 0);
  PipeChannel reader2(fds2[0], -1, true);
  const char cut[] = "\x10\x00\x00\x00\x81";
  REQUIRE(::write(fds2[1], cut, 5) == 5);
  ::close(fds2[1]);
  auto r2 = reader2.Receive(1000);
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().rfind("closed", 0) == 0);
  ::close(fds[1]);
}

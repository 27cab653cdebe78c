#include "kevolve/evaluators/nvrtc_compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <vector>

#include "kevolve/core/hash.h"

namespace kevolve {

namespace {

// RAII for an nvrtcProgram.
class Program {
 public:
  Program() = default;
  ~Program() {
    if (prog_) nvrtcDestroyProgram(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram* ptr() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

std::string NvrtcError(const char* call, nvrtcResult r) {
  return std::string(call) + " failed: " + nvrtcGetErrorString(r);
}

bool DefinesEntry(const std::string& source, const std::string& entry) {
  std::regex re("\\b" + entry + "\\s*\\(");
  return std::regex_search(source, re);
}

const char* DTypeMacro(DType t) {
  switch (t) {
    case DType::kF32: return "-DKV_DTYPE_F32=1";
    case DType::kF16: return "-DKV_DTYPE_F16=1";
    case DType::kBF16: return "-DKV_DTYPE_BF16=1";
    case DType::kF64: return "-DKV_DTYPE_F64=1";
    case DType::kI32: return "-DKV_DTYPE_I32=1";
  }
  return "";
}

}  // namespace

std::string CompileRequest::Hash() const {
  std::ostringstream key;
  // v2: the pre-included kevolve.h is part of the identity (its kv:: helpers are code the
  // candidate runs), so a changed header gives new candidates, not stale results.
  key << "kevolve-compile-v2\n" << arch << "\n" << DTypeName(dtype) << "\n" << AssignmentString(params) << "\n";
  static const std::string header_hash = Sha256Hex(KevolveHeader());
  key << "header " << header_hash << "\n";
  for (const auto& o : extra_options) key << o << "\n";
  for (const auto& e : entries) key << "entry " << e << "\n";
  key << Sha256Hex(source);
  return Sha256Hex(key.str());
}

Resources Aggregate(const CompileResult& r) {
  Resources a;
  for (const auto& [name, x] : r.resources) {
    (void)name;
    a.registers = std::max(a.registers, x.registers);
    a.smem_static = std::max(a.smem_static, x.smem_static);
    a.stack = std::max(a.stack, x.stack);
    a.spill_stores += x.spill_stores;
    a.spill_loads += x.spill_loads;
    a.cmem = std::max(a.cmem, x.cmem);
    a.barriers = std::max(a.barriers, x.barriers);
  }
  return a;
}

std::map<std::string, Resources> ParsePtxasInfo(const std::string& log) {
  // ptxas info    : Compiling entry function 'k' for 'sm_90'
  // ptxas info    : Function properties for k
  //     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
  // ptxas info    : Used 32 registers, used 1 barriers, 384 bytes smem, 400 bytes cmem[0]
  static const std::regex kEntry(R"(Compiling entry function '([^']+)')");
  static const std::regex kProps(R"(Function properties for (\S+))");
  static const std::regex kFrame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex kUsed(R"(Used (\d+) registers)");
  static const std::regex kBarriers(R"(used (\d+) barriers)");
  static const std::regex kSmem(R"((\d+) bytes smem)");
  static const std::regex kCmem(R"((\d+) bytes cmem\[0\])");
  std::map<std::string, Resources> out;
  std::string current;
  std::istringstream in(log);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kEntry) || std::regex_search(line, m, kProps)) {
      current = m[1];
      out[current];
      continue;
    }
    if (current.empty()) continue;
    Resources& r = out[current];
    if (std::regex_search(line, m, kFrame)) {
      r.stack = std::stoll(m[1]);
      r.spill_stores = std::stoll(m[2]);
      r.spill_loads = std::stoll(m[3]);
    }
    if (std::regex_search(line, m, kUsed)) r.registers = std::stoi(m[1]);
    if (std::regex_search(line, m, kBarriers)) r.barriers = std::stoi(m[1]);
    if (line.find("Used ") != std::string::npos) {
      if (std::regex_search(line, m, kSmem)) r.smem_static = std::stoll(m[1]);
      if (std::regex_search(line, m, kCmem)) r.cmem = std::stoll(m[1]);
    }
  }
  return out;
}

std::string FindCudaIncludeDir() {
  namespace fs = std::filesystem;
  std::vector<std::string> dirs;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH", "CUDAToolkit_ROOT"}) {
    if (const char* v = std::getenv(var)) dirs.push_back(std::string(v) + "/include");
  }
  dirs.push_back(KEVOLVE_CUDA_INCLUDE_DIR);
  dirs.push_back("/usr/local/cuda/include");
  for (const auto& d : dirs) {
    std::error_code ec;
    if (fs::exists(fs::path(d) / "cuda_fp16.h", ec)) return d;
  }
  return "";
}

std::string NvrtcCompiler::Version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string NvrtcCompiler::CheckArch(const std::string& arch) {
  int n = 0;
  std::vector<int> archs;
  if (nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0) {
    archs.resize(static_cast<size_t>(n));
    if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) archs.clear();
  }
  std::string known;
  for (int a : archs) known += (known.empty() ? "" : ", ") + std::string("sm_") + std::to_string(a);
  std::smatch m;
  static const std::regex kArch("sm_([1-9][0-9]{1,3})([af]?)");
  if (!std::regex_match(arch, m, kArch))
    return "--arch must be a real architecture such as sm_90 or sm_90a, got '" + arch + "'";
  const int number = std::stoi(m[1].str());  // 2 to 4 digits: no overflow
  const std::string unsupported = "--arch " + arch + ": NVRTC " + Version() + " does not compile for it (it supports " +
                                  known + ", with an 'a' or 'f' suffix where the architecture has one)";
  if (!archs.empty() && std::find(archs.begin(), archs.end(), number) == archs.end()) return unsupported;
  if (m[2].length() > 0) {
    // Whether this architecture has that suffix: ask NVRTC, with an empty program.
    nvrtcProgram prog = nullptr;
    if (nvrtcCreateProgram(&prog, "", "arch_probe.cu", 0, nullptr, nullptr) == NVRTC_SUCCESS) {
      const std::string opt = "--gpu-architecture=" + arch;
      const char* opts[] = {opt.c_str()};
      const nvrtcResult r = nvrtcCompileProgram(prog, 1, opts);
      nvrtcDestroyProgram(&prog);
      if (r != NVRTC_SUCCESS) return unsupported;  // an empty program compiles for any valid target
    }
  }
  return "";
}

NvrtcCompiler::NvrtcCompiler(NvrtcOptions options) : options_(std::move(options)) {
  if (options_.cuda_include_dir.empty()) options_.cuda_include_dir = FindCudaIncludeDir();
}

CompileResult NvrtcCompiler::Compile(const CompileRequest& req) {
  CompileResult res;
  res.hash = req.Hash();
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  if (Status s = StaticCheck(req.name, req.source, options_.limits); !s.ok()) {
    res.rung = "static";
    res.log = s.message();
    return res;
  }
  for (const auto& e : req.entries) {
    if (!DefinesEntry(req.source, e)) {
      res.rung = "static";
      res.log = req.name + ": launch entry '" + e + "' is not defined in the source";
      return res;
    }
  }
  res.rung = "compile";
  if (options_.cuda_include_dir.empty()) {
    res.log = "CUDA toolkit headers not found (set CUDA_HOME): cuda_fp16.h is needed";
    return res;
  }

  Program prog;
  const char* header_src[] = {KevolveHeader().c_str()};
  const char* header_names[] = {"kevolve.h"};
  nvrtcResult r = nvrtcCreateProgram(prog.ptr(), req.source.c_str(), req.name.c_str(), 1, header_src, header_names);
  if (r != NVRTC_SUCCESS) {
    res.log = NvrtcError("nvrtcCreateProgram", r);
    return res;
  }
  for (const auto& e : req.entries) nvrtcAddNameExpression(prog.get(), e.c_str());

  std::vector<std::string> opts = {
      "--gpu-architecture=" + req.arch,
      "--std=c++17",
      "--device-as-default-execution-space",
      "--ptxas-options=-v",
      "--pre-include=kevolve.h",
      "-I" + options_.cuda_include_dir,
      "-I" + options_.cuda_include_dir + "/cccl",
      DTypeMacro(req.dtype),
      "-DKV_SIZEOF_T=" + std::to_string(DTypeSize(req.dtype)),
  };
  if (options_.line_info) opts.push_back("--generate-line-info");
  for (const auto& [k, v] : req.params) opts.push_back("-D" + k + "=" + std::to_string(v));
  for (const auto& o : req.extra_options) opts.push_back(o);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());

  nvrtcResult cr = nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog.get(), &log_size);
  if (log_size > 1) {
    res.log.resize(log_size);
    nvrtcGetProgramLog(prog.get(), res.log.data());
    while (!res.log.empty() && res.log.back() == '\0') res.log.pop_back();
  }
  res.compile_ms = elapsed();
  if (cr != NVRTC_SUCCESS) {
    if (res.log.empty()) res.log = NvrtcError("nvrtcCompileProgram", cr);
    return res;
  }
  size_t n = 0;
  if ((r = nvrtcGetCUBINSize(prog.get(), &n)) != NVRTC_SUCCESS || n == 0) {
    res.log += "\n" + NvrtcError("nvrtcGetCUBINSize", r) + " (is '" + req.arch + "' a real architecture?)";
    return res;
  }
  res.cubin.resize(n);
  nvrtcGetCUBIN(prog.get(), res.cubin.data());
  if (nvrtcGetPTXSize(prog.get(), &n) == NVRTC_SUCCESS && n > 1) {
    res.ptx.resize(n);
    nvrtcGetPTX(prog.get(), res.ptx.data());
    res.ptx.resize(n - 1);
  }
  for (const auto& e : req.entries) {
    const char* lowered = nullptr;
    if (nvrtcGetLoweredName(prog.get(), e.c_str(), &lowered) == NVRTC_SUCCESS && lowered)
      res.lowered[e] = lowered;
    else
      res.lowered[e] = e;
  }
  // ptxas names functions by their lowered (symbol) name; report them by entry name.
  auto by_symbol = ParsePtxasInfo(res.log);
  for (const auto& [entry, sym] : res.lowered) {
    auto it = by_symbol.find(sym);
    if (it != by_symbol.end()) res.resources[entry] = it->second;
  }
  res.ok = true;
  res.rung.clear();
  return res;
}

CompileResult CachingCompiler::Compile(const CompileRequest& req) {
  std::string key = req.Hash();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      CompileResult r = it->second;
      r.cached = true;
      return r;
    }
  }
  CompileResult r = inner_->Compile(req);
  std::lock_guard<std::mutex> lock(mu_);
  cache_.emplace(key, r);
  return r;
}

size_t CachingCompiler::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

}  // namespace kevolve

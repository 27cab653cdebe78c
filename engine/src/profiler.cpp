#include "kevolve/engine/profiler.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

#include "kevolve/core/json_file.h"

namespace fs = std::filesystem;

namespace kevolve {

namespace {

const char* kMetrics =
    "gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,"
    "dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,"
    "launch__registers_per_thread";

// Runs a shell command; returns its exit status and its combined output.
int Shell(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  out->clear();
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') { cur += '"'; ++i; }
      else if (c == '"') quoted = false;
      else cur += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

double Num(const std::map<std::string, std::string>& row, const std::string& key) {
  auto it = row.find(key);
  if (it == row.end()) return 0;
  try {
    return std::stod(it->second);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

std::string FindTool(const std::string& name) {
  std::string out;
  if (Shell("command -v " + Quote(name), &out) == 0 && !out.empty()) return out.substr(0, out.find('\n'));
  std::error_code ec;
  if (fs::exists("/usr/local/cuda/bin/" + name, ec)) return "/usr/local/cuda/bin/" + name;
  if (name == "ncu" && fs::is_directory("/opt/nvidia/nsight-compute", ec)) {
    for (const auto& e : fs::directory_iterator("/opt/nvidia/nsight-compute", ec))
      if (fs::exists(e.path() / "ncu")) return (e.path() / "ncu").string();
  }
  return "";
}

double NcuValueInBaseUnits(const std::string& value, const std::string& unit) {
  double v = 0;
  try {
    std::string clean;
    for (char c : value)
      if (c != ',') clean += c;
    v = std::stod(clean);
  } catch (const std::exception&) {
    return 0;
  }
  static const std::map<std::string, double> kScale = {
      {"nsecond", 1}, {"ns", 1}, {"usecond", 1e3}, {"us", 1e3}, {"msecond", 1e6}, {"ms", 1e6}, {"second", 1e9},
      {"byte", 1}, {"Kbyte", 1e3}, {"Mbyte", 1e6}, {"Gbyte", 1e9}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}};
  auto it = kScale.find(unit);
  return it == kScale.end() ? v : v * it->second;
}

std::vector<std::string> SplitShellWords(const std::string& text, std::string* error) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(cur);
      cur.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      const size_t end = text.find('\'', i + 1);
      if (end == std::string::npos) {
        *error = "unterminated ' quote";
        return {};
      }
      cur += text.substr(i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size() && std::string("\"\\$`").find(text[j + 1]) != std::string::npos) ++j;
        cur += text[j];
      }
      if (j >= text.size()) {
        *error = "unterminated \" quote";
        return {};
      }
      i = j;
    } else if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i];
    } else {
      cur += c;
    }
  }
  if (in_word) words.push_back(cur);
  return words;
}

std::string NcuOptions(const std::string& base_metrics, const std::string& extra, std::string* error) {
  const std::vector<std::string> words = SplitShellWords(extra, error);
  if (!error->empty()) return "";
  std::string metrics = base_metrics, rest;
  for (size_t i = 0; i < words.size(); ++i) {
    std::string list;
    if (words[i] == "--metrics") {
      if (i + 1 == words.size() || words[i + 1].rfind("-", 0) == 0) {
        *error = "--metrics needs a comma-separated list of metrics";
        return "";
      }
      list = words[++i];
    } else if (words[i].rfind("--metrics=", 0) == 0) {
      list = words[i].substr(10);
    } else {
      rest += " " + Quote(words[i]);
      continue;
    }
    if (list.empty()) {
      *error = "--metrics needs a comma-separated list of metrics";
      return "";
    }
    metrics += (metrics.empty() ? "" : ",") + list;
  }
  return (metrics.empty() ? "" : " --metrics " + Quote(metrics)) + rest;
}

std::vector<std::string> NcuUserMetrics(const std::string& extra, std::string* error) {
  const std::vector<std::string> words = SplitShellWords(extra, error);
  std::vector<std::string> names;
  if (!error->empty()) return names;
  for (size_t i = 0; i < words.size(); ++i) {
    std::string list;
    if (words[i] == "--metrics" && i + 1 < words.size()) list = words[++i];
    else if (words[i].rfind("--metrics=", 0) == 0) list = words[i].substr(10);
    else continue;
    std::istringstream in(list);
    std::string name;
    while (std::getline(in, name, ',')) {
      if (name.empty() || name.find(':') != std::string::npos) continue;
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  return names;
}

std::vector<std::pair<std::string, double>> UserMetricValues(
    const std::vector<std::map<std::string, std::string>>& launches, const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, double>> out;
  if (launches.empty()) return out;
  auto value = [&](const std::string& column) {
    const bool sum = column.size() > 4 && column.compare(column.size() - 4, 4, ".sum") == 0;
    double v = sum ? 0 : -std::numeric_limits<double>::infinity();
    for (const auto& row : launches) v = sum ? v + Num(row, column) : std::max(v, Num(row, column));
    return v;
  };
  auto add = [&](const std::string& column) {
    for (const auto& [c, v] : out)
      if (c == column) return;  // named twice (NAME, then NAME.sum)
    out.emplace_back(column, value(column));
  };
  for (const std::string& name : names) {
    const auto& first = launches.front();
    if (first.count(name)) {
      add(name);
      continue;
    }
    // ncu lists a metric asked for without a rollup as NAME.avg, NAME.max, NAME.min and
    // NAME.sum (in the map's order).
    for (auto it = first.lower_bound(name + "."); it != first.end() && it->first.rfind(name + ".", 0) == 0; ++it)
      if (it->first.find('.', name.size() + 1) == std::string::npos) add(it->first);
  }
  return out;
}

SassCounts CountSass(const std::string& sass) {
  SassCounts c;
  std::istringstream in(sass);
  std::string line;
  while (std::getline(in, line)) {
    // An instruction line: "/*0040*/  @!P0 LDG.E.NA.128.CONSTANT R4, desc[UR4][R2.64] ;"
    if (line.find("/*") == std::string::npos || line.find(';') == std::string::npos) continue;
    ++c.instructions;
    std::istringstream words(line.substr(line.find("*/") == std::string::npos ? 0 : line.find("*/") + 2));
    std::string op;
    words >> op;
    if (!op.empty() && op[0] == '@') words >> op;  // predicate
    const std::string base = op.substr(0, op.find('.'));
    bool wide = false;
    for (size_t p = op.find('.'); p != std::string::npos; p = op.find('.', p + 1)) {
      const std::string part = op.substr(p + 1, op.find('.', p + 1) - p - 1);
      wide = wide || part == "128" || part == "256";
    }
    c.ldg_wide += base == "LDG" && wide;
    c.stg_wide += base == "STG" && wide;
    c.local += base == "LDL" || base == "STL";
  }
  return c;
}

std::vector<std::map<std::string, std::string>> ParseNcuRawCsv(const std::string& csv) {
  std::vector<std::map<std::string, std::string>> rows;
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> header, units;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '"') continue;  // ncu's own "==PROF==" lines
    auto cells = SplitCsvLine(line);
    if (header.empty()) {
      header = cells;
      continue;
    }
    if (units.empty()) {
      units = cells;
      continue;
    }
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) {
      const std::string& u = i < units.size() ? units[i] : "";
      bool numeric = header[i].find("__") != std::string::npos;
      row[header[i]] = numeric ? std::to_string(NcuValueInBaseUnits(cells[i], u)) : cells[i];
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

ProfileResult Profile(const EvalRequest& req, const CompileResult& binary, const std::vector<ShapeTiming>& timings,
                      const ProfileOptions& o) {
  ProfileResult res;
  res.rung.name = "profile";
  auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(o.workdir, ec);
  std::string cubin = (fs::path(o.workdir) / "kernel.cubin").string();
  WriteTextFile(cubin, binary.cubin);
  std::string cuobjdump = FindTool("cuobjdump");
  nlohmann::json m = nlohmann::json::object();
  if (!cuobjdump.empty()) {
    std::string sass;
    if (Shell(Quote(cuobjdump) + " -sass " + Quote(cubin), &sass) == 0) {
      res.sass = sass;
      const SassCounts c = CountSass(sass);
      m["sass_instructions"] = c.instructions;
      m["sass_ldg128"] = c.ldg_wide;
      m["sass_stg128"] = c.stg_wide;
      m["sass_local_mem"] = c.local;
    }
  } else {
    res.rung.log += "cuobjdump not found: no SASS\n";
  }
  std::string ncu = FindTool("ncu");
  if (ncu.empty()) {
    res.rung.ok = true;
    res.rung.log += "ncu not found: no Nsight Compute report\n";
    res.rung.metrics = m;
    return res;
  }
  std::string reqfile = (fs::path(o.workdir) / "request.msgpack").string();
  WriteTextFile(reqfile, EncodeMessage(ToMessage(req)));
  std::string exe = o.kevolve_exe;
  if (exe.empty()) exe = fs::read_symlink("/proc/self/exe", ec).string();
  std::string names;
  for (const auto& [entry, sym] : binary.lowered) names += (names.empty() ? "" : "|") + sym;
  std::string report = (fs::path(o.workdir) / "profile").string();
  std::string out;
  // KEVOLVE_NCU_ARGS adds Nsight Compute options, e.g. "--section WarpStateStats
  // --section SchedulerStats": the report (kept with --profile-dir or in an export) then
  // holds those sections too; read them with `ncu -i profile.ncu-rep --page details`.
  const char* extra_env = std::getenv("KEVOLVE_NCU_ARGS");
  std::string opt_error;
  const std::string options = NcuOptions(kMetrics, extra_env ? extra_env : "", &opt_error);
  if (!opt_error.empty()) {
    res.rung.ok = false;
    res.rung.reason = "ncu_failed";
    res.rung.log += "KEVOLVE_NCU_ARGS: " + opt_error + "\n";
    res.rung.metrics = m;
    return res;
  }
  int rc = Shell(Quote(ncu) + " --clock-control none" + options + " -k " + Quote("regex:^(" + names + ")$") +
                     " -f -o " + Quote(report) + " " + Quote(exe) + " worker --device " + std::to_string(o.device) +
                     " --replay " + Quote(reqfile) + " --reps 1",
                 &out);
  auto bytes = ReadTextFile(report + ".ncu-rep");
  if (rc != 0 || !bytes.ok()) {
    res.rung.ok = false;
    res.rung.reason = "ncu_failed";
    res.rung.log += "ncu exited with " + std::to_string(rc) + ":\n" + out.substr(out.size() > 3000 ? out.size() - 3000 : 0);
    res.rung.metrics = m;
    return res;
  }
  res.ncu_report = *bytes;
  std::string csv;
  Shell(Quote(ncu) + " -i " + Quote(report + ".ncu-rep") + " --csv --page raw", &csv);
  auto rows = ParseNcuRawCsv(csv);
  // Rows come in launch order: shape by shape, each shape's sequence once.
  std::vector<const ShapeJob*> shapes;
  for (const auto& s : req.tune)
    if (s.unsupported.empty()) shapes.push_back(&s);
  nlohmann::json per_shape = nlohmann::json::array();
  std::ostringstream table;
  table << "shape            ncu_us   kevolve_us  ratio  dram_MB  counted_MB  dram_%  occupancy_%  regs\n";
  size_t r = 0;
  std::vector<double> ratios;
  for (const ShapeJob* s : shapes) {
    double ns = 0, dram = 0, pct = 0, occ = 0, regs = 0;
    size_t k = 0;
    for (; k < s->launches.size() && r < rows.size(); ++k, ++r) {
      ns += Num(rows[r], "gpu__time_duration.sum");
      dram += Num(rows[r], "dram__bytes_read.sum") + Num(rows[r], "dram__bytes_write.sum");
      pct = std::max(pct, Num(rows[r], "dram__throughput.avg.pct_of_peak_sustained_elapsed"));
      occ = std::max(occ, Num(rows[r], "sm__warps_active.avg.pct_of_peak_sustained_active"));
      regs = std::max(regs, Num(rows[r], "launch__registers_per_thread"));
    }
    double kv_us = 0;
    for (const auto& t : timings)
      if (t.shape == s->label) kv_us = t.median_us;
    double ratio = ns > 0 ? kv_us / (ns / 1e3) : 0;
    if (ratio > 0) ratios.push_back(ratio);
    per_shape.push_back({{"shape", s->label}, {"ncu_us", ns / 1e3}, {"kevolve_us", kv_us}, {"kevolve_over_ncu", ratio},
                         {"dram_bytes", dram}, {"counted_bytes", s->bytes}, {"dram_pct", pct},
                         {"occupancy_pct", occ}, {"regs", regs}});
    char line[256];
    std::snprintf(line, sizeof(line), "%-14s %8.1f %12.1f %6.3f %8.1f %11.1f %7.1f %12.1f %5.0f\n", s->label.c_str(),
                  ns / 1e3, kv_us, ratio, dram / 1e6, s->bytes / 1e6, pct, occ, regs);
    table << line;
  }
  // The metrics named in KEVOLVE_NCU_ARGS' --metrics, per shape, after the table and in
  // the rung's metrics (per_shape[i]["user_metrics"]).
  std::string name_error;
  const std::vector<std::string> user = NcuUserMetrics(extra_env ? extra_env : "", &name_error);
  if (!user.empty()) {
    table << "metrics from KEVOLVE_NCU_ARGS (summed over a shape's launches for .sum, else the largest):\n";
    size_t first = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const size_t n = std::min(shapes[i]->launches.size(), rows.size() - std::min(first, rows.size()));
      std::vector<std::map<std::string, std::string>> launches(rows.begin() + std::min(first, rows.size()),
                                                               rows.begin() + std::min(first + n, rows.size()));
      first += shapes[i]->launches.size();
      nlohmann::json um = nlohmann::json::object();
      for (const auto& [name, v] : UserMetricValues(launches, user)) {
        um[name] = v;
        char line[320];
        std::snprintf(line, sizeof(line), "  %-14s %s = %.6g\n", shapes[i]->label.c_str(), name.c_str(), v);
        table << line;
      }
      per_shape[i]["user_metrics"] = um;
    }
  }
  std::sort(ratios.begin(), ratios.end());
  m["ncu_kernels"] = static_cast<int64_t>(rows.size());
  m["kevolve_over_ncu_median"] = ratios.empty() ? 0.0 : ratios[ratios.size() / 2];
  m["shapes"] = per_shape;
  res.ncu_summary = table.str();
  res.rung.ok = !rows.empty();
  if (rows.empty()) {
    res.rung.reason = "ncu_no_kernels";
    res.rung.log += "ncu profiled no kernel; its output:\n" + csv.substr(0, 2000);
  }
  res.rung.metrics = m;
  res.rung.duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace kevolve

#include "kevolve/core/candidate.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <sstream>

namespace kevolve {

namespace {

constexpr const char* kTag = "@kevolve";

bool IsIdent(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// Splits at top-level commas (outside parentheses).
std::vector<std::string> SplitTopLevel(const std::string& s, char sep) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == sep && depth == 0) {
      out.push_back(Trim(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(Trim(cur));
  return out;
}

// True when s is "( ... )" with the outer parentheses matching each other.
bool WrappedInParens(const std::string& s) {
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') return false;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')') --depth;
    if (depth == 0 && i + 1 < s.size()) return false;
  }
  return true;
}

class DirectiveParser {
 public:
  DirectiveParser(CandidateSource* c) : c_(c) {}

  Status Error(int line, const std::string& what) const {
    return Status::Error(c_->name + ":" + std::to_string(line) + ": " + what);
  }

  Result<Expr> ParseExpr(int line, const std::string& text, const std::string& what) const {
    if (Trim(text).empty()) return Error(line, what + ": missing expression");
    auto e = Expr::Parse(Trim(text));
    if (!e.ok()) return Error(line, what + " '" + Trim(text) + "': " + e.error());
    return e;
  }

  Result<std::array<Expr, 3>> ParseDims(int line, std::string text, const std::string& what,
                                        const char* fill) const {
    text = Trim(text);
    auto parts = SplitTopLevel(text, ',');
    if (parts.size() == 1 && WrappedInParens(text)) parts = SplitTopLevel(text.substr(1, text.size() - 2), ',');
    if (parts.size() > 3) return Error(line, what + " has more than 3 dimensions");
    std::array<Expr, 3> dims;
    for (size_t i = 0; i < 3; ++i) {
      auto e = ParseExpr(line, i < parts.size() ? parts[i] : fill, what);
      if (!e.ok()) return e.status();
      dims[i] = *e;
    }
    return dims;
  }

  Status Directive(int line, const std::string& body) {
    std::istringstream in(body);
    std::string kw;
    in >> kw;
    std::string rest;
    std::getline(in, rest);
    rest = Trim(rest);
    if (kw == "param") return Param(line, rest);
    if (kw == "require") {
      auto e = ParseExpr(line, rest, "require");
      if (!e.ok()) return e.status();
      c_->requires_.push_back({*e, line});
      return Status::Ok();
    }
    if (kw == "scratch") return Scratch(line, rest);
    if (kw == "preset") {
      raw_presets_.push_back({line, rest});
      return Status::Ok();
    }
    if (kw == "launch") return Launch(line, rest);
    if (kw == "entry") {
      if (!IsIdent(rest)) return Error(line, "entry needs one kernel name, got '" + rest + "'");
      LaunchSpec l;
      l.entry = rest;
      l.line = line;
      l.smem = *Expr::Parse("0");
      c_->launches.push_back(l);
      seen_.push_back({});
      return Status::Ok();
    }
    if (kw == "grid" || kw == "block" || kw == "smem" || kw == "cluster") {
      if (c_->launches.empty()) return Error(line, kw + " before any 'entry' or 'launch'");
      return Geometry(line, c_->launches.back(), seen_.back(), kw, rest);
    }
    return Error(line, "unknown directive '" + kw +
                           "' (known: param, require, scratch, launch, entry, grid, block, smem, cluster, preset)");
  }

  // Presets are read last, so that they may name parameters declared below them.
  Status Presets() {
    for (const auto& [line, rest] : raw_presets_) {
      Assignment a = c_->DefaultAssignment();
      std::set<std::string> named;
      std::string spaced = rest;
      for (char& ch : spaced)
        if (ch == ',') ch = ' ';
      std::istringstream in(spaced);
      std::string tok;
      while (in >> tok) {
        const auto eq = tok.find('=');
        const std::string name = tok.substr(0, eq);
        if (eq == std::string::npos || eq == 0 || eq + 1 == tok.size())
          return Error(line, "preset: '" + tok + "' is not NAME=VALUE");
        const ParamSpec* p = c_->FindParam(name);
        if (!p) return Error(line, "preset: '" + name + "' is no declared param");
        if (!named.insert(name).second) return Error(line, "preset: '" + name + "' given twice");
        int64_t v = 0;
        try {
          size_t used = 0;
          v = std::stoll(tok.substr(eq + 1), &used);
          if (used != tok.size() - eq - 1) throw std::invalid_argument(tok);
        } catch (const std::exception&) {
          return Error(line, "preset: '" + tok + "' needs an integer value");
        }
        if (std::find(p->values.begin(), p->values.end(), v) == p->values.end())
          return Error(line, "preset: " + name + "=" + std::to_string(v) + " is not one of " + name + "'s values");
        a[name] = v;
      }
      if (named.empty()) return Error(line, "preset needs at least one NAME=VALUE");
      c_->presets.push_back(a);
    }
    return Status::Ok();
  }

  Status Finish() {
    if (Status s = Presets(); !s.ok()) return s;
    if (c_->launches.empty())
      return Status::Error(c_->name + ": no '@kevolve launch' (or 'entry') directive: nothing to run");
    for (size_t i = 0; i < c_->launches.size(); ++i) {
      if (!seen_[i].count("grid")) return Error(c_->launches[i].line, "launch '" + c_->launches[i].entry + "' has no grid");
      if (!seen_[i].count("block")) return Error(c_->launches[i].line, "launch '" + c_->launches[i].entry + "' has no block");
    }
    return Status::Ok();
  }

 private:
  Status Param(int line, const std::string& rest) {
    std::istringstream in(rest);
    ParamSpec p;
    p.line = line;
    in >> p.name;
    if (!IsIdent(p.name)) return Error(line, "param needs a name, got '" + p.name + "'");
    if (p.name == "T" || p.name == "sizeof_T" || p.name == "num_sms")
      return Error(line, "param name '" + p.name + "' is reserved");
    if (c_->FindParam(p.name)) return Error(line, "param '" + p.name + "' declared twice");
    std::string tok;
    while (in >> tok) {
      auto dots = tok.find("..");
      try {
        size_t used = 0;
        if (dots != std::string::npos) {  // lo..hi inclusive
          int64_t lo = std::stoll(tok.substr(0, dots), &used);
          if (used != dots) throw std::invalid_argument(tok);
          std::string hs = tok.substr(dots + 2);
          int64_t hi = std::stoll(hs, &used);
          int64_t span = 0;
          if (used != hs.size() || hi < lo || __builtin_sub_overflow(hi, lo, &span) || span > 4096)
            throw std::invalid_argument(tok);
          for (int64_t k = 0; k <= span; ++k) p.values.push_back(lo + k);
        } else {
          int64_t v = std::stoll(tok, &used);
          if (used != tok.size()) throw std::invalid_argument(tok);
          p.values.push_back(v);
        }
      } catch (const std::exception&) {
        return Error(line, "param " + p.name + ": '" + tok + "' is not an integer or a range lo..hi");
      }
    }
    if (p.values.empty()) return Error(line, "param " + p.name + " lists no values");
    std::set<int64_t> uniq(p.values.begin(), p.values.end());
    if (uniq.size() != p.values.size()) return Error(line, "param " + p.name + " lists a value twice");
    c_->params.push_back(std::move(p));
    return Status::Ok();
  }

  Status Scratch(int line, std::string rest) {
    std::istringstream in(rest);
    ScratchSpec s;
    s.line = line;
    in >> s.name;
    if (!IsIdent(s.name)) return Error(line, "scratch needs a buffer name, got '" + s.name + "'");
    std::string expr;
    std::getline(in, expr);
    expr = Trim(expr);
    const std::string kZeroed = "zeroed";
    if (expr.size() > kZeroed.size() && expr.compare(expr.size() - kZeroed.size(), kZeroed.size(), kZeroed) == 0 &&
        std::isspace(static_cast<unsigned char>(expr[expr.size() - kZeroed.size() - 1]))) {
      s.zeroed = true;
      expr = Trim(expr.substr(0, expr.size() - kZeroed.size()));
    }
    auto e = ParseExpr(line, expr, "scratch " + s.name + " bytes");
    if (!e.ok()) return e.status();
    s.bytes = *e;
    c_->scratch.push_back(std::move(s));
    return Status::Ok();
  }

  // launch ENTRY grid=... block=... smem=... cluster=...
  Status Launch(int line, const std::string& rest) {
    size_t sp = rest.find_first_of(" \t");
    std::string entry = rest.substr(0, sp);
    if (!IsIdent(entry)) return Error(line, "launch needs a kernel name first, got '" + entry + "'");
    LaunchSpec l;
    l.entry = entry;
    l.line = line;
    l.smem = *Expr::Parse("0");
    std::set<std::string> seen;
    std::string tail = sp == std::string::npos ? "" : rest.substr(sp);
    // Find "key=" at top level; each value runs to the next key.
    static const char* kKeys[] = {"grid", "block", "smem", "cluster"};
    std::vector<std::pair<size_t, std::string>> marks;
    int depth = 0;
    for (size_t i = 0; i < tail.size(); ++i) {
      if (tail[i] == '(') ++depth;
      if (tail[i] == ')') --depth;
      if (depth != 0 || (i > 0 && !std::isspace(static_cast<unsigned char>(tail[i - 1])))) continue;
      for (const char* k : kKeys) {
        std::string key = std::string(k) + "=";
        if (tail.compare(i, key.size(), key) == 0) marks.push_back({i, k});
      }
    }
    if (marks.empty() || !Trim(tail.substr(0, marks[0].first)).empty())
      return Error(line, "launch " + entry + ": expected grid=..., block=..., smem=..., cluster=...");
    for (size_t m = 0; m < marks.size(); ++m) {
      size_t vstart = marks[m].first + marks[m].second.size() + 1;
      size_t vend = m + 1 < marks.size() ? marks[m + 1].first : tail.size();
      Status s = Geometry(line, l, seen, marks[m].second, tail.substr(vstart, vend - vstart));
      if (!s.ok()) return s;
    }
    c_->launches.push_back(l);
    seen_.push_back(seen);
    return Status::Ok();
  }

  Status Geometry(int line, LaunchSpec& l, std::set<std::string>& seen, const std::string& key,
                  const std::string& value) {
    if (!seen.insert(key).second) return Error(line, "launch " + l.entry + ": " + key + " given twice");
    if (key == "smem") {
      auto e = ParseExpr(line, value, "smem");
      if (!e.ok()) return e.status();
      l.smem = *e;
      return Status::Ok();
    }
    auto d = ParseDims(line, value, key, key == "cluster" ? "1" : "1");
    if (!d.ok()) return d.status();
    if (key == "grid") l.grid = *d;
    else if (key == "block") l.block = *d;
    else l.cluster = *d;
    return Status::Ok();
  }

  CandidateSource* c_;
  std::vector<std::set<std::string>> seen_;  // per launch: geometry keys given
  std::vector<std::pair<int, std::string>> raw_presets_;  // (line, text), read in Finish
};

}  // namespace

std::string DirectiveKeyword(const std::string& raw) {
  std::string t = Trim(raw);
  if (t.rfind("//", 0) != 0) return "";
  std::string body = Trim(t.substr(2));
  if (body.rfind(kTag, 0) != 0) return "";
  std::istringstream in(body.substr(std::char_traits<char>::length(kTag)));
  std::string kw;
  in >> kw;
  return kw;
}

std::string WithoutPresets(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  std::string raw;
  while (std::getline(in, raw))
    if (DirectiveKeyword(raw) != "preset") out += raw + "\n";
  if (!text.empty() && text.back() != '\n' && !out.empty()) out.pop_back();
  return out;
}

Result<CandidateSource> CandidateSource::Parse(const std::string& text, const std::string& name) {
  CandidateSource c;
  c.name = name;
  c.text = text;
  DirectiveParser p(&c);
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    std::string t = Trim(raw);
    if (t.rfind("//", 0) != 0) continue;
    std::string body = Trim(t.substr(2));
    if (body.rfind(kTag, 0) != 0) continue;
    Status s = p.Directive(line, Trim(body.substr(std::char_traits<char>::length(kTag))));
    if (!s.ok()) return s;
  }
  Status s = p.Finish();
  if (!s.ok()) return s;
  return c;
}

const ParamSpec* CandidateSource::FindParam(const std::string& n) const {
  for (const auto& p : params)
    if (p.name == n) return &p;
  return nullptr;
}

Assignment CandidateSource::DefaultAssignment() const {
  Assignment a;
  for (const auto& p : params) a[p.name] = p.values.front();
  return a;
}

int64_t CandidateSource::SpaceSize() const {
  int64_t n = 1;
  for (const auto& p : params) {
    if (__builtin_mul_overflow(n, static_cast<int64_t>(p.values.size()), &n))
      return std::numeric_limits<int64_t>::max();
  }
  return n;
}

std::string AssignmentString(const Assignment& a) {
  std::string s;
  for (const auto& [k, v] : a) s += (s.empty() ? "" : ",") + k + "=" + std::to_string(v);
  return s;
}

Result<ParamSweep> ParseParamSweep(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    return Status::Error("'" + text + "': expected NAME=V1,V2,... (e.g. BLOCK=128,256)");
  ParamSweep sw;
  sw.name = text.substr(0, eq);
  const std::string list = text.substr(eq + 1);
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    // Blanks around a value are allowed ("0, 1"), within it not.
    const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    item = first == std::string::npos ? "" : item.substr(first, last - first + 1);
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size())
      return Status::Error("'" + text + "': '" + item + "' is not an integer value of " + sw.name);
    if (std::find(sw.values.begin(), sw.values.end(), v) != sw.values.end())
      return Status::Error("'" + text + "': the value " + item + " is given twice");
    sw.values.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sw;
}

Result<std::vector<Assignment>> ExpandSweeps(const Assignment& base, const std::vector<ParamSweep>& sweeps,
                                             size_t max_assignments) {
  size_t total = 1;
  for (size_t i = 0; i < sweeps.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (sweeps[j].name == sweeps[i].name) return Status::Error(sweeps[i].name + " is swept twice");
    if (sweeps[i].values.empty()) return Status::Error(sweeps[i].name + " has no values to sweep");
    total *= sweeps[i].values.size();
    if (total > max_assignments)
      return Status::Error("the sweeps make more than " + std::to_string(max_assignments) +
                           " assignments per file; sweep fewer values");
  }
  std::vector<Assignment> out = {base};
  for (const auto& sw : sweeps) {
    std::vector<Assignment> next;
    next.reserve(out.size() * sw.values.size());
    for (const auto& a : out)
      for (int64_t v : sw.values) {
        Assignment b = a;
        b[sw.name] = v;
        next.push_back(std::move(b));
      }
    out = std::move(next);
  }
  return out;
}

namespace {

// The requirement reads only parameters (and constants), so it can be checked early.
bool ParamsOnly(const Expr& e, const CandidateSource& c, const Env& constants) {
  for (const auto& v : e.Variables())
    if (!c.FindParam(v) && !constants.count(v)) return false;
  return true;
}

Env Merge(const Assignment& a, const Env& env) {
  Env all = env;
  for (const auto& [k, v] : a) all[k] = v;
  return all;
}

std::string Where(const CandidateSource& c, int line) { return c.name + ":" + std::to_string(line) + ": "; }

}  // namespace

Status ValidateAssignment(const CandidateSource& c, const Assignment& a, const Env& constants) {
  for (const auto& p : c.params) {
    auto it = a.find(p.name);
    if (it == a.end()) return Status::Error("parameter " + p.name + " is not assigned");
    if (std::find(p.values.begin(), p.values.end(), it->second) == p.values.end())
      return Status::Error("parameter " + p.name + "=" + std::to_string(it->second) +
                           " is not among its allowed values");
  }
  for (const auto& [k, v] : a) {
    (void)v;
    if (!c.FindParam(k)) return Status::Error("'" + k + "' is not a parameter of " + c.name);
  }
  for (const auto& r : c.requires_) {
    if (!ParamsOnly(r.expr, c, constants)) continue;
    auto v = r.expr.Eval(Merge(a, constants));
    if (!v.ok()) return Status::Error(Where(c, r.line) + v.error());
    if (*v == 0) return Status::Error(Where(c, r.line) + "requirement '" + r.expr.text() + "' fails for " + AssignmentString(a));
  }
  return Status::Ok();
}

Status CheckRequirements(const CandidateSource& c, const Assignment& a, const Env& env) {
  Env all = Merge(a, env);
  for (const auto& r : c.requires_) {
    auto v = r.expr.Eval(all);
    if (!v.ok()) return Status::Error(Where(c, r.line) + v.error());
    if (*v == 0) return Status::Error(Where(c, r.line) + "requirement '" + r.expr.text() + "' fails");
  }
  return Status::Ok();
}

Result<std::vector<LaunchConfig>> ResolveLaunches(const CandidateSource& c, const Assignment& a,
                                                  const Env& env) {
  Env all = Merge(a, env);
  std::vector<LaunchConfig> out;
  for (const auto& l : c.launches) {
    LaunchConfig lc;
    lc.entry = l.entry;
    for (int i = 0; i < 3; ++i) {
      auto g = l.grid[i].Eval(all);
      if (!g.ok()) return Status::Error(Where(c, l.line) + "grid: " + g.error());
      auto b = l.block[i].Eval(all);
      if (!b.ok()) return Status::Error(Where(c, l.line) + "block: " + b.error());
      if (*g <= 0 || *b <= 0)
        return Status::Error(Where(c, l.line) + "launch " + l.entry + " has a non-positive grid or block dimension");
      lc.grid[i] = *g;
      lc.block[i] = *b;
      if (l.cluster) {
        auto k = (*l.cluster)[i].Eval(all);
        if (!k.ok()) return Status::Error(Where(c, l.line) + "cluster: " + k.error());
        if (*k <= 0) return Status::Error(Where(c, l.line) + "cluster dimension must be positive");
        lc.cluster[i] = *k;
      }
    }
    auto s = l.smem.Eval(all);
    if (!s.ok()) return Status::Error(Where(c, l.line) + "smem: " + s.error());
    if (*s < 0) return Status::Error(Where(c, l.line) + "smem is negative");
    lc.smem = *s;
    out.push_back(lc);
  }
  return out;
}

Result<std::vector<int64_t>> ResolveScratch(const CandidateSource& c, const Assignment& a,
                                            const Env& env) {
  Env all = Merge(a, env);
  std::vector<int64_t> out;
  for (const auto& s : c.scratch) {
    auto b = s.bytes.Eval(all);
    if (!b.ok()) return Status::Error(Where(c, s.line) + "scratch " + s.name + ": " + b.error());
    if (*b < 0) return Status::Error(Where(c, s.line) + "scratch " + s.name + " has a negative size");
    out.push_back(*b);
  }
  return out;
}

}  // namespace kevolve

namespace kevolve {

Status CheckCandidateNames(const CandidateSource& c, const std::vector<std::string>& size_names) {
  auto check = [&](const Expr& e, int line, const std::string& what) -> Status {
    for (const auto& v : e.Variables()) {
      bool known = c.FindParam(v) || v == "sizeof_T" || v == "num_sms" ||
                   std::find(size_names.begin(), size_names.end(), v) != size_names.end();
      if (!known) {
        std::string sizes;
        for (const auto& s : size_names) sizes += (sizes.empty() ? "" : ", ") + s;
        return Status::Error(c.name + ":" + std::to_string(line) + ": " + what + " uses unknown name '" + v +
                             "' (known: parameters, " + sizes + ", sizeof_T, num_sms)");
      }
    }
    return Status::Ok();
  };
  for (const auto& l : c.launches) {
    for (int i = 0; i < 3; ++i) {
      if (Status s = check(l.grid[i], l.line, "grid"); !s.ok()) return s;
      if (Status s = check(l.block[i], l.line, "block"); !s.ok()) return s;
      if (l.cluster)
        if (Status s = check((*l.cluster)[i], l.line, "cluster"); !s.ok()) return s;
    }
    if (Status s = check(l.smem, l.line, "smem"); !s.ok()) return s;
  }
  for (const auto& s : c.scratch)
    if (Status st = check(s.bytes, s.line, "scratch " + s.name); !st.ok()) return st;
  for (const auto& r : c.requires_)
    if (Status s = check(r.expr, r.line, "require"); !s.ok()) return s;
  return Status::Ok();
}

}  // namespace kevolve

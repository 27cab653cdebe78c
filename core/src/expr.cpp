// Recursive-descent parser and tree evaluator for kevolve's integer expressions.
#include "kevolve/core/expr.h"

#include <cctype>
#include <limits>
#include <vector>

namespace kevolve {

namespace {

enum class Op {
  kLiteral, kVar, kNeg, kNot, kPlus,
  kAdd, kSub, kMul, kDiv, kMod,
  kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr,
  kCond, kCall,
};

}  // namespace

struct Expr::Node {
  Op op = Op::kLiteral;
  int64_t value = 0;
  std::string name;  // variable or function name
  std::vector<std::shared_ptr<const Node>> kids;
};

namespace {

using NodeP = std::shared_ptr<const Expr::Node>;

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Result<NodeP> ParseAll() {
    auto n = ParseCond();
    if (!n) return Fail();
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected '" + std::string(1, s_[pos_]) + "'");
    return n;
  }

 private:
  Status Error(const std::string& what) {
    if (!err_) err_ = "at column " + std::to_string(pos_ + 1) + ": " + what;
    return Fail();
  }
  Status Fail() { return Status::Error(err_.value_or("syntax error")); }

  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(const char* tok) {
    SkipSpace();
    size_t n = std::char_traits<char>::length(tok);
    if (s_.compare(pos_, n, tok) != 0) return false;
    // Keep '<' from eating the first char of '<=' etc.
    if (n == 1 && pos_ + 1 < s_.size()) {
      char c = tok[0], d = s_[pos_ + 1];
      if ((c == '<' || c == '>' || c == '!' || c == '=') && d == '=') return false;
      if ((c == '&' && d == '&') || (c == '|' && d == '|')) return false;
    }
    pos_ += n;
    return true;
  }
  static NodeP Make(Op op, std::vector<NodeP> kids) {
    auto n = std::make_shared<Expr::Node>();
    n->op = op;
    n->kids = std::move(kids);
    return n;
  }

  NodeP ParseCond() {
    NodeP c = ParseBinary(0);
    if (!c) return nullptr;
    if (!Eat("?")) return c;
    NodeP a = ParseCond();
    if (!a) return nullptr;
    if (!Eat(":")) { Error("expected ':' in '?:'"); return nullptr; }
    NodeP b = ParseCond();
    if (!b) return nullptr;
    return Make(Op::kCond, {c, a, b});
  }

  // Precedence climbing over binary operator levels, loosest first.
  NodeP ParseBinary(int level) {
    static const std::vector<std::vector<std::pair<const char*, Op>>> kLevels = {
        {{"||", Op::kOr}},
        {{"&&", Op::kAnd}},
        {{"==", Op::kEq}, {"!=", Op::kNe}},
        {{"<=", Op::kLe}, {">=", Op::kGe}, {"<", Op::kLt}, {">", Op::kGt}},
        {{"+", Op::kAdd}, {"-", Op::kSub}},
        {{"*", Op::kMul}, {"/", Op::kDiv}, {"%", Op::kMod}},
    };
    if (level == static_cast<int>(kLevels.size())) return ParseUnary();
    NodeP lhs = ParseBinary(level + 1);
    if (!lhs) return nullptr;
    for (;;) {
      bool matched = false;
      for (const auto& [tok, op] : kLevels[level]) {
        if (Eat(tok)) {
          NodeP rhs = ParseBinary(level + 1);
          if (!rhs) return nullptr;
          lhs = Make(op, {lhs, rhs});
          matched = true;
          break;
        }
      }
      if (!matched) return lhs;
    }
  }

  NodeP ParseUnary() {
    if (Eat("-")) { auto k = ParseUnary(); return k ? Make(Op::kNeg, {k}) : nullptr; }
    if (Eat("+")) { auto k = ParseUnary(); return k ? Make(Op::kPlus, {k}) : nullptr; }
    if (Eat("!")) { auto k = ParseUnary(); return k ? Make(Op::kNot, {k}) : nullptr; }
    return ParsePrimary();
  }

  NodeP ParsePrimary() {
    SkipSpace();
    if (pos_ >= s_.size()) { Error("unexpected end of expression"); return nullptr; }
    char c = s_[pos_];
    if (Eat("(")) {
      NodeP e = ParseCond();
      if (!e) return nullptr;
      if (!Eat(")")) { Error("expected ')'"); return nullptr; }
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return ParseNumber();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
        ++pos_;
      std::string name = s_.substr(start, pos_ - start);
      if (Eat("(")) return ParseCall(name, start);
      auto n = std::make_shared<Expr::Node>();
      n->op = Op::kVar;
      n->name = name;
      return n;
    }
    Error("unexpected '" + std::string(1, c) + "'");
    return nullptr;
  }

  NodeP ParseNumber() {
    size_t start = pos_;
    int base = 10;
    if (s_.compare(pos_, 2, "0x") == 0 || s_.compare(pos_, 2, "0X") == 0) {
      base = 16;
      pos_ += 2;
    }
    unsigned long long v = 0;
    size_t digits = 0;
    while (pos_ < s_.size()) {
      int d;
      char ch = s_[pos_];
      if (std::isdigit(static_cast<unsigned char>(ch))) d = ch - '0';
      else if (base == 16 && std::isxdigit(static_cast<unsigned char>(ch)))
        d = std::tolower(ch) - 'a' + 10;
      else break;
      if (v > (static_cast<unsigned long long>(std::numeric_limits<int64_t>::max()) - d) / base) {
        pos_ = start;
        Error("integer literal too large");
        return nullptr;
      }
      v = v * base + d;
      ++pos_;
      ++digits;
    }
    if (digits == 0) { Error("malformed number"); return nullptr; }
    if (pos_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.')) {
      Error("only integer literals are allowed");
      return nullptr;
    }
    auto n = std::make_shared<Expr::Node>();
    n->op = Op::kLiteral;
    n->value = static_cast<int64_t>(v);
    return n;
  }

  NodeP ParseCall(const std::string& name, size_t name_pos) {
    struct Arity { const char* name; size_t min, max; };
    static const Arity kFuncs[] = {
        {"ceil_div", 2, 2}, {"min", 2, 16}, {"max", 2, 16}, {"align_up", 2, 2}, {"log2", 1, 1},
        {"pow2_ceil", 1, 1},
    };
    const Arity* f = nullptr;
    for (const auto& a : kFuncs)
      if (name == a.name) f = &a;
    if (!f) {
      pos_ = name_pos;
      Error("unknown function '" + name + "' (known: ceil_div, min, max, align_up, log2, pow2_ceil)");
      return nullptr;
    }
    std::vector<NodeP> args;
    if (!Eat(")")) {
      for (;;) {
        NodeP a = ParseCond();
        if (!a) return nullptr;
        args.push_back(a);
        if (Eat(")")) break;
        if (!Eat(",")) { Error("expected ',' or ')' in call of " + name); return nullptr; }
      }
    }
    if (args.size() < f->min || args.size() > f->max) {
      Error(name + " takes " + std::to_string(f->min) +
            (f->max != f->min ? "+" : "") + " argument(s), got " + std::to_string(args.size()));
      return nullptr;
    }
    auto n = std::make_shared<Expr::Node>();
    n->op = Op::kCall;
    n->name = name;
    n->kids = std::move(args);
    return n;
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::optional<std::string> err_;
};

Result<int64_t> Overflow(const std::string& what) {
  return Status::Error("integer overflow in " + what);
}

Result<int64_t> EvalNode(const Expr::Node& n, const Env& env) {
  auto kid = [&](size_t i) { return EvalNode(*n.kids[i], env); };
  switch (n.op) {
    case Op::kLiteral: return n.value;
    case Op::kVar: {
      auto it = env.find(n.name);
      if (it == env.end()) return Status::Error("unknown name '" + n.name + "'");
      return it->second;
    }
    case Op::kNeg: case Op::kPlus: case Op::kNot: {
      auto a = kid(0);
      if (!a.ok()) return a;
      if (n.op == Op::kNot) return static_cast<int64_t>(*a == 0);
      if (n.op == Op::kPlus) return *a;
      if (*a == std::numeric_limits<int64_t>::min()) return Overflow("negation");
      return -*a;
    }
    case Op::kAnd: case Op::kOr: {  // short-circuit, like C
      auto a = kid(0);
      if (!a.ok()) return a;
      if (n.op == Op::kAnd && *a == 0) return int64_t{0};
      if (n.op == Op::kOr && *a != 0) return int64_t{1};
      auto b = kid(1);
      if (!b.ok()) return b;
      return static_cast<int64_t>(*b != 0);
    }
    case Op::kCond: {
      auto c = kid(0);
      if (!c.ok()) return c;
      return *c != 0 ? kid(1) : kid(2);
    }
    case Op::kCall: {
      std::vector<int64_t> v;
      for (size_t i = 0; i < n.kids.size(); ++i) {
        auto a = kid(i);
        if (!a.ok()) return a;
        v.push_back(*a);
      }
      if (n.name == "min" || n.name == "max") {
        int64_t r = v[0];
        for (int64_t x : v) r = (n.name == "min") ? std::min(r, x) : std::max(r, x);
        return r;
      }
      if (n.name == "ceil_div" || n.name == "align_up") {
        if (v[1] <= 0) return Status::Error(n.name + " by a non-positive divisor");
        if (v[0] < 0) return Status::Error(n.name + " of a negative value");
        int64_t q = v[0] / v[1] + (v[0] % v[1] != 0);
        if (n.name == "ceil_div") return q;
        int64_t r;
        if (__builtin_mul_overflow(q, v[1], &r)) return Overflow("align_up");
        return r;
      }
      if (n.name == "log2") {  // floor(log2(x)), x >= 1
        if (v[0] <= 0) return Status::Error("log2 of a non-positive value");
        return static_cast<int64_t>(63 - __builtin_clzll(static_cast<unsigned long long>(v[0])));
      }
      // pow2_ceil: the smallest power of two >= x (x >= 1)
      if (v[0] <= 0) return Status::Error("pow2_ceil of a non-positive value");
      int64_t p = 1;
      while (p < v[0]) {
        if (p > std::numeric_limits<int64_t>::max() / 2) return Overflow("pow2_ceil");
        p *= 2;
      }
      return p;
    }
    default: break;
  }
  auto a = kid(0);
  if (!a.ok()) return a;
  auto b = kid(1);
  if (!b.ok()) return b;
  int64_t x = *a, y = *b, r = 0;
  switch (n.op) {
    case Op::kAdd: if (__builtin_add_overflow(x, y, &r)) return Overflow("'+'"); return r;
    case Op::kSub: if (__builtin_sub_overflow(x, y, &r)) return Overflow("'-'"); return r;
    case Op::kMul: if (__builtin_mul_overflow(x, y, &r)) return Overflow("'*'"); return r;
    case Op::kDiv:
    case Op::kMod:
      if (y == 0) return Status::Error(n.op == Op::kDiv ? "division by zero" : "modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return Overflow("'/'");
      return n.op == Op::kDiv ? x / y : x % y;
    case Op::kLt: return static_cast<int64_t>(x < y);
    case Op::kLe: return static_cast<int64_t>(x <= y);
    case Op::kGt: return static_cast<int64_t>(x > y);
    case Op::kGe: return static_cast<int64_t>(x >= y);
    case Op::kEq: return static_cast<int64_t>(x == y);
    case Op::kNe: return static_cast<int64_t>(x != y);
    default: return Status::Error("internal: bad expression node");
  }
}

void CollectVars(const Expr::Node& n, std::set<std::string>* out) {
  if (n.op == Op::kVar) out->insert(n.name);
  for (const auto& k : n.kids) CollectVars(*k, out);
}

}  // namespace

Result<Expr> Expr::Parse(const std::string& text) {
  Parser p(text);
  auto root = p.ParseAll();
  if (!root.ok()) return root.status();
  Expr e;
  e.text_ = text;
  e.root_ = *root;
  return e;
}

Result<int64_t> Expr::Eval(const Env& env) const {
  if (!root_) return Status::Error("empty expression");
  auto r = EvalNode(*root_, env);
  if (!r.ok()) return Status::Error("in '" + text_ + "': " + r.error());
  return r;
}

std::set<std::string> Expr::Variables() const {
  std::set<std::string> out;
  if (root_) CollectVars(*root_, &out);
  return out;
}

}  // namespace kevolve

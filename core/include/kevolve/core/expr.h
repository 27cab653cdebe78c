// Integer expressions for launch geometry, cost models and parameter constraints.
//
// Grammar (C precedence): ?:, ||, &&, == !=, < <= > >=, + -, * / %, unary - ! +,
// integer literals, identifiers, parentheses, and calls of ceil_div(a,b), min(a,b,...),
// max(a,b,...), align_up(a,b), log2(a). Arithmetic is 64-bit signed; '/' truncates.
// Division by zero and overflow are evaluation errors, never UB.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "kevolve/core/status.h"

namespace kevolve {

using Env = std::map<std::string, int64_t>;

class Expr {
 public:
  // Parses `text`; the error says where ("at column 7: expected ')'").
  static Result<Expr> Parse(const std::string& text);

  // Evaluates with the variables of `env`; an unknown name is an error naming it.
  Result<int64_t> Eval(const Env& env) const;
  // Names this expression reads (for validation before any shape is known).
  std::set<std::string> Variables() const;
  const std::string& text() const { return text_; }

  struct Node;  // opaque; defined in expr.cpp

 private:
  std::string text_;
  std::shared_ptr<const Node> root_;  // immutable, so copies may share it
};

}  // namespace kevolve

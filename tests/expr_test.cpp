// Tests for kevolve::Expr (core/expr.h): parsing, precedence, evaluation, built-in
// functions, and the errors for bad input, unknown names, division by zero and overflow.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "kevolve/core/expr.h"

namespace kevolve {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Parses and evaluates; a parse error comes back as the Result's status.
Result<int64_t> Run(const std::string& text, const Env& env = {}) {
  auto e = Expr::Parse(text);
  if (!e.ok()) return e.status();
  return e->Eval(env);
}

// The value of `text`, failing the test (with the error) when it does not evaluate.
int64_t Val(const std::string& text, const Env& env = {}) {
  auto r = Run(text, env);
  INFO("expression: " << text << " -> " << r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

// The parse error of `text`; fails the test when it parses.
std::string ParseError(const std::string& text) {
  auto e = Expr::Parse(text);
  INFO("expression: " << text);
  REQUIRE_FALSE(e.ok());
  return e.error();
}

// The evaluation error of `text` (which must parse); fails the test when it evaluates.
std::string EvalError(const std::string& text, const Env& env = {}) {
  auto e = Expr::Parse(text);
  INFO("expression: " << text);
  REQUIRE(e.ok());
  auto r = e->Eval(env);
  INFO("evaluated to " << (r.ok() ? std::to_string(*r) : r.error()));
  REQUIRE_FALSE(r.ok());
  return r.error();
}

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("Expr: literals and whitespace", "[core]") {
  CHECK(Val("0") == 0);
  CHECK(Val("42") == 42);
  CHECK(Val("  7  ") == 7);
  CHECK(Val("0x10") == 16);
  CHECK(Val("0XfF") == 255);
  CHECK(Val("9223372036854775807") == kMax);
  CHECK_THAT(ParseError("9223372036854775808"), Contains("too large"));
  CHECK_THAT(ParseError("1.5"), Contains("only integer literals"));
  CHECK_THAT(ParseError("12abc"), Contains("only integer literals"));
  CHECK_THAT(ParseError("0x"), Contains("malformed number"));
}

TEST_CASE("Expr: arithmetic precedence and associativity", "[core]") {
  CHECK(Val("2+3*4") == 14);
  CHECK(Val("2*3+4") == 10);
  CHECK(Val("(2+3)*4") == 20);
  CHECK(Val("2*(3+4)") == 14);
  CHECK(Val("10-4-3") == 3);      // left-associative, not 10-(4-3)=9
  CHECK(Val("100/10/5") == 2);    // left-associative, not 100/(10/5)=50
  CHECK(Val("2*3%4") == 2);       // (2*3)%4, not 2*(3%4)=6
  CHECK(Val("7/2") == 3);
  CHECK(Val("-7/2") == -3);       // truncates toward zero, like C
  CHECK(Val("7/-2") == -3);
  CHECK(Val("7%3") == 1);
  CHECK(Val("-7%3") == -1);       // sign of the dividend, like C
  CHECK(Val("7%-3") == 1);
  CHECK(Val("-3+5") == 2);
  CHECK(Val("2 - -3") == 5);
  CHECK(Val("--3") == 3);
  CHECK(Val("+4") == 4);
  CHECK(Val("-(2+3)*2") == -10);
  CHECK(Val("((((1))))") == 1);
}

TEST_CASE("Expr: comparisons", "[core]") {
  CHECK(Val("1 < 2") == 1);
  CHECK(Val("2 < 1") == 0);
  CHECK(Val("2 <= 2") == 1);
  CHECK(Val("3 <= 2") == 0);
  CHECK(Val("3 > 2") == 1);
  CHECK(Val("2 > 2") == 0);
  CHECK(Val("2 >= 2") == 1);
  CHECK(Val("1 >= 2") == 0);
  CHECK(Val("4 == 4") == 1);
  CHECK(Val("4 == 5") == 0);
  CHECK(Val("4 != 5") == 1);
  CHECK(Val("4 != 4") == 0);
  // Relational binds tighter than equality, arithmetic tighter than both.
  CHECK(Val("1 < 2 == 1") == 1);
  CHECK(Val("1 + 1 == 2") == 1);
  CHECK(Val("2 * 3 > 5") == 1);
  CHECK(Val("3 > 2 > 1") == 0);   // (3>2)>1 = 1>1 = 0, as in C
  CHECK(Val("1<=2") == 1);        // no spaces: '<=' is one token
  CHECK(Val("2>=3") == 0);
  CHECK(Val("1<-1") == 0);        // '<' then unary minus
}

TEST_CASE("Expr: logical operators and the conditional", "[core]") {
  CHECK(Val("1 && 1") == 1);
  CHECK(Val("1 && 0") == 0);
  CHECK(Val("5 && 7") == 1);      // normalised to 0/1
  CHECK(Val("0 || 0") == 0);
  CHECK(Val("0 || 3") == 1);
  CHECK(Val("!0") == 1);
  CHECK(Val("!5") == 0);
  CHECK(Val("!!5") == 1);
  CHECK(Val("!0 + 1") == 2);      // unary binds tighter than '+'
  // && binds tighter than ||.
  CHECK(Val("1 || 0 && 0") == 1);
  CHECK(Val("(1 || 0) && 0") == 0);
  // Short-circuit: the right side is not evaluated.
  CHECK(Val("0 && 1/0") == 0);
  CHECK(Val("1 || 1/0") == 1);
  CHECK(Val("0 && nosuchname") == 0);
  CHECK_THAT(EvalError("1 && 1/0"), Contains("division by zero"));
  // ?: picks a branch, is right-associative and binds loosest.
  CHECK(Val("1 ? 2 : 3") == 2);
  CHECK(Val("0 ? 2 : 3") == 3);
  CHECK(Val("0 ? 1 : 0 ? 2 : 3") == 3);
  CHECK(Val("1 ? 1 : 0 ? 2 : 3") == 1);
  CHECK(Val("0 ? 1 : 1 ? 2 : 3") == 2);
  CHECK(Val("1 + 1 == 2 ? 10 : 20") == 10);
  CHECK(Val("1 ? 2 ? 3 : 4 : 5") == 3);
  CHECK(Val("1 ? 5 : 1/0") == 5);  // the other branch is not evaluated
  CHECK(Val("(0 ? 1 : 2) * 10") == 20);
  CHECK_THAT(ParseError("1 ? 2"), Contains("expected ':'"));
}

TEST_CASE("Expr: built-in functions", "[core]") {
  SECTION("ceil_div") {
    CHECK(Val("ceil_div(0, 4)") == 0);
    CHECK(Val("ceil_div(1, 4)") == 1);
    CHECK(Val("ceil_div(4, 4)") == 1);
    CHECK(Val("ceil_div(5, 4)") == 2);
    CHECK(Val("ceil_div(4097, 1)") == 4097);
    CHECK(Val("ceil_div(9223372036854775807, 2)") == kMax / 2 + 1);
    CHECK_THAT(EvalError("ceil_div(5, 0)"), Contains("non-positive divisor"));
    CHECK_THAT(EvalError("ceil_div(5, -1)"), Contains("non-positive divisor"));
    CHECK_THAT(EvalError("ceil_div(-1, 4)"), Contains("negative"));
  }
  SECTION("min and max") {
    CHECK(Val("min(3, 1)") == 1);
    CHECK(Val("min(1, 3)") == 1);
    CHECK(Val("max(3, 1)") == 3);
    CHECK(Val("max(-3, -1)") == -1);
    CHECK(Val("min(5, 2, 8, -4, 7)") == -4);
    CHECK(Val("max(5, 2, 8, -4, 7)") == 8);
    CHECK(Val("min(1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16)") == 1);
    CHECK(Val("max(2 * 3, 1 + 1)") == 6);
    CHECK(Val("min(max(1, 5), 3)") == 3);
  }
  SECTION("align_up") {
    CHECK(Val("align_up(0, 16)") == 0);
    CHECK(Val("align_up(1, 16)") == 16);
    CHECK(Val("align_up(16, 16)") == 16);
    CHECK(Val("align_up(17, 16)") == 32);
    CHECK(Val("align_up(10, 3)") == 12);
    CHECK_THAT(EvalError("align_up(10, 0)"), Contains("non-positive divisor"));
    CHECK_THAT(EvalError("align_up(-1, 4)"), Contains("negative"));
    CHECK_THAT(EvalError("align_up(9223372036854775807, 2)"), Contains("overflow"));
  }
  SECTION("log2 (floor)") {
    CHECK(Val("log2(1)") == 0);
    CHECK(Val("log2(2)") == 1);
    CHECK(Val("log2(3)") == 1);
    CHECK(Val("log2(1023)") == 9);
    CHECK(Val("log2(1024)") == 10);
    CHECK(Val("log2(9223372036854775807)") == 62);
    CHECK_THAT(EvalError("log2(0)"), Contains("non-positive"));
    CHECK_THAT(EvalError("log2(-8)"), Contains("non-positive"));
  }
  SECTION("pow2_ceil") {
    CHECK(Val("pow2_ceil(1)") == 1);
    CHECK(Val("pow2_ceil(2)") == 2);
    CHECK(Val("pow2_ceil(3)") == 4);
    CHECK(Val("pow2_ceil(5)") == 8);
    CHECK(Val("pow2_ceil(1024)") == 1024);
    CHECK(Val("pow2_ceil(1025)") == 2048);
    CHECK(Val("pow2_ceil(4611686018427387904)") == (int64_t{1} << 62));
    CHECK_THAT(EvalError("pow2_ceil(4611686018427387905)"), Contains("overflow"));
    CHECK_THAT(EvalError("pow2_ceil(0)"), Contains("non-positive"));
    CHECK_THAT(EvalError("pow2_ceil(-3)"), Contains("non-positive"));
  }
}

TEST_CASE("Expr: variables come from the Env", "[core]") {
  Env env = {{"rows", 4096}, {"cols", 1024}, {"BLOCK", 256}, {"sizeof_T", 2}, {"_x1", -5}};
  CHECK(Val("rows", env) == 4096);
  CHECK(Val("rows * cols * sizeof_T", env) == 4096LL * 1024 * 2);
  CHECK(Val("ceil_div(cols, BLOCK)", env) == 4);
  CHECK(Val("_x1 * 2", env) == -10);
  CHECK(Val("BLOCK % 32 == 0 && BLOCK <= 1024", env) == 1);
  // The same parsed expression evaluates with different environments.
  auto e = Expr::Parse("ceil_div(rows, 4)");
  REQUIRE(e.ok());
  CHECK(*e->Eval({{"rows", 9}}) == 3);
  CHECK(*e->Eval({{"rows", 16}}) == 4);
  CHECK(e->text() == "ceil_div(rows, 4)");
}

TEST_CASE("Expr: an unknown variable is an error naming it", "[core]") {
  std::string err = EvalError("rows * colz", {{"rows", 4}});
  CHECK_THAT(err, Contains("unknown name 'colz'"));
  CHECK_THAT(err, Contains("rows * colz"));  // names the expression, too
  // Names are case-sensitive.
  CHECK_THAT(EvalError("Rows", {{"rows", 4}}), Contains("'Rows'"));
}

TEST_CASE("Expr: division and modulo by zero are errors", "[core]") {
  CHECK_THAT(EvalError("1/0"), Contains("division by zero"));
  CHECK_THAT(EvalError("5 % 0"), Contains("modulo by zero"));
  CHECK_THAT(EvalError("rows / (cols - 1024)", {{"rows", 1}, {"cols", 1024}}), Contains("division by zero"));
  CHECK_THAT(EvalError("min(1, 1 % 0)"), Contains("modulo by zero"));
}

TEST_CASE("Expr: overflow is detected, never wraps", "[core]") {
  CHECK_THAT(EvalError("9223372036854775807 + 1"), Contains("overflow"));
  CHECK_THAT(EvalError("-9223372036854775807 - 2"), Contains("overflow"));
  CHECK_THAT(EvalError("4611686018427387904 * 2"), Contains("overflow"));
  CHECK_THAT(EvalError("-(-9223372036854775807 - 1)"), Contains("overflow"));
  CHECK_THAT(EvalError("(-9223372036854775807 - 1) / -1"), Contains("overflow"));
  CHECK_THAT(EvalError("a * b", {{"a", int64_t{1} << 40}, {"b", int64_t{1} << 40}}), Contains("overflow"));
  // The limits themselves are fine.
  CHECK(Val("-9223372036854775807 - 1") == kMin);
  CHECK(Val("9223372036854775806 + 1") == kMax);
  CHECK(Val("4611686018427387903 * 2") == kMax - 1);
  CHECK(Val("(-9223372036854775807 - 1) / 1") == kMin);
}

TEST_CASE("Expr: parse errors say the column", "[core]") {
  // The column is 1-based and points at the offending character.
  CHECK_THAT(ParseError("(2+3"), StartsWith("at column 5") && Contains("expected ')'"));
  CHECK_THAT(ParseError("2 + * 3"), StartsWith("at column 5") && Contains("'*'"));
  CHECK_THAT(ParseError("rows +"), StartsWith("at column 7") && Contains("end of expression"));
  CHECK_THAT(ParseError(""), StartsWith("at column 1"));
  CHECK_THAT(ParseError("   "), StartsWith("at column 4"));
  CHECK_THAT(ParseError("min(1,)"), StartsWith("at column 7") && Contains("')'"));
  CHECK_THAT(ParseError("a $ b"), StartsWith("at column 3") && Contains("'$'"));
  CHECK_THAT(ParseError("1 = 2"), StartsWith("at column 3"));
  CHECK_THAT(ParseError("max(1 2)"), Contains("expected ',' or ')'"));
}

TEST_CASE("Expr: unknown functions and wrong arity", "[core]") {
  std::string err = ParseError("1 + sqrt(4)");
  CHECK_THAT(err, StartsWith("at column 5"));
  CHECK_THAT(err, Contains("unknown function 'sqrt'"));
  CHECK_THAT(err, Contains("ceil_div"));  // lists the known ones
  CHECK_THAT(ParseError("ceil_div(1)"), Contains("ceil_div takes 2"));
  CHECK_THAT(ParseError("ceil_div(1, 2, 3)"), Contains("got 3"));
  CHECK_THAT(ParseError("min(1)"), Contains("min takes 2+"));
  CHECK_THAT(ParseError("max()"), Contains("got 0"));
  CHECK_THAT(ParseError("log2()"), Contains("log2 takes 1"));
  CHECK_THAT(ParseError("log2(1, 2)"), Contains("got 2"));
  CHECK_THAT(ParseError("pow2_ceil(1, 2)"), Contains("got 2"));
  CHECK_THAT(ParseError("align_up(1)"), Contains("got 1"));
  CHECK_THAT(ParseError("min(1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17)"), Contains("got 17"));
}

TEST_CASE("Expr: trailing garbage is rejected", "[core]") {
  CHECK_THAT(ParseError("1 2"), StartsWith("at column 3") && Contains("unexpected '2'"));
  CHECK_THAT(ParseError("(1))"), StartsWith("at column 4") && Contains("unexpected ')'"));
  CHECK_THAT(ParseError("rows cols"), StartsWith("at column 6"));
  CHECK_THAT(ParseError("1 ? 2 : 3 :"), Contains("unexpected ':'"));
  CHECK_THAT(ParseError("a | b"), Contains("'|'"));
  CHECK_THAT(ParseError("a & b"), Contains("'&'"));
}

TEST_CASE("Expr: Variables lists the names read, not functions", "[core]") {
  auto e = Expr::Parse("ceil_div(rows, WARPS) * 32 + min(cols, rows, BLOCK) - sizeof_T");
  REQUIRE(e.ok());
  CHECK(e->Variables() == std::set<std::string>{"BLOCK", "WARPS", "cols", "rows", "sizeof_T"});
  auto lit = Expr::Parse("1 + 2 * max(3, 4)");
  REQUIRE(lit.ok());
  CHECK(lit->Variables().empty());
  auto c = Expr::Parse("a ? b : !c");
  REQUIRE(c.ok());
  CHECK(c->Variables() == std::set<std::string>{"a", "b", "c"});
  // A default-constructed expression is empty: no variables, an error on evaluation.
  Expr empty;
  CHECK(empty.Variables().empty());
  CHECK_FALSE(empty.Eval({}).ok());
}

}  // namespace
}  // namespace kevolve

// Tests for the profile rung's host logic (engine/profiler.h): the Nsight Compute options
// built from KEVOLVE_NCU_ARGS, and the parsing of `ncu --csv --page raw`.
#include <catch2/catch.hpp>

#include <string>

#include "kevolve/engine/profiler.h"

namespace kevolve {
namespace {

TEST_CASE("KEVOLVE_NCU_ARGS metrics join kevolve's own, other options pass quoted", "[profile]") {
  std::string err;
  CHECK(NcuOptions("a,b", "", &err) == " --metrics 'a,b'");
  CHECK(err.empty());
  CHECK(NcuOptions("a,b", "--section WarpStateStats --section Occupancy", &err) ==
        " --metrics 'a,b' '--section' 'WarpStateStats' '--section' 'Occupancy'");
  // ncu refuses a second --metrics: both spellings fold into the one list, in order.
  CHECK(NcuOptions("a", "--section X --metrics breakdown:lts__throughput.avg.pct,c  --metrics=d", &err) ==
        " --metrics 'a,breakdown:lts__throughput.avg.pct,c,d' '--section' 'X'");
  CHECK(err.empty());
  CHECK(NcuOptions("", "--metrics c", &err) == " --metrics 'c'");
  CHECK(NcuOptions("", "--section X", &err) == " '--section' 'X'");
  // Shell quoting in the variable is honoured, and every word is quoted again for the
  // shell that runs ncu: blanks, quotes and $ reach ncu as written.
  CHECK(NcuOptions("a", "--section-folder \"/my  dir\" --metrics 'b,c' --x it\\'s \"\\$HOME\"", &err) ==
        " --metrics 'a,b,c' '--section-folder' '/my  dir' '--x' 'it'\\''s' '$HOME'");
  CHECK(err.empty());
}

TEST_CASE("KEVOLVE_NCU_ARGS with --metrics and no list, or an open quote, is an error", "[profile]") {
  for (const char* bad : {"--metrics", "--metrics --section X", "--metrics=", "--metrics=a --metrics ''"}) {
    std::string err;
    CHECK(NcuOptions("a", bad, &err).empty());
    CHECK(err.find("--metrics needs") != std::string::npos);
  }
  for (const char* bad : {"--section 'X", "--section \"X"}) {
    std::string err;
    CHECK(NcuOptions("a", bad, &err).empty());
    CHECK(err.find("unterminated") != std::string::npos);
  }
}

TEST_CASE("SASS counts find wide global accesses whatever their cache modifiers", "[profile]") {
  const std::string sass = R"(
        code for sm_90a
                Function : k
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;                /* 0x000000040204781 */
        /*0020*/              @!P0 LDG.E.NA.128.CONSTANT R8, desc[UR4][R2.64] ;    /* 0x000000040208781 */
        /*0030*/                   LDG.E.EL.128.CONSTANT R12, desc[UR4][R6.64] ;   /* 0x0000000406 */
        /*0040*/                   LDG.E.ENL2.256 R16, R20, desc[UR4][R2.64] ;     /* 0x0000000402 */
        /*0050*/                   LDG.E.64 R22, desc[UR4][R2.64] ;                /* 0x0000000402 */
        /*0060*/                   STG.E.EF.128 desc[UR4][R2.64], R4 ;            /* 0x0000000402 */
        /*0070*/                   STG.E.128 desc[UR4][R2.64], R8 ;               /* 0x0000000402 */
        /*0080*/                   STG.E desc[UR4][R2.64], R8 ;                   /* 0x0000000402 */
        /*0090*/                   STL.64 [R1], R4 ;                               /* 0x0000000401 */
        /*00a0*/                   LDL R5, [R1+0x8] ;                              /* 0x0000000801 */
        /*00b0*/                   EXIT ;                                          /* 0x000000000000794d */
)";
  const SassCounts c = CountSass(sass);
  CHECK(c.instructions == 12);
  CHECK(c.ldg_wide == 4);
  CHECK(c.stg_wide == 2);
  CHECK(c.local == 2);
}

TEST_CASE("ncu raw CSV rows are read in launch order, in base units", "[profile]") {
  const std::string csv =
      "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"dram__bytes_read.sum\"\n"
      "\"\",\"\",\"usecond\",\"Mbyte\"\n"
      "\"0\",\"k1\",\"1.50\",\"2,048.5\"\n"
      "\"1\",\"k2\",\"250\",\"0.5\"\n";
  auto rows = ParseNcuRawCsv(csv);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].at("Kernel Name") == "k1");
  CHECK(std::stod(rows[0].at("gpu__time_duration.sum")) == Approx(1500.0));
  CHECK(std::stod(rows[0].at("dram__bytes_read.sum")) == Approx(2048.5e6));
  CHECK(rows[1].at("Kernel Name") == "k2");
  CHECK(std::stod(rows[1].at("gpu__time_duration.sum")) == Approx(250e3));
  CHECK(NcuValueInBaseUnits("3", "msecond") == Approx(3e6));
  CHECK(NcuValueInBaseUnits("42.5", "%") == Approx(42.5));
  CHECK(NcuValueInBaseUnits("n/a", "byte") == 0);
}

TEST_CASE("KEVOLVE_NCU_ARGS metrics are named once each and read per shape from the raw rows", "[profile]") {
  std::string err;
  CHECK(NcuUserMetrics("--section X --metrics a.sum,breakdown:b,c --metrics=a.sum,d.pct", &err) ==
        std::vector<std::string>{"a.sum", "c", "d.pct"});
  CHECK(err.empty());
  CHECK(NcuUserMetrics("--section WarpStateStats", &err).empty());
  CHECK(NcuUserMetrics("--metrics 'x", &err).empty());
  CHECK(err.find("unterminated") != std::string::npos);

  // Two launches of one shape: a .sum column adds up, a rate takes the larger, a name asked
  // for without a rollup gives its rollup columns, and an unknown name gives nothing.
  const std::string csv =
      "\"ID\",\"Kernel Name\",\"a.sum\",\"c.avg\",\"c.max\",\"c.sum\",\"c.x.sum\",\"cx.sum\",\"d.pct\"\n"
      "\"\",\"\",\"byte\",\"\",\"\",\"\",\"\",\"\",\"%\"\n"
      "\"0\",\"k\",\"100\",\"2\",\"3\",\"4\",\"1\",\"9\",\"40\"\n"
      "\"1\",\"k\",\"50\",\"6\",\"7\",\"8\",\"1\",\"9\",\"35.5\"\n";
  const auto rows = ParseNcuRawCsv(csv);
  REQUIRE(rows.size() == 2);
  const auto v = UserMetricValues(rows, {"a.sum", "c", "d.pct", "missing.sum"});
  REQUIRE(v.size() == 5);
  CHECK(v[0].first == "a.sum");
  CHECK(v[0].second == Approx(150));
  CHECK(v[1].first == "c.avg");
  CHECK(v[1].second == Approx(6));
  CHECK(v[2].first == "c.max");
  CHECK(v[2].second == Approx(7));
  CHECK(v[3].first == "c.sum");
  CHECK(v[3].second == Approx(12));
  CHECK(v[4].first == "d.pct");
  CHECK(v[4].second == Approx(40));
  // A name listed twice over (c, then its c.sum) is reported once.
  const auto twice = UserMetricValues(rows, {"c", "c.sum"});
  CHECK(twice.size() == 3);
  const std::vector<std::map<std::string, std::string>> one_launch(rows.begin() + 1, rows.end());
  CHECK(UserMetricValues(one_launch, {"a.sum"})[0].second == Approx(50));
  CHECK(UserMetricValues({}, {"a.sum"}).empty());
}

}  // namespace
}  // namespace kevolve

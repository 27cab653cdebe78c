// Tests for the profile rung's host logic (engine/profiler.h): the Nsight Compute options
// built from KEVOLVE_NCU_ARGS, and the parsing of `ncu --csv --page raw`.
#include <catch2/catch.hpp>

#include <string>

#include "kevolve/engine/profiler.h"

namespace kevolve {
namespace {

TEST_CASE("KEVOLVE_NCU_ARGS metrics join kevolve's own, other options pass as written", "[profile]") {
  std::string err;
  CHECK(NcuOptions("a,b", "", &err) == " --metrics a,b");
  CHECK(err.empty());
  CHECK(NcuOptions("a,b", "--section WarpStateStats --section Occupancy", &err) ==
        " --metrics a,b --section WarpStateStats --section Occupancy");
  // ncu refuses a second --metrics: both spellings fold into the one list, in order.
  CHECK(NcuOptions("a", "--section X --metrics breakdown:lts__throughput.avg.pct,c  --metrics=d", &err) ==
        " --metrics a,breakdown:lts__throughput.avg.pct,c,d --section X");
  CHECK(err.empty());
  CHECK(NcuOptions("", "--metrics c", &err) == " --metrics c");
}

TEST_CASE("KEVOLVE_NCU_ARGS with --metrics and no list is an error", "[profile]") {
  for (const char* bad : {"--metrics", "--metrics --section X", "--metrics="}) {
    std::string err;
    CHECK(NcuOptions("a", bad, &err).empty());
    CHECK(err.find("--metrics needs") != std::string::npos);
  }
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

}  // namespace
}  // namespace kevolve

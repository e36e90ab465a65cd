#include "driver/run.h"

#include <doctest/doctest.h>

#include "core/json_reader.h"

namespace alpasim::driver {
namespace {

TEST_CASE("the same scenario gives byte-identical JSON") {
  Scenario a = load_default_scenario().value();
  Scenario b = load_default_scenario().value();
  std::string first = core::dump_json(run_scenario(a).value().json);
  std::string second = core::dump_json(run_scenario(b).value().json);
  CHECK(first == second);
  CHECK(first.find("\"status\": \"scenario_loaded\"") != std::string::npos);
}

TEST_CASE("the summary says plainly that no plan was made yet") {
  RunReport r = run_scenario(load_default_scenario().value()).value();
  CHECK(r.text.find("no plan or prediction was made") != std::string::npos);
  CHECK(r.text.find("8 x NVIDIA Tesla V100-SXM2-16GB") != std::string::npos);
}

}  // namespace
}  // namespace alpasim::driver

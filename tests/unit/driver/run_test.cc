#include "driver/run.h"

#include <set>

#include <doctest/doctest.h>

#include "core/json_reader.h"

namespace alpasim::driver {
namespace {

// The default scenario is searched (mode "alpa"): a whole planner run, a few seconds.
TEST_CASE("the same scenario gives byte-identical JSON without wall-clock fields") {
  RunSettings settings;
  settings.include_timing = false;
  Scenario a = load_default_scenario().value();
  Scenario b = load_default_scenario().value();
  RunReport first = run_scenario(a, settings).value();
  RunReport second = run_scenario(b, settings).value();
  std::string first_json = core::dump_json(first.json);
  CHECK(first_json == core::dump_json(second.json));
  CHECK(first_json.find("\"status\": \"planned\"") != std::string::npos);
  CHECK(first_json.find("wall_time_s") == std::string::npos);
  // The plan covers the cluster and the summary names the hardware.
  REQUIRE(first.plan.has_value());
  std::set<std::int64_t> devices;
  for (const auto& stage : first.plan->stages) devices.insert(stage.device_ids.begin(), stage.device_ids.end());
  CHECK(devices.size() == 8);
  CHECK(first.text.find("8 x NVIDIA Tesla V100-SXM2-16GB") != std::string::npos);
  CHECK(first.text.find("comparison under the same cost model and simulator") != std::string::npos);
}

}  // namespace
}  // namespace alpasim::driver

#include "driver/run.h"

#include <set>

#include <doctest/doctest.h>

#include "core/json_reader.h"

namespace alpasim::driver {
namespace {

TEST_CASE("bf16 on a GPU without bf16 tensor cores is a warning, fp16 is not") {
  Scenario s = load_default_scenario().value();  // 8 V100
  s.training.dtype = core::DType::kBf16;
  const auto warnings = scenario_warnings(s);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("V100") != std::string::npos);
  CHECK(warnings[0].find("no bf16 tensor cores") != std::string::npos);
  CHECK(warnings[0].find("(8.0x below fp16)") != std::string::npos);  // 125 / 15.7 TFLOP/s
  s.training.dtype = core::DType::kFp16;
  CHECK(scenario_warnings(s).empty());
  s.training.dtype = core::DType::kFp32;
  CHECK(scenario_warnings(s).empty());
}

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
  // The model summary describes the chosen plan's microbatching and recomputation, not the
  // scenario's "auto" (it used to say 1024 microbatches x 1 for a plan of 512 x 2).
  const schema::Plan& plan = *first.plan;
  const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
  CHECK(first.text.find("1024 samples/iteration = " + std::to_string(plan.num_microbatches) +
                        " microbatches x " + std::to_string(mbs) + "\n") != std::string::npos);
  CHECK(first.text.find("recompute " + std::string(schema::recompute_name(plan.recompute)) + "\n") !=
        std::string::npos);
  CHECK(first.json.at("model_summary").at("microbatch_size").get<std::int64_t>() == mbs);
  // The summary reports the cluster's reserve and what plans may use.
  CHECK(first.text.find("(16.00 GiB each, 1.80 GiB reserved for the runtime: plans may use 14.20 GiB)") !=
        std::string::npos);
}

}  // namespace
}  // namespace alpasim::driver

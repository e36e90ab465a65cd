// Plans produced by planner::search run on the CPU backend and reproduce the unsharded
// reference (tolerance and its reason: cpu_backend_test.cc), with the search's own
// per-operator shardings (plans that split more than the batch: sharded_plans_test.cc).
#include <doctest/doctest.h>

#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/verify.h"
#include "planner/search/search.h"
#include "tests/unit/exec/exec_fixtures.h"
#include "tests/unit/exec/search_fixtures.h"
#include "tests/support/shipped_calibration.h"

namespace alpasim::exec {
namespace {

constexpr double kRelTol = 1e-4;
constexpr double kAbsTol = 1e-6;

// A small search of the tiny GPT on 4 GPUs of one node, microbatches of 2 or 4.
planner::SearchInput input(const ir::ModelConfig& model, const std::string& mode, std::int64_t batch) {
  planner::SearchInput in = testing::small_search(model, mode, batch, 4);
  in.options.microbatch_sizes = {2, 4};
  return in;
}

void compare(const ExecutionResult& got, const ExecutionResult& ref) {
  const testing::Comparison loss = testing::compare_scalar(got.loss, ref.loss, {kRelTol, kRelTol});
  CHECK_MESSAGE(loss.ok, "loss: " << loss.message);
  REQUIRE(!got.gradients.empty());
  for (const auto& [name, g] : got.gradients) {
    REQUIRE(ref.gradients.count(name));
    const testing::Comparison c = testing::compare_values(g, ref.gradients.at(name), {kRelTol, kAbsTol});
    CHECK_MESSAGE(c.ok, "gradient of " << name << ": " << c.message);
  }
}

TEST_CASE("tiny GPT: plans of the search run on the CPU backend and match the reference") {
  const ir::ModelConfig gpt = testing::tiny_gpt(2);
  for (const std::string mode : {"inter_op_only", "data_parallel", "alpa"}) {
    auto r = planner::search(input(gpt, mode, 8));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const schema::Plan& plan = r->plan;
    MESSAGE(mode << ": " << plan.stages.size() << " stages, " << plan.num_microbatches << " microbatches, "
                 << schema::schedule_name(plan.schedule));
    auto native = lower_plan(plan);
    CHECK_MESSAGE(native.ok(), native.status().message());  // lowered with its own shardings
    const auto ref = testing::run_on_cpu(testing::unsharded_reference(plan));
    compare(testing::run_on_cpu(plan), ref);
  }
}

// Searched Wide-ResNet and MLP plans: sharded_plans_test.cc.

}  // namespace
}  // namespace alpasim::exec

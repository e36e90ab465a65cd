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
#include "tests/support/shipped_calibration.h"

namespace alpasim::exec {
namespace {

constexpr double kRelTol = 1e-4;
constexpr double kAbsTol = 1e-6;

const std::map<std::string, cost_model::Calibration>& shipped() { return ::alpasim::testing::shipped_calibrations(); }

planner::SearchInput input(const ir::ModelConfig& model, const std::string& mode, std::int64_t batch) {
  planner::SearchInput in;
  in.model = model;
  in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", 1).value();
  in.cluster.gpus_per_node = 4;
  in.cost = cost_model::CostModel::create(
                in.cluster, cost_model::params_for_preset(shipped(), "aws-p3.16xlarge").value())
                .value();
  in.global_batch_size = batch;
  in.mode = mode;
  // A small search: tiny GPT, few points (the search's own tests cover its breadth).
  in.options.compare_baselines = false;
  in.options.time_limit_s = 5;
  in.options.microbatch_sizes = {2, 4};
  in.options.recompute = {schema::Recompute::kNone};
  in.options.top_k = 1;
  return in;
}

ExecutionResult run(const schema::Plan& plan, bool ignore_shardings) {
  LowerOptions o;
  o.ignore_operator_shardings = ignore_shardings;
  auto p = lower_plan(plan, o);
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  auto v = verify_program(*p);
  REQUIRE_MESSAGE(v.ok(), v.status().message());
  auto r = cpu::make_cpu_backend()->run(*p, {});
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  return *r;
}

schema::Plan reference_of(const schema::Plan& plan, std::int64_t microbatches) {
  schema::Plan r = plan;
  r.stages.resize(1);
  r.stages[0].layer_begin = 0;
  r.stages[0].layer_end = plan.stages.back().layer_end;
  r.stages[0].device_ids = {0};
  r.stages[0].submesh_nodes = r.stages[0].submesh_gpus_per_node = 1;
  r.stages[0].logical_rows = r.stages[0].logical_cols = 1;
  r.stages[0].shardings.clear();
  r.stages[0].weight_update_sharding = false;
  r.schedule = schema::Schedule::kGpipe;
  r.interleave = 1;
  r.num_microbatches = microbatches;
  return r;
}

void compare(const ExecutionResult& got, const ExecutionResult& ref) {
  CHECK(got.loss == doctest::Approx(ref.loss).epsilon(kRelTol));
  REQUIRE(!got.gradients.empty());
  for (const auto& [name, g] : got.gradients) {
    const testing::Diff d = testing::diff(g, ref.gradients.at(name));
    INFO("gradient of " << name);
    CHECK(d.max_abs_diff <= kRelTol * d.max_abs_ref + kAbsTol);
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
    const auto ref = run(reference_of(plan, 1), false);
    compare(run(plan, false), ref);
  }
}

// Searched Wide-ResNet and MLP plans: sharded_plans_test.cc.

}  // namespace
}  // namespace alpasim::exec

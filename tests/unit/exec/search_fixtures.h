// Fixtures of the tests that run planner-made plans on the CPU backend
// (alpasim_exec_search_tests): search inputs on p3.16xlarge V100s priced with the shipped
// calibration, and the unsharded reference of a plan (run_on_cpu: exec_fixtures.h).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "cost_model/cost_model.h"
#include "exec/lower.h"
#include "planner/search/search.h"
#include "schema/megatron_layouts.h"
#include "schema/plan.h"
#include "tests/unit/exec/exec_fixtures.h"
#include "tests/support/shipped_calibration.h"

namespace alpasim::exec::testing {

/// `nodes` p3.16xlarge nodes of `gpus_per_node` V100s each, priced with the shipped
/// calibration; mode and search options left at their defaults.
inline planner::SearchInput p3_input(const ir::ModelConfig& model, std::int64_t batch,
                                     std::int64_t nodes = 1, std::int64_t gpus_per_node = 4) {
  planner::SearchInput in;
  in.model = model;
  in.cluster = cluster::make_preset_cluster("aws-p3.16xlarge", nodes).value();
  in.cluster.gpus_per_node = gpus_per_node;
  in.cost = cost_model::CostModel::create(
                in.cluster,
                cost_model::params_for_preset(::alpasim::testing::shipped_calibrations(), "aws-p3.16xlarge")
                    .value())
                .value();
  in.global_batch_size = batch;
  return in;
}

/// A small search in `mode` on `gpus` GPUs over `nodes` nodes: no baselines, no
/// recomputation, the top candidate only, a 5 s budget (the search's own tests cover its
/// breadth).
inline planner::SearchInput small_search(const ir::ModelConfig& model, const std::string& mode,
                                         std::int64_t batch, std::int64_t gpus, std::int64_t nodes = 1) {
  planner::SearchInput in = p3_input(model, batch, nodes, gpus / nodes);
  in.mode = mode;
  in.options.compare_baselines = false;
  in.options.time_limit_s = 5;
  in.options.recompute = {schema::Recompute::kNone};
  in.options.top_k = 1;
  return in;
}

/// The unsharded reference of `plan`: every layer on device 0 of a 1x1 mesh, no intra-op
/// shardings or weight-update sharding, GPipe, no recomputation, the batch in
/// `microbatches` pieces.
inline schema::Plan unsharded_reference(const schema::Plan& plan, std::int64_t microbatches = 1) {
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
  r.recompute = schema::Recompute::kNone;
  return r;
}

/// The training graph the executor builds for `plan` at `samples` per microbatch.
inline ir::Graph executor_training_graph(const schema::Plan& plan, std::int64_t samples) {
  ir::BuildOptions bo;
  bo.microbatch_size = samples;
  bo.dtype = plan.dtype;
  ir::Graph fwd = ir::build_forward_graph(plan.model, bo).value();
  ir::TrainingOptions to;
  to.optimizer = executor_optimizer(fwd);
  to.recompute = plan.recompute == schema::Recompute::kFull ? ir::RecomputePolicy::kFull : ir::RecomputePolicy::kNone;
  return ir::derive_training_graph(fwd, to);
}

/// The tp 2 pp 2 dp 2 plan file `alpa-sim --out` writes, its layouts rewritten with Megatron's
/// sequence parallelism (the hidden states split over the sequence between the linears).
inline schema::Plan sequence_parallel_plan_file() {
  auto p = schema::read_plan_file(std::string(ALPASIM_SOURCE_DIR) +
                                  "/tests/unit/exec/data/tiny_gpt_megatron_plan_file_tp2_pp2_dp2.json");
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  schema::Plan plan = *p;
  const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
  const ir::Graph g = executor_training_graph(plan, mbs);
  for (auto& st : plan.stages) {
    auto sh = schema::megatron_operator_shardings(g, plan.model, mbs, st.layer_begin, st.layer_end, st.logical_rows,
                                                  st.logical_cols, true);
    REQUIRE_MESSAGE(sh.ok(), sh.status().message());
    st.shardings = *sh;
  }
  return plan;
}

}  // namespace alpasim::exec::testing

// Models and cost models shared by the Megatron lowering tests.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "cluster/cluster_spec.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "ir/builders.h"
#include "sim/lowering/megatron_lowering.h"

namespace alpasim::sim::lowering::testing {

/// A GPT ("gpt" architecture: tied embedding, learned positions, biases) of `layers` blocks,
/// hidden `hidden` with a 4·hidden MLP.
inline ir::ModelConfig gpt_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                                 std::int64_t seq_len, std::int64_t vocab) {
  return ir::gpt_model_config("gpt", layers, hidden, heads, seq_len, vocab);
}

/// `nodes` nodes of a cluster preset priced with the default (documented) parameters, so
/// closed forms do not depend on calibration; gpus_per_node > 0 overrides the preset's.
inline cost_model::CostModel preset_cost_model(const std::string& preset, std::int64_t nodes,
                                               std::int64_t gpus_per_node = 0) {
  auto spec = cluster::make_preset_cluster(preset, nodes);
  REQUIRE(spec.ok());
  if (gpus_per_node > 0) spec->gpus_per_node = gpus_per_node;
  auto cm = cost_model::CostModel::create(*spec, cost_model::default_params());
  REQUIRE(cm.ok());
  return *cm;
}

/// `nodes` DGX A100 80 GB nodes at the default parameters.
inline cost_model::CostModel dgx(std::int64_t nodes) { return preset_cost_model("dgx-a100-80gb", nodes); }

/// Training settings: `batch` sequences per iteration in `dtype`, Adam.
inline TrainingSetup training_setup(std::int64_t batch, core::DType dtype) {
  TrainingSetup t;
  t.global_batch_size = batch;
  t.dtype = dtype;
  return t;
}

}  // namespace alpasim::sim::lowering::testing

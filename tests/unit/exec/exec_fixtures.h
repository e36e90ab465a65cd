#pragma once
// Tiny models and hand-written plans for the executor tests.

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "exec/cpu/cpu_backend.h"
#include "exec/lower.h"
#include "exec/verify.h"
#include "ir/builders.h"
#include "schema/plan.h"
#include "tests/support/numeric_compare.h"
#include "tests/support/tiny_models.h"

namespace alpasim::exec::testing {

/// Lowers, verifies and runs `plan` on the CPU backend; any failing step fails the test.
inline ExecutionResult run_on_cpu(const schema::Plan& plan, const LowerOptions& options = {}) {
  auto p = lower_plan(plan, options);
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  auto v = verify_program(*p);
  REQUIRE_MESSAGE(v.ok(), v.status().message());
  auto r = cpu::make_cpu_backend()->run(*p, {});
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  return *r;
}

/// An MLP with `hidden_layers` GELU layers (ir has no MLP builtin): layer 0 holds the input,
/// layers 1..h the dense+GELU blocks, layer h+1 the classifier and the loss.
inline ir::Graph build_mlp(std::int64_t batch, int hidden_layers) {
  ir::Graph g;
  g.meta.model_name = "mlp";
  g.meta.family = "mlp";
  g.meta.dtype = core::DType::kFp32;
  g.meta.samples_per_microbatch = batch;
  g.layers.push_back({"input", "prologue"});
  ir::OpId x = g.add_input("input/x", {batch, 12}, false, 0);
  std::int64_t width = 12;
  for (int l = 1; l <= hidden_layers; ++l) {
    const std::string p = "fc" + std::to_string(l) + "/";
    g.layers.push_back({"fc" + std::to_string(l), "block"});
    ir::OpId w = g.add_parameter(p + "weight", {width, 16}, l);
    ir::OpId b = g.add_parameter(p + "bias", {16}, l);
    x = g.add_elementwise(p + "gelu", "gelu", {g.add_dot(p + "dot", "bh,hf->bf", x, w, l, b)}, 8, l);
    width = 16;
  }
  const auto head = static_cast<std::int32_t>(hidden_layers + 1);
  g.layers.push_back({"head", "epilogue"});
  ir::OpId logits = g.add_dot("head/logits", "bf,fk->bk", x, g.add_parameter("head/weight", {width, 6}, head), head);
  ir::OpId labels = g.add_input("head/labels", {batch}, true, head);
  ir::OpId ce = g.add_reduce("head/cross_entropy", "softmax_cross_entropy", {logits, labels}, {batch}, 5, head);
  g.mutable_op(ce).no_grad_inputs = 1u << 1;
  g.meta.loss = g.add_reduce("head/loss", "mean", {ce}, {1}, 1, head);
  return g;
}

inline ir::ModelConfig tiny_gpt(std::int64_t layers = 2) { return ::alpasim::testing::tiny_gpt_hidden8(layers); }

using ::alpasim::testing::tiny_wide_resnet;  // tests/support/tiny_models.h

struct StageSpec {
  std::int64_t begin = 0, end = 0, rows = 1, cols = 1;
  std::vector<std::int64_t> devices;
};

inline schema::Plan make_plan(const ir::ModelConfig& model, const std::vector<StageSpec>& stages,
                              schema::Schedule schedule, std::int64_t microbatches,
                              std::int64_t batch, std::int64_t interleave = 1) {
  schema::Plan p;
  p.model = model;
  p.dtype = core::DType::kFp16;
  p.global_batch_size = batch;
  p.num_microbatches = microbatches;
  p.schedule = schedule;
  p.interleave = interleave;
  for (const StageSpec& s : stages) {
    schema::PlanStage st;
    st.layer_begin = s.begin;
    st.layer_end = s.end;
    st.submesh_nodes = 1;
    st.submesh_gpus_per_node = s.rows * s.cols;
    st.logical_rows = s.rows;
    st.logical_cols = s.cols;
    st.device_ids = s.devices;
    p.stages.push_back(st);
  }
  return p;
}

// Tensor and loss comparisons: tests/support/numeric_compare.h (fails on NaN and Inf).
using ::alpasim::testing::compare_scalar;
using ::alpasim::testing::compare_values;
using ::alpasim::testing::Comparison;
using ::alpasim::testing::Tolerance;

}  // namespace alpasim::exec::testing

// Closed forms of the Megatron-specific memory-bound terms the lowering adds (gradient
// accumulation into main_grad per microbatch, the mixed-precision optimizer's extra passes)
// and of the GEMM curve's ceiling (cost_model: never above the best measured efficiency).
// The ceiling test lives here because it is what the Megatron validation depends on.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "cluster/cluster_spec.h"
#include "cost_model/calibration.h"
#include "cost_model/compute_cost.h"
#include "cost_model/cost_model.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "sim/lowering/megatron_lowering.h"

namespace alpasim::sim::lowering {
namespace {

ir::ModelConfig tiny_gpt() { return ir::gpt_model_config("", 2, 64, 4, 32, 128); }

cost_model::CostModel one_gpu() {
  auto spec = cluster::make_preset_cluster("dgx-a100-80gb", 1);
  REQUIRE(spec.ok());
  spec->gpus_per_node = 1;
  auto cm = cost_model::CostModel::create(*spec, cost_model::default_params());
  REQUIRE(cm.ok());
  return *cm;
}

// Parameter tensors of each layer of the tiny GPT's training graph, and whether each is a
// forward einsum's weight (what gradient-accumulation fusion absorbs).
struct ParamTensor {
  std::int64_t layer;
  std::int64_t elements;
  bool gemm_weight;
};
std::vector<ParamTensor> parameter_tensors() {
  ir::BuildOptions b;
  auto fwd = ir::build_forward_graph(tiny_gpt(), b);
  REQUIRE(fwd.ok());
  const ir::Graph g = ir::derive_training_graph(*fwd, {});
  std::vector<char> weight(g.size(), 0);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const ir::Op& op = g.op(static_cast<ir::OpId>(i));
    if (op.phase == ir::Phase::kForward && op.is_einsum() && op.inputs.size() >= 2 &&
        g.op(op.inputs[1]).kind == ir::OpKind::kParameter) {
      weight[static_cast<std::size_t>(op.inputs[1])] = 1;
    }
  }
  std::vector<ParamTensor> out;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const ir::Op& op = g.op(static_cast<ir::OpId>(i));
    if (op.kind == ir::OpKind::kParameter) out.push_back({op.layer, op.out.num_elements(), weight[i] != 0});
  }
  return out;
}

TEST_CASE("gradient accumulation: one main_grad.add_ per parameter tensor per microbatch") {
  // fp16: read the fresh 2-byte gradient, read and write the 2-byte main_grad = 6 bytes per
  // element, one memory_bound() kernel per tensor; part of the layer's backward.
  const auto cm = one_gpu();
  const auto tensors = parameter_tensors();
  MegatronPlan plan;
  TrainingSetup training;
  training.global_batch_size = 2;
  auto lowered = lower_megatron_plan(tiny_gpt(), training, plan, cm);
  REQUIRE(lowered.ok());
  MegatronPlan fused = plan;
  fused.gradient_accumulation_fusion = true;
  auto lowered_fused = lower_megatron_plan(tiny_gpt(), training, fused, cm);
  REQUIRE(lowered_fused.ok());
  int with_params = 0;
  for (std::size_t l = 0; l < lowered->layers.size(); ++l) {
    double expected = 0;
    double expected_fused = 0;
    for (const auto& t : tensors) {
      if (t.layer != static_cast<std::int64_t>(l)) continue;
      const double s = cm.memory_bound(core::Bytes(6 * t.elements)).value();
      expected += s;
      if (!t.gemm_weight) expected_fused += s;
    }
    const LoweredLayer& L = lowered->layers[l];
    CHECK(L.grad_accumulation_s.value() == doctest::Approx(expected).epsilon(1e-12));
    CHECK(lowered_fused->layers[l].grad_accumulation_s.value() ==
          doctest::Approx(expected_fused).epsilon(1e-12));
    // It is part of the backward: the fused plan's backward is shorter by the difference.
    CHECK(L.costs.backward_s.value() - lowered_fused->layers[l].costs.backward_s.value() ==
          doctest::Approx(expected - expected_fused).epsilon(1e-9));
    if (expected > 0) ++with_params;
    if (L.kind == "transformer") CHECK(expected_fused < expected);  // its linears are fused
  }
  CHECK(with_params >= 3);  // embedding, both blocks (and the head's norm)
}

TEST_CASE("optimizer: Adam's pass plus Megatron's fp16 passes, 26 bytes per parameter more") {
  // The ir's Adam op moves 28 bytes per parameter (fp16 weight + fp32 master/moments read,
  // the same written); Megatron's fp16 optimizer adds zeroing main_grad (2), the fp32 copy
  // of the gradient (2 + 4), unscale (4 + 4), the norm (4), master -> fp16 copy (4 + 2).
  const auto cm = one_gpu();
  const auto tensors = parameter_tensors();
  MegatronPlan plan;
  TrainingSetup training;
  training.global_batch_size = 1;
  auto lowered = lower_megatron_plan(tiny_gpt(), training, plan, cm);
  REQUIRE(lowered.ok());
  for (std::size_t l = 0; l < lowered->layers.size(); ++l) {
    std::int64_t n = 0;
    for (const auto& t : tensors) {
      if (t.layer == static_cast<std::int64_t>(l)) n += t.elements;
    }
    const double expected = n > 0 ? cm.memory_bound(core::Bytes((28 + 26) * n)).value() : 0.0;
    CHECK(lowered->layers[l].costs.optimizer_step_s.value() == doctest::Approx(expected).epsilon(1e-9));
  }
}

TEST_CASE("pipeline: first and last chunk all-reduce the tied embedding's gradient") {
  // tiny GPT (2 blocks), tp 1, pp 2, dp 2 on 4 GPUs of one node: stage s, replica d is GPU
  // 2s + d. Chunk 0 (embedding + block 0) syncs on {0, 1}, chunk 1 (block 1 + head + the
  // tied copy) on {2, 3}; both then all-reduce the 128 × 64 fp16 embedding gradient between
  // GPU 0 and GPU 2 (rank 0 of the first and of the last stage; replica 1's pair {1, 3}
  // runs at the same time).
  auto spec = cluster::make_preset_cluster("dgx-a100-80gb", 1);
  REQUIRE(spec.ok());
  spec->gpus_per_node = 4;
  auto cm_or = cost_model::CostModel::create(*spec, cost_model::default_params());
  REQUIRE(cm_or.ok());
  const auto& cm = *cm_or;
  MegatronPlan plan;
  plan.pp = 2;
  plan.dp = 2;
  TrainingSetup training;
  training.global_batch_size = 4;
  auto lowered = lower_megatron_plan(tiny_gpt(), training, plan, cm);
  REQUIRE(lowered.ok());
  REQUIRE(lowered->problem.stages.size() == 2);
  const std::vector<std::vector<std::int64_t>> dp_ids{{0, 1}, {2, 3}};
  const std::vector<std::vector<std::int64_t>> pair_ids{{0, 2}, {1, 3}};
  auto dp_groups = cm.concurrent_groups(dp_ids);
  REQUIRE(dp_groups.ok());
  auto pair = cm.concurrent_groups(pair_ids);
  REQUIRE(pair.ok());
  const double embedding =
      cm.collective(cost_model::Collective::kAllReduce, core::Bytes(128 * 64 * 2), pair->front()).time.value();
  CHECK(embedding > 0);
  for (std::size_t j = 0; j < 2; ++j) {
    const auto& st = lowered->problem.stages[j];
    REQUIRE(st.grad_sync_s.has_value());
    const double sync =
        cm.collective(cost_model::Collective::kAllReduce, st.grad_sync_bytes, (*dp_groups)[j]).time.value();
    CHECK(st.grad_sync_s->value() == doctest::Approx(sync + embedding).epsilon(1e-12));
  }
}

TEST_CASE("GEMM curve: capped at the best measured efficiency of the fit rows") {
  // cost_model::ComputeCostModel: efficiency = min(max·x/(x + half), ceiling).
  // max 0.9, half 1e9 FLOPs, ceiling 0.8: a 1e12-FLOP GEMM would run at 0.9·1e12/(1.001e12)
  // = 0.899 without the ceiling; with it at 0.8 of peak. A 1e9-FLOP GEMM (0.45) is below it.
  cluster::GpuSpec gpu = cluster::make_preset_cluster("dgx-a100-80gb", 1).value().gpu;
  cost_model::ComputeParams p;
  for (auto& c : p.gemm) c = {0.9, 1e9, 0.8};
  p.hbm_efficiency = 1.0;
  const cost_model::ComputeCostModel model(gpu, p);
  const double peak = gpu.peak(core::DType::kFp16).value();
  // 2·m·n·k = 1e12 FLOPs, 4 ms at 0.8·312 TFLOP/s; its 0.4 GB of operands take 0.2 ms of HBM.
  const cost_model::GemmShape big{10000, 10000, 5000, 1, core::DType::kFp16};
  CHECK(model.gemm_model(big).time.value() == doctest::Approx(1e12 / (0.8 * peak)).epsilon(1e-12));
  const cost_model::GemmShape small{1000, 1000, 500, 1, core::DType::kFp16};  // 1e9 FLOPs
  const double t_small = model.gemm_model(small).time.value();
  const double t_memory = 2.0 * (1000.0 * 500 + 500.0 * 1000 + 1000.0 * 1000) / gpu.hbm_bandwidth.value();
  CHECK(t_small == doctest::Approx(std::max(1e9 / (0.45 * peak), t_memory)).epsilon(1e-12));

  // Calibrated from the shipped A100 profile: the ceiling is its best fit row, MAMF's
  // 271.2 TFLOP/s (validation/data/gemm.csv), so no bf16 GEMM is predicted faster.
  auto shipped = cost_model::calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles");
  REQUIRE(shipped.ok());
  auto params = cost_model::params_for_preset(*shipped, "dgx-a100-80gb");
  REQUIRE(params.ok());
  const auto& bf16 = params->compute.gemm[static_cast<std::size_t>(core::DType::kBf16)];
  CHECK(bf16.ceiling_efficiency == doctest::Approx(271.2e12 / peak).epsilon(1e-9));
  const cost_model::ComputeCostModel a100(gpu, params->compute);
  const cost_model::GemmShape huge{16384, 16384, 16384, 1, core::DType::kBf16};
  CHECK(core::to_tflops_per_s(a100.gemm_model(huge).achieved) == doctest::Approx(271.2).epsilon(1e-9));
}

}  // namespace
}  // namespace alpasim::sim::lowering

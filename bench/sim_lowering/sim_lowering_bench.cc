// Fixed-plan evaluation end to end (lowering + simulation of one iteration):
// - GPT-3 175B on 1,024 A100 GPUs (128 DGX nodes), tp 8, pp 16, dp 8, interleave 2, 64
//   microbatches of 1 sequence per replica (global batch 512). Target (issue 5): < 1 s.
// - Llama 3.1 405B on 16,384 H100 (2,048 DGX nodes), tp 8, pp 16, cp 1, dp 128, sequence
//   8,192, global batch 2,048 (16M tokens: 16 microbatches of 1 per replica), as Meta's
//   paper describes the pre-training layout. Target (issue 16): < 1 s.
#include <benchmark/benchmark.h>

#include <string>

#include "cluster/cluster_spec.h"
#include "core/check.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "sim/lowering/megatron_lowering.h"
#include "sim/pipeline_sim.h"

namespace {

using namespace alpasim;

ir::ModelConfig gpt3_175b() { return ir::gpt_model_config("", 96, 12288, 96, 2048, 51200); }

// `nodes` nodes of a preset, calibrated from its shipped profile as alpa-sim does.
cost_model::CostModel calibrated_cluster(const std::string& preset, std::int64_t nodes) {
  auto shipped = cost_model::calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles");
  ALPASIM_CHECK(shipped.ok()) << shipped.status().message();
  auto params = cost_model::params_for_preset(*shipped, preset);
  ALPASIM_CHECK(params.ok());
  auto spec = cluster::make_preset_cluster(preset, nodes);
  ALPASIM_CHECK(spec.ok());
  auto cm = cost_model::CostModel::create(*spec, *params);
  ALPASIM_CHECK(cm.ok()) << cm.status().message();
  return *cm;
}

void BM_Gpt3_175B_1024Gpus_LowerAndSimulate(benchmark::State& state) {
  // The cost model (calibration, topology) is built once per process by alpa-sim too.
  const cost_model::CostModel cm = calibrated_cluster("dgx-a100-80gb", 128);
  sim::lowering::MegatronPlan plan;
  plan.tp = 8;
  plan.pp = 16;
  plan.dp = 8;
  plan.microbatch_size = 1;
  plan.interleave = 2;
  plan.recompute = ir::RecomputePolicy::kFull;
  sim::lowering::TrainingSetup training;
  training.global_batch_size = 8 * 64;  // 64 microbatches per replica
  training.dtype = core::DType::kBf16;
  double iteration_s = 0;
  std::uint64_t events = 0;
  for (auto _ : state) {
    auto lowered = sim::lowering::lower_megatron_plan(gpt3_175b(), training, plan, cm);
    ALPASIM_CHECK(lowered.ok()) << lowered.status().message();
    auto sim = sim::simulate_pipeline(lowered->problem);
    ALPASIM_CHECK(sim.ok());
    iteration_s = sim->report.iteration_time.value();
    events = sim->report.events_processed;
  }
  // The results are read after the loop, so the work cannot be optimised away (and
  // benchmark 1.7's DoNotOptimize("+m,r") on a double misbehaves with GCC 12 here).
  state.counters["events"] = benchmark::Counter(static_cast<double>(events));
  state.SetLabel("simulated iteration " + std::to_string(iteration_s) + " s");
}
BENCHMARK(BM_Gpt3_175B_1024Gpus_LowerAndSimulate)->Unit(benchmark::kMillisecond);

// Llama 3.1 405B (Meta, "The Llama 3 Herd of Models", 2024, table 3): 126 layers, model
// dimension 16,384, FFN 53,248, 128 heads with 8 key/value heads, vocabulary 128,256.
ir::ModelConfig llama31_405b() {
  ir::TransformerConfig t;
  t.builtin = "llama";
  t.num_layers = 126;
  t.hidden_size = 16384;
  t.num_heads = 128;
  t.num_kv_heads = 8;
  t.seq_len = 8192;
  t.vocab_size = 128256;
  t.ffn_hidden_size = 53248;
  ir::set_architecture_defaults(t);
  t.fused_attention = true;
  ir::ModelConfig m;
  m.spec = t;
  return m;
}

void BM_Llama31_405B_16384Gpus_LowerAndSimulate(benchmark::State& state) {
  const cost_model::CostModel cm = calibrated_cluster("dgx-h100", 2048);
  sim::lowering::MegatronPlan plan;
  plan.tp = 8;
  plan.pp = 16;
  plan.dp = 128;
  plan.microbatch_size = 1;
  plan.sequence_parallel = true;
  plan.zero_stage = 1;
  plan.gradient_accumulation_fusion = true;
  plan.recompute = ir::RecomputePolicy::kNone;
  // 126 blocks on 16 stages: Meta removed one block from the first and the last stage.
  plan.first_stage_layers = 7;
  plan.last_stage_layers = 7;
  sim::lowering::TrainingSetup training;
  training.global_batch_size = 2048;
  training.dtype = core::DType::kBf16;
  double iteration_s = 0;
  std::uint64_t events = 0;
  for (auto _ : state) {
    auto lowered = sim::lowering::lower_megatron_plan(llama31_405b(), training, plan, cm);
    ALPASIM_CHECK(lowered.ok()) << lowered.status().message();
    auto sim = sim::simulate_pipeline(lowered->problem);
    ALPASIM_CHECK(sim.ok()) << sim.status().message();
    iteration_s = sim->report.iteration_time.value();
    events = sim->report.events_processed;
  }
  state.counters["events"] = benchmark::Counter(static_cast<double>(events));
  state.SetLabel("simulated iteration " + std::to_string(iteration_s) + " s");
}
BENCHMARK(BM_Llama31_405B_16384Gpus_LowerAndSimulate)->Unit(benchmark::kMillisecond);

}  // namespace

// Validation of fixed-plan evaluation against published Megatron-LM figures
// (validation/data). These rows are NEVER used to fit anything: the cost model comes
// from the shipped profiles (calibrate_shipped_profiles), the plan from the paper.
//
// Plan choices for Megatron-LM SC'21 Table 1 (Narayanan et al. 2021), stated once here and
// in docs/validation.md:
//  - t, p, d and the global batch as published; 16-bit (fp16) mixed-precision Adam.
//  - Full activation recomputation (Eq. 3 counts four passes, so the published TFLOP/s are
//    hardware FLOP/s: we compare our hardware_tflops_per_gpu).
//  - Microbatch size 1: Table 1 does not give it; §5 / the 175B example scripts of the
//    Megatron-LM repository use 1 for the large models, and we use it for every row.
//  - Interleaved 1F1B (§5.1 "interleaved schedule ... enabled") whenever p > 1, with v the
//    smallest divisor > 1 of the layers per stage (2 where even, 3 for 76.1B's 15 and
//    529.6B's 3 layers per stage); plain data/tensor parallelism when p = 1.
//  - Scatter/gather p2p optimisation (§4.1): each of the t GPUs sends 1/t, then an NVLink
//    all-gather (the lowering's default for tp > 1).
//  - No gradient-accumulation fusion (MegatronPlan's default, the 2021 code): a
//    main_grad.add_ per parameter tensor per microbatch.
#include <doctest/doctest.h>

#include "tests/support/csv.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cluster/cluster_spec.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "cost_model/validated_error.h"
#include "planner/search/search.h"
#include "sim/lowering/megatron_lowering.h"
#include "sim/pipeline_sim.h"
#include "tests/unit/sim_lowering/lowering_fixtures.h"

namespace alpasim::sim::lowering {
namespace {

// RFC 4180 subset: commas, double-quoted fields with "" escapes, no newlines in fields.
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  const auto split = alpasim::testing::split_csv_line;
  std::string line;
  std::getline(in, line);
  const auto header = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto fields = split(line);
    REQUIRE(fields.size() == header.size());
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size(); ++i) row[header[i]] = fields[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

std::int64_t as_int(const std::string& s) { return std::stoll(s); }

// The shipped profiles' calibration for a cluster preset, calibrated once per process.
const cost_model::CalibratedParams& preset_params(const std::string& preset) {
  static const auto shipped = cost_model::calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles");
  REQUIRE(shipped.ok());
  static std::map<std::string, cost_model::CalibratedParams> cache;
  auto it = cache.find(preset);
  if (it == cache.end()) {
    auto p = cost_model::params_for_preset(*shipped, preset);
    REQUIRE(p.ok());
    it = cache.emplace(preset, *p).first;
  }
  return it->second;
}

const cost_model::CalibratedParams& a100_params() { return preset_params("dgx-a100-80gb"); }

// A published row as a fixed plan: `gpus` GPUs of `preset` nodes (8 GPUs each), the shipped
// calibration, Megatron lowering and the pipeline simulator.
struct RowRun {
  std::int64_t num_microbatches = 0;
  PipelineSimulation simulation;
};
// `gpus` GPUs of `preset` as whole nodes (8-GPU DGX/HGX nodes, 4-GPU NVL72 trays).
cluster::ClusterSpec preset_cluster(const std::string& preset, std::int64_t gpus) {
  auto node = cluster::make_preset_cluster(preset, 1);
  REQUIRE(node.ok());
  REQUIRE(gpus % node->gpus_per_node == 0);
  return cluster::make_preset_cluster(preset, gpus / node->gpus_per_node).value();
}

// As lower_and_simulate, with the lowering's error as a value (a row the lowering cannot
// express).
core::Result<RowRun> try_lower_and_simulate(const ir::ModelConfig& model, const TrainingSetup& training,
                                            const MegatronPlan& plan, const std::string& preset,
                                            std::int64_t gpus) {
  auto cm = cost_model::CostModel::create(preset_cluster(preset, gpus), preset_params(preset));
  REQUIRE(cm.ok());
  ALPASIM_ASSIGN_OR_RETURN(LoweredPlan lowered, lower_megatron_plan(model, training, plan, *cm));
  auto sim = simulate_pipeline(lowered.problem);
  REQUIRE(sim.ok());
  return RowRun{lowered.num_microbatches, std::move(sim).value()};
}
RowRun lower_and_simulate(const ir::ModelConfig& model, const TrainingSetup& training,
                          const MegatronPlan& plan, const std::string& preset, std::int64_t gpus) {
  auto run = try_lower_and_simulate(model, training, plan, preset, gpus);
  REQUIRE_MESSAGE(run.ok(), run.status().message());
  return std::move(run).value();
}

using testing::gpt_model;
ir::ModelConfig gpt(std::int64_t layers, std::int64_t hidden, std::int64_t heads,
                    std::int64_t seq, std::int64_t vocab) {
  return gpt_model(layers, hidden, heads, seq, vocab);
}

std::int64_t smallest_divisor_above_one(std::int64_t n) {
  for (std::int64_t d = 2; d <= n; ++d) {
    if (n % d == 0) return d;
  }
  return 1;
}

// A row of SC'21 Table 1 as the plan choices above make it.
struct Sc21Row {
  ir::ModelConfig model;
  TrainingSetup training;
  MegatronPlan plan;
  std::int64_t gpus = 0;
};
Sc21Row sc21_row(const std::map<std::string, std::string>& row) {
  Sc21Row r;
  r.gpus = as_int(row.at("num_gpus"));
  const std::int64_t layers = as_int(row.at("num_layers"));
  r.plan.tp = as_int(row.at("tensor_parallel_t"));
  r.plan.pp = as_int(row.at("pipeline_parallel_p"));
  r.plan.dp = as_int(row.at("data_parallel_d_derived"));
  r.plan.microbatch_size = 1;
  r.plan.interleave = r.plan.pp > 1 ? smallest_divisor_above_one(layers / r.plan.pp) : 1;
  r.plan.recompute = ir::RecomputePolicy::kFull;
  r.training.global_batch_size = as_int(row.at("global_batch_size"));
  r.training.dtype = core::DType::kFp16;
  r.model = gpt(layers, as_int(row.at("hidden_size")), as_int(row.at("attention_heads")),
                as_int(row.at("seq_len")), as_int(row.at("vocab_size")));
  return r;
}

// The ± band `alpa-sim capacity` prints (cost_model/validated_error.cc) is the MAPE a
// validation table measures, rounded up to 0.1 %: it may not fall below the measurement, nor
// stay more than 0.1 % above it once the model improves.
void check_band_covers(const char* gpu, core::DType dtype, double mape,
                       std::string_view block_scaled = "") {
  const cost_model::ValidatedError band = cost_model::validated_error(gpu, dtype, block_scaled);
  std::printf("band for %s %s: %.4f, measured MAPE %.4f\n", gpu,
              block_scaled.empty() ? std::string(core::dtype_name(dtype)).c_str()
                                   : std::string(block_scaled).c_str(),
              band.relative_error, mape);
  CHECK(band.validated);
  CHECK(band.relative_error >= mape);
  CHECK(band.relative_error <= mape + 0.001);
}

// The targets, asserted (no may_fail since the lowering models Megatron's per-
// microbatch gradient accumulation and its fp16 optimizer passes, and the GEMM curve is
// capped at the best measured efficiency): measured MAPE 9.7 %, worst row +15.2 %
// (GPT-1008B; 9.9 % / +15.4 % before the unfused loss kernel was priced, 2026-11-27, stop
// 40; 9.3 % / +14.0 % before the attention dropout mask and the vocabulary-parallel table
// gradient were priced split, 2026-11-26). Nothing was tuned to these rows;
// docs/validation.md shows the table.
TEST_CASE("Megatron-LM SC'21 table 1: TFLOP/s per GPU within 10% MAPE, no row worse than 20%") {
  const auto rows = read_csv(ALPASIM_SOURCE_DIR "/validation/data/megatron_sc21_table1.csv");
  REQUIRE(rows.size() == 10);
  double sum_abs = 0;
  double worst = 0;
  std::printf("%-11s %3s %3s %3s %5s %3s %5s %10s %10s %8s %9s %8s\n", "model", "t", "p", "d",
              "batch", "v", "B", "published", "predicted", "error", "iter_s", "bubble");
  for (const auto& row : rows) {
    const Sc21Row r = sc21_row(row);
    const MegatronPlan& plan = r.plan;
    const TrainingSetup& training = r.training;
    const RowRun run = lower_and_simulate(r.model, training, plan, "dgx-a100-80gb", r.gpus);
    const double published = std::stod(row.at("achieved_tflops_per_gpu"));
    const double predicted = core::to_tflops_per_s(run.simulation.report.hardware_flops_per_gpu);
    const double error = (predicted - published) / published;
    sum_abs += std::abs(error);
    worst = std::max(worst, std::abs(error));
    std::printf("%-11s %3lld %3lld %3lld %5lld %3lld %5lld %10.1f %10.1f %+7.1f%% %9.3f %7.1f%%\n",
                row.at("model").c_str(), static_cast<long long>(plan.tp),
                static_cast<long long>(plan.pp), static_cast<long long>(plan.dp),
                static_cast<long long>(training.global_batch_size),
                static_cast<long long>(plan.interleave),
                static_cast<long long>(run.num_microbatches), published, predicted,
                error * 100.0, run.simulation.report.iteration_time.value(),
                run.simulation.report.bubble_fraction * 100.0);
    CHECK(run.simulation.report.overflows.empty());
  }
  const double mape = sum_abs / static_cast<double>(rows.size());
  std::printf("MAPE %.1f%%, worst row %.1f%%\n", mape * 100.0, worst * 100.0);
  CHECK(mape <= 0.10);
  CHECK(worst <= 0.20);
  check_band_covers("a100-80gb", core::DType::kFp16, mape);
}

// A Korthikanti et al. 2022 Table 4 experiment as a plan: t = 8, microbatch 4, with the
// experiment's sequence parallelism and recomputation, on the one-layer 22B model.
struct KorthikantiRun {
  MegatronPlan plan;
  TrainingSetup training;
};
KorthikantiRun korthikanti_run(const std::string& experiment) {
  KorthikantiRun k;
  k.plan.tp = 8;
  k.plan.microbatch_size = 4;
  k.plan.sequence_parallel = experiment.find("Sequence") != std::string::npos;
  k.plan.recompute = experiment == "Baseline with recompute" ? ir::RecomputePolicy::kFull
                     : experiment.rfind("Selective", 0) == 0 ? ir::RecomputePolicy::kSelective
                                                             : ir::RecomputePolicy::kNone;
  k.training.global_batch_size = 4;
  k.training.dtype = core::DType::kFp16;
  return k;
}
ir::ModelConfig korthikanti_22b_layer() { return gpt(1, 6144, 64, 2048, 51200); }

TEST_CASE("Korthikanti 2022 table 4: one 22B layer's forward/backward within 15%") {
  // h = 6144, a = 64, s = 2048, microbatch 4, t = 8 on one DGX A100 node, a single layer.
  const auto rows =
      read_csv(ALPASIM_SOURCE_DIR "/validation/data/korthikanti_2022_table4_per_layer.csv");
  REQUIRE(rows.size() == 5);
  auto spec = cluster::make_preset_cluster("dgx-a100-80gb", 1);
  REQUIRE(spec.ok());
  auto cm = cost_model::CostModel::create(*spec, a100_params());
  REQUIRE(cm.ok());
  double worst = 0;
  std::printf("%-28s %8s %8s %8s %8s %8s %8s\n", "experiment", "fwd_pub", "fwd_pred", "err",
              "bwd_pub", "bwd_pred", "err");
  for (const auto& row : rows) {
    const std::string& name = row.at("experiment");
    const KorthikantiRun k = korthikanti_run(name);
    auto lowered = lower_megatron_plan(korthikanti_22b_layer(), k.training, k.plan, *cm);
    REQUIRE_MESSAGE(lowered.ok(), lowered.status().message());
    const LoweredLayer& block = lowered->layers.at(1);
    REQUIRE(block.kind == "transformer");
    const double fwd_ms = block.costs.forward_s.value() * 1e3;
    // Table 4's backward includes the recomputation.
    const double bwd_ms = (block.costs.backward_s + block.recompute_s).value() * 1e3;
    const double fwd_pub = std::stod(row.at("forward_ms"));
    const double bwd_pub = std::stod(row.at("backward_ms"));
    const double fe = (fwd_ms - fwd_pub) / fwd_pub;
    const double be = (bwd_ms - bwd_pub) / bwd_pub;
    worst = std::max({worst, std::abs(fe), std::abs(be)});
    std::printf("%-28s %8.2f %8.2f %+7.1f%% %8.2f %8.2f %+7.1f%%\n", name.c_str(), fwd_pub, fwd_ms,
                fe * 100.0, bwd_pub, bwd_ms, be * 100.0);
  }
  std::printf("worst per-layer error %.1f%%\n", worst * 100.0);
  CHECK(worst <= 0.15);
}

// Megatron-Core's H100 weak-scaling table (Megatron-LM README, r0.8.0, 2024; issue 20 (7)):
// 9 runs from 48 to 6,144 H100. Plan choices, fixed before the first run and stated in
// docs/validation.md: t, p, d, global batch, layers, hidden, heads, sequence 4,096 and
// vocabulary 131,072 as published; a GPT block (4h MLP: the table gives no FFN size); bf16
// mixed-precision Adam with Megatron-Core's standard performance flags: distributed
// optimizer (ZeRO-1), sequence parallelism when t > 1, flash attention, no recomputation,
// gradient-accumulation fusion; microbatch 1 and the SC'21 interleaving rule above (neither
// is published). The published figure is model FLOP/s (41 % MFU = 408.8 of 989 TFLOP/s), so
// it is compared with model_tflops_per_gpu. The source says the runs overlapped their
// communication (--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap); with
// `overlaps` the plan sets those flags (tp_comm_overlap only where t > 1, since it needs
// sequence parallelism) and Megatron-Core's default overlap_p2p_comm. Without, nothing is
// overlapped (the first evaluation, 2026-11-25). Target (issue 16, H100 group): MAPE <= 8 %,
// no row worse than 20 %. This table is no longer held out: the overlap model was written
// after its first evaluation had been seen (its closed forms come from Megatron's
// mechanism, no constant was fitted to these rows).
struct H100Row {
  std::string model;
  double published = 0, predicted = 0;
};

// Every H100 row of the table, evaluated with the plan choices above; prints the table.
std::vector<H100Row> h100_weak_scaling_rows(bool overlaps) {
  const auto all = read_csv(ALPASIM_SOURCE_DIR "/validation/data/megatron_readme_tables.csv");
  std::vector<H100Row> out;
  std::printf("%-6s %3s %3s %3s %5s %5s %3s %10s %10s %8s %9s %8s\n", "model", "t", "p", "d", "GPUs",
              "batch", "v", "published", "predicted", "error", "iter_s", "bubble");
  for (const auto& row : all) {
    if (row.at("table").rfind("H100 weak scaling", 0) != 0) continue;
    const std::int64_t gpus = as_int(row.at("num_gpus"));
    const std::int64_t layers = as_int(row.at("num_layers"));
    MegatronPlan plan;
    plan.tp = as_int(row.at("tensor_parallel"));
    plan.pp = as_int(row.at("pipeline_parallel"));
    plan.dp = as_int(row.at("data_parallel"));
    REQUIRE(plan.tp * plan.pp * plan.dp == gpus);
    plan.microbatch_size = 1;
    plan.interleave = plan.pp > 1 ? smallest_divisor_above_one(layers / plan.pp) : 1;
    plan.recompute = ir::RecomputePolicy::kNone;
    plan.sequence_parallel = plan.tp > 1;
    plan.zero_stage = 1;
    plan.gradient_accumulation_fusion = true;
    plan.tp_comm_overlap = overlaps && plan.tp > 1;
    plan.overlap_grad_reduce = overlaps;
    plan.overlap_param_gather = overlaps;
    plan.overlap_p2p_comm = overlaps;
    TrainingSetup training;
    training.global_batch_size = as_int(row.at("global_batch_size"));
    training.dtype = core::DType::kBf16;
    ir::ModelConfig model = gpt(layers, as_int(row.at("hidden_size")), as_int(row.at("attention_heads")),
                                as_int(row.at("seq_len")), as_int(row.at("vocab_size")));
    std::get<ir::TransformerConfig>(model.spec).fused_attention = true;
    const RowRun run = lower_and_simulate(model, training, plan, "dgx-h100", gpus);
    CHECK(run.simulation.report.overflows.empty());
    H100Row r;
    r.model = row.at("model");
    r.published = std::stod(row.at("achieved_tflops_per_gpu"));
    r.predicted = core::to_tflops_per_s(run.simulation.report.model_flops_per_gpu);
    const double error = (r.predicted - r.published) / r.published;
    std::printf("%-6s %3lld %3lld %3lld %5lld %5lld %3lld %10.1f %10.1f %+7.1f%% %9.3f %7.1f%%\n",
                r.model.c_str(), static_cast<long long>(plan.tp), static_cast<long long>(plan.pp),
                static_cast<long long>(plan.dp), static_cast<long long>(gpus),
                static_cast<long long>(training.global_batch_size), static_cast<long long>(plan.interleave),
                r.published, r.predicted, error * 100.0, run.simulation.report.iteration_time.value(),
                run.simulation.report.bubble_fraction * 100.0);
    out.push_back(r);
  }
  return out;
}

TEST_CASE("Megatron-Core H100 weak scaling (README table): all 9 runs evaluate, fit memory, finite") {
  for (const bool overlaps : {false, true}) {
    std::printf("communication overlaps: %s\n", overlaps ? "as published" : "none");
    const auto rows = h100_weak_scaling_rows(overlaps);
    REQUIRE(rows.size() == 9);
    double sum_abs = 0;
    for (const auto& r : rows) {
      CAPTURE(r.model);
      CHECK(std::isfinite(r.predicted));
      CHECK(r.predicted > 0);
      sum_abs += std::abs(r.predicted - r.published) / r.published;
    }
    if (overlaps) check_band_covers("h100-sxm", core::DType::kBf16, sum_abs / 9);
  }
}

// The target is NOT met (2026-11-25: without overlaps MAPE 22.7 %, worst -42.9 %; with the
// overlaps the source names MAPE 16.1 %, worst -30.9 % (1.7B, pure data parallel); since
// flash attention is priced as one kernel (2026-11-26) MAPE 33.6 %, worst +48.6 % (462B),
// every row predicted faster; since Hopper's GEMM curves are fitted to the measured H200
// (2026-11-27) MAPE 23.4 %, worst +35.9 %; docs/validation.md). may_fail keeps the table and the two target checks in every run
// without failing the suite (the test above is not optional).
TEST_CASE("Megatron-Core H100 weak scaling (README table): model TFLOP/s per GPU, MAPE <= 8%, no row worse than 20%" *
          doctest::may_fail()) {
  const auto rows = h100_weak_scaling_rows(/*overlaps=*/true);
  REQUIRE(rows.size() == 9);
  double sum_abs = 0, worst = 0;
  for (const auto& r : rows) {
    const double error = std::abs(r.predicted - r.published) / r.published;
    sum_abs += error;
    worst = std::max(worst, error);
  }
  const double mape = sum_abs / static_cast<double>(rows.size());
  std::printf("MAPE %.1f%%, worst row %.1f%%\n", mape * 100.0, worst * 100.0);
  CHECK(mape <= 0.08);
  CHECK(worst <= 0.20);
}

// NVIDIA's published H100 pre-training runs (validation/data/modern/nemo_perf.csv: NeMo
// performance summaries 24.07 and Megatron-Bridge 25.09-26.06, Megatron-LM examples/llama;
// issue 16's H100 group). Plan choices, fixed before the first run: dense rows only (MoE and
// the hybrid Mamba model are not expressible), pre-training (SFT/LoRA rows freeze weights,
// which the lowering does not model), no FSDP, a published step time, and an architecture
// alpa-sim builds: Llama rows as "llama" (RMSNorm, SwiGLU with the published FFN size,
// rotary, GQA with the published KV heads, untied embeddings), GPT-3 rows as "gpt" (4h
// MLP), Nemotron-4 rows as "nemotron" (squared-ReLU MLP, since stop 41; Nemotron-3 rows give no
// architecture and are listed as not expressible). Every run: flash
// attention, sequence parallelism when tp > 1, the distributed optimizer (ZeRO-1), gradient-
// accumulation fusion, no recomputation, and the overlaps NVIDIA's recipes turn on
// (tp_comm_overlap where tp > 1, overlap_grad_reduce, overlap_param_gather, overlap_p2p_comm);
// tp, pp, vp, cp, dp, microbatch, global batch, sequence and precision as published. Step
// time is compared (tokens/s/GPU is derived from it in the source). Target (issue 16, H100
// group): MAPE <= 8 %, no row worse than 20 %.
struct ModernRow {
  std::string id;
  double published_s = 0, predicted_s = 0;
  bool fits = true;  ///< the plan fits the H100's usable memory in the simulation
  bool fp8 = false;  ///< trained in fp8 (else bf16)
  std::string precision;  ///< the row's: "bf16", "fp8", "mxfp8" or "nvfp4"
};

// NeMo's GPT-3 rows leave columns blank (added 2026-11-27, stop 39, before any of these
// rows had a result; validation/data/modern/README.md, "GPT-3 architectures"): the 5B and
// 20B models as NeMo-Framework-Launcher's training configs give them (24 layers x 4,096
// wide, 32 heads; 44 x 6,144, 48 heads; FFN 4h, 2,048 tokens), and every GPT-3 row's
// vocabulary: the GPT-2 BPE tokenizer those configs name (50,257 tokens), padded as Megatron
// pads it (make_vocab_size_divisible_by 128, times tp). A column the row gives is kept.
void fill_gpt3_architecture(std::map<std::string, std::string>* row) {
  std::map<std::string, std::string>& r = *row;
  if (r.at("model").rfind("GPT-3", 0) != 0) return;
  auto fill = [&](const char* key, std::int64_t value) {
    if (r.at(key).empty()) r[key] = std::to_string(value);
  };
  if (r.at("model").rfind("GPT-3 5B", 0) == 0) {
    fill("layers", 24);
    fill("hidden", 4096);
    fill("heads", 32);
  } else if (r.at("model").rfind("GPT-3 20B", 0) == 0) {
    fill("layers", 44);
    fill("hidden", 6144);
    fill("heads", 48);
  }
  if (r.at("tp").empty()) return;
  const std::int64_t multiple = 128 * std::stoll(r.at("tp"));
  fill("vocab", (50257 + multiple - 1) / multiple * multiple);
}

// The rows of `gpu_type` ("H100", "B200") evaluated on `preset`.
// `moe`: the mixture-of-experts rows instead of the dense ones. Mixtral, Qwen3 MoE and
// GPT-OSS rows are expressible (builtin "mixtral": every layer MoE, the row's experts, top-k and expert
// FFN width, Qwen3's head_dim from the row's attention note, capacity factor 1 for the
// sources' force-balanced dropless routing, ep from the row and etp 1 where the row leaves
// it blank: an assumption, Megatron-Bridge's MoE recipes set it so); the other
// architectures (MLA, shared experts, hybrid Mamba) are listed.
std::vector<ModernRow> nemo_rows(const std::string& gpu_type, const std::string& preset,
                                 std::vector<std::string>* not_expressible, bool moe = false) {
  const auto all = read_csv(ALPASIM_SOURCE_DIR "/validation/data/modern/nemo_perf.csv");
  std::vector<ModernRow> out;
  std::printf("%-48s %-6s %2s %2s %2s %2s %4s %5s %4s %10s %10s %8s %s\n", "row", "prec", "t", "p", "v",
              "c", "d", "GPUs", "gbs", "published", "predicted", "error", "memory");
  auto number = [](const std::string& s, std::int64_t fallback) {
    return s.empty() ? fallback : std::stoll(s);
  };
  for (const auto& published : all) {
    std::map<std::string, std::string> row = published;
    fill_gpt3_architecture(&row);
    if (row.at("gpu_type") != gpu_type || row.at("moe_experts").empty() != !moe ||
        row.at("task") != "pretrain" || !(row.at("fsdp").empty() || row.at("fsdp") == "0") ||
        row.at("step_time_s").empty()) {
      continue;
    }
    const std::string& name = row.at("model");
    const bool llama = !moe && name.rfind("Llama", 0) == 0;
    const bool gpt3 = !moe && name.rfind("GPT-3", 0) == 0;
    // Nemotron-4 (added 2026-11-27, stop 41, with the squared-ReLU builtin; these rows had
    // no result before): builtin "nemotron" with the row's KV heads and FFN width. Left out:
    // its partial rotary (half of each head rotated; alpa-sim rotates all of it).
    // Nemotron-3 8B and 22B give no architecture (not expressible below).
    const bool nemotron4 = !moe && name.rfind("Nemotron-4", 0) == 0;
    // GPT-OSS (added 2026-11-27 with sliding windows, its first run): every layer MoE with
    // SwiGLU experts, alternating sliding-window (128) and full attention, q/k/v biases.
    // Left out: its attention sinks (one logit per head), its expert biases and its clamped
    // SwiGLU (elementwise), none priced.
    const bool gpt_oss = moe && name.rfind("GPT-OSS", 0) == 0;
    // DeepSeek-V3 and Kimi K2 (added 2026-11-27 with multi-head latent attention, shared
    // experts and dense first blocks, their first run): the MLA ranks from the row's note,
    // Kimi K2's ("DeepSeek-V3 style") taken as DeepSeek-V3's, which its public config
    // matches; the dense blocks of the row's ffn_hidden; moe_shared_experts x the expert
    // width as one shared expert. Left out: DeepSeek's multi-token-prediction module (the
    // note says "in original training"; whether these runs had it, the source does not say).
    const bool mla = moe && (name.rfind("DeepSeek-V3", 0) == 0 || name.rfind("Kimi K2", 0) == 0);
    const bool mixtral_like = moe && (name.rfind("Mixtral", 0) == 0 || name.rfind("Qwen3", 0) == 0 || gpt_oss || mla);
    if (!llama && !gpt3 && !nemotron4 && !mixtral_like) {
      not_expressible->push_back(row.at("row_id") + ": architecture (" + name + ")");
      continue;
    }
    std::string missing;
    for (const char* key : {"layers", "hidden", "heads", "seq_len", "vocab"}) {
      if (row.at(key).empty()) missing += std::string(missing.empty() ? "" : ", ") + key;
    }
    if (!missing.empty()) {
      not_expressible->push_back(row.at("row_id") + ": the row does not give " + missing);
      continue;
    }
    ir::TransformerConfig t;
    t.builtin = mixtral_like ? "mixtral" : llama ? "llama" : nemotron4 ? "nemotron" : "gpt";
    t.num_layers = as_int(row.at("layers"));
    t.hidden_size = as_int(row.at("hidden"));
    t.num_heads = as_int(row.at("heads"));
    t.num_kv_heads = number(row.at("kv_heads"), t.num_heads);
    t.seq_len = as_int(row.at("seq_len"));
    t.vocab_size = as_int(row.at("vocab"));
    t.ffn_hidden_size = number(row.at("ffn_hidden"), 4 * t.hidden_size);
    if (mixtral_like) {
      t.num_experts = as_int(row.at("moe_experts"));
      t.top_k = as_int(row.at("moe_topk"));
      t.ffn_hidden_size = as_int(row.at("moe_expert_ffn"));
      t.moe_layer_interval = 1;
      t.capacity_factor = 1.0;
      const std::string& note = row.at("attention_note");
      if (const auto at = note.find("head_dim "); at != std::string::npos) {
        t.head_dim = std::stoll(note.substr(at + 9));
      }
    }
    ir::set_architecture_defaults(t);
    if (mla) {
      const std::string& note = row.at("attention_note");
      auto after = [&](const std::string& key, std::int64_t fallback) -> std::int64_t {
        const auto at = note.find(key + " ");
        return at == std::string::npos ? fallback : std::stoll(note.substr(at + key.size() + 1));
      };
      t.q_lora_rank = after("q_lora", 1536);
      t.kv_lora_rank = after("kv_lora", 512);
      t.qk_nope_head_dim = after("qk_nope", 128);
      t.qk_rope_head_dim = after("qk_rope", 64);
      t.v_head_dim = after("v", 128);
      t.num_kv_heads = t.num_heads;
      t.head_dim = 0;
      t.first_dense_layers = note.find("first layer dense") != std::string::npos ? 1 : after("first", 0);
      t.dense_ffn_hidden_size = number(row.at("ffn_hidden"), 0);
      t.shared_expert_ffn_hidden_size = number(row.at("moe_shared_experts"), 0) * t.ffn_hidden_size;
    }
    if (gpt_oss) {
      const std::string& note = row.at("attention_note");
      const auto at = note.find("sliding-window(");
      if (at == std::string::npos) {
        not_expressible->push_back(row.at("row_id") + ": the row's attention note gives no sliding window");
        continue;
      }
      t.sliding_window = std::stoll(note.substr(at + 15));
      t.sliding_window_pattern = note.find("alternating") != std::string::npos ? 2 : 0;
      t.qkv_bias = true;
    }
    t.fused_attention = true;
    // Megatron-Core's bias_swiglu_fusion (on by default; added 2026-11-26, sixth stop, with
    // these rows in view: before, the SiLU's output was stored as well).
    t.fused_swiglu = true;
    // The loss (added 2026-11-27, stop 40, with these tables in view): NeMo's and
    // Megatron-Bridge's GPT configs set cross_entropy_loss_fusion; NeMo's performance
    // scripts (scripts/performance/helpers.py, set_perf_optimization_configs) and Bridge's
    // performance recipes set cross_entropy_fusion_impl "te", an option of Megatron-Core
    // releases from spring 2025: containers before 25.04 are taken to run the fused
    // "native" kernel, later ones TE's (not verified per container: Megatron-Core 0.18,
    // June 2026, refuses TE's in Megatron-LM's training arguments and warns in its config).
    // Megatron-LM's example scripts keep Megatron-Core's default, the unfused loss.
    if (row.at("source_family").rfind("nemo_", 0) == 0) {
      const std::string& version = row.at("framework_version");  // "NeMo container 25.04.rc2"
      const auto at = version.find("container ");
      const std::string yymm = at == std::string::npos ? "" : version.substr(at + 10, 5);
      t.loss_kernel = yymm.size() == 5 && yymm < "25.04" ? ir::LossKernel::kNativeFused : ir::LossKernel::kTeFused;
    }
    ir::ModelConfig model;
    model.spec = t;
    MegatronPlan plan;
    plan.tp = as_int(row.at("tp"));
    plan.pp = as_int(row.at("pp"));
    plan.cp = number(row.at("cp"), 1);
    plan.dp = as_int(row.at("dp"));
    plan.interleave = number(row.at("vp"), 1);
    plan.microbatch_size = as_int(row.at("mbs"));
    if (mixtral_like) {
      plan.ep = number(row.at("ep"), 1);
      plan.etp = number(row.at("etp"), 1);
    }
    plan.sequence_parallel = plan.tp > 1;
    plan.zero_stage = 1;
    plan.gradient_accumulation_fusion = true;
    plan.tp_comm_overlap = plan.tp > 1;
    plan.overlap_grad_reduce = true;
    plan.overlap_param_gather = true;
    plan.overlap_p2p_comm = true;
    // Added after the first run, before these rows had a result (they were not expressible
    // then): blocks that do not split evenly into p·v chunks use Megatron's embedding- and
    // loss-accounting split (account_for_{embedding,loss}_in_pipeline_split, which the
    // Megatron-Bridge performance guide recommends for large vocabularies). That the 405B
    // runs used it is our assumption: 126 blocks split into 64 chunks no other way.
    const std::int64_t chunks = plan.pp * plan.interleave;
    if (mla && (t.num_layers + 2) % chunks != 0) {
      // DeepSeek-V3's 61 blocks split into no even layout; Megatron-Bridge gives these runs a
      // --pipeline-model-parallel-layout the source does not print. Our assumption: the
      // embedding, the 61 blocks and the loss as 63 layers as even as possible over the
      // p·v chunks, earlier chunks taking the remainder ("Ettt|tttt|...|ttL").
      const std::int64_t units = t.num_layers + 2, base = units / chunks, extra = units % chunks;
      std::string layout;
      for (std::int64_t c = 0; c < chunks; ++c) {
        std::int64_t n = base + (c < extra ? 1 : 0);
        if (c > 0) layout += '|';
        if (c == 0) {
          layout += 'E';
          --n;
        }
        const bool last = c + 1 == chunks;
        layout += std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, n - (last ? 1 : 0))), 't');
        if (last) layout += 'L';
      }
      plan.pipeline_layout = layout;
    } else if (t.num_layers % chunks != 0) {
      plan.account_for_embedding = true;
      plan.account_for_loss = true;
    }
    TrainingSetup training;
    training.global_batch_size = as_int(row.at("gbs"));
    const std::string& precision = row.at("precision");
    const auto block_scaled = parse_block_scaled(precision);
    if (precision != "fp8" && precision != "bf16" && !(block_scaled && !precision.empty())) {
      not_expressible->push_back(row.at("row_id") + ": precision " + precision);
      continue;
    }
    training.dtype = precision == "fp8" ? core::DType::kFp8 : core::DType::kBf16;
    training.block_scaled = block_scaled.value_or(BlockScaled::kNone);
    const std::int64_t gpus = as_int(row.at("num_gpus"));
    auto run = try_lower_and_simulate(model, training, plan, preset, gpus);
    if (!run.ok()) {
      not_expressible->push_back(row.at("row_id") + ": " + run.status().message());
      continue;
    }
    ModernRow r;
    r.fits = run->simulation.report.overflows.empty();
    r.id = row.at("row_id");
    r.published_s = std::stod(row.at("step_time_s"));
    r.fp8 = training.dtype == core::DType::kFp8;
    r.precision = precision;
    r.predicted_s = run->simulation.report.iteration_time.value();
    std::printf("%-48s %-6s %2lld %2lld %2lld %2lld %4lld %5lld %4lld %10.3f %10.3f %+7.1f%% %s\n",
                r.id.substr(0, 48).c_str(), precision.c_str(), static_cast<long long>(plan.tp),
                static_cast<long long>(plan.pp), static_cast<long long>(plan.interleave),
                static_cast<long long>(plan.cp), static_cast<long long>(plan.dp),
                static_cast<long long>(gpus), static_cast<long long>(training.global_batch_size),
                r.published_s, r.predicted_s, (r.predicted_s - r.published_s) / r.published_s * 100.0,
                r.fits ? "fits" : "OVER");
    out.push_back(r);
  }
  for (const auto& n : *not_expressible) std::printf("not expressible: %s\n", n.c_str());
  return out;
}

std::vector<ModernRow> nemo_h100_rows(std::vector<std::string>* not_expressible) {
  return nemo_rows("H100", "dgx-h100", not_expressible);
}

// Step-time error of a set of rows: mean and worst |predicted / published - 1|, and how many
// were predicted over memory.
struct TableError {
  double mape = 0, worst = 0;
  std::size_t over = 0;
};
TableError table_error(const std::vector<ModernRow>& rows) {
  TableError e;
  for (const auto& r : rows) {
    const double error = std::abs(r.predicted_s - r.published_s) / r.published_s;
    e.mape += error;
    e.worst = std::max(e.worst, error);
    if (!r.fits) ++e.over;
  }
  if (!rows.empty()) e.mape /= static_cast<double>(rows.size());
  return e;
}

TEST_CASE("NVIDIA H100 pre-training runs (NeMo / Megatron-Bridge): rows evaluate and are finite") {
  std::vector<std::string> skipped;
  const auto rows = nemo_h100_rows(&skipped);
  CHECK(rows.size() >= 10);
  std::vector<ModernRow> fp8;
  for (const auto& r : rows) {
    CAPTURE(r.id);
    CHECK(std::isfinite(r.predicted_s));
    CHECK(r.predicted_s > 0);
    if (r.fp8) fp8.push_back(r);
  }
  REQUIRE_FALSE(fp8.empty());
  std::printf("fp8 rows: %zu\n", fp8.size());
  check_band_covers("h100-sxm", core::DType::kFp8, table_error(fp8).mape);
}

// may_fail: the table and the target checks print in every run (the test above is not
// optional); docs/validation.md holds the measured numbers.
TEST_CASE("NVIDIA H100 pre-training runs: step time MAPE <= 8%, no row worse than 20%" *
          doctest::may_fail()) {
  std::vector<std::string> skipped;
  const auto rows = nemo_h100_rows(&skipped);
  REQUIRE_FALSE(rows.empty());
  const TableError e = table_error(rows);
  std::printf("H100 NeMo/Megatron-Bridge: %zu rows, MAPE %.1f%%, worst row %.1f%%; %zu predicted over "
              "memory; %zu not expressible\n",
              rows.size(), e.mape * 100.0, e.worst * 100.0, e.over, skipped.size());
  CHECK(e.over == 0);  // NVIDIA ran every one of them
  CHECK(e.mape <= 0.08);
  CHECK(e.worst <= 0.20);
}


// Rows of one GPU grouped by precision ("fp8", "mxfp8", ...): every row evaluates to a
// finite time; each group's MAPE, worst row and memory verdicts are printed under `label`.
std::map<std::string, std::vector<ModernRow>> precision_groups(const std::string& label,
                                                               const std::vector<ModernRow>& rows,
                                                               std::size_t not_expressible) {
  std::map<std::string, std::vector<ModernRow>> groups;
  for (const auto& r : rows) {
    CAPTURE(r.id);
    CHECK(std::isfinite(r.predicted_s));
    CHECK(r.predicted_s > 0);
    groups[r.precision].push_back(r);
  }
  for (const auto& [precision, group] : groups) {
    const TableError e = table_error(group);
    std::printf("%s %s NeMo/Megatron-Bridge: %zu rows, MAPE %.1f%%, worst row %.1f%%; %zu predicted "
                "over memory\n",
                label.c_str(), precision.c_str(), group.size(), e.mape * 100.0, e.worst * 100.0, e.over);
  }
  std::printf("%s: %zu rows evaluated, %zu not expressible\n", label.c_str(), rows.size(), not_expressible);
  return groups;
}

// A Blackwell GPU's published dense rows, one group per precision (fp8, mxfp8, nvfp4); each
// group's MAPE is the capacity band of `band_gpu` in that precision
// (cost_model/validated_error.cc).
void blackwell_rows(const char* gpu_type, const char* preset, const char* band_gpu) {
  std::vector<std::string> skipped;
  const auto rows = nemo_rows(gpu_type, preset, &skipped);
  REQUIRE(rows.size() >= 4);
  const auto groups = precision_groups(gpu_type, rows, skipped.size());
  REQUIRE(groups.count("fp8") == 1);
  for (const auto& [precision, group] : groups) {
    CAPTURE(precision);
    const bool block_scaled = precision == "mxfp8" || precision == "nvfp4";
    REQUIRE((precision == "fp8" || block_scaled));  // the bands are fp8 and block-scaled ones
    check_band_covers(band_gpu, block_scaled ? core::DType::kBf16 : core::DType::kFp8,
                      table_error(group).mape, block_scaled ? precision : "");
  }
}

// NVIDIA's published B200 pre-training runs (the same file and the same plan choices as the
// H100 rows above), evaluated on the dgx-b200 preset with its derived profile (B200 MAMF and
// NVLink5 all-reduce rows; network inherited from dgx-h100). Held out: the fp8 rows were
// never run before the preset existed, the mxfp8 rows before the format existed, and nothing
// was changed after seeing them (the fp8 rows moved once since, when NVLS was modelled on
// B200: docs/validation.md).
TEST_CASE("NVIDIA B200 pre-training runs: rows evaluate and are finite, MAPE printed") {
  blackwell_rows("B200", "dgx-b200", "b200");
}

// The sources' mixture-of-experts rows that this version can express (Mixtral, Qwen3 MoE;
// GPT-OSS since 2026-11-27), per GPU and precision, with expert parallelism as published. The first run was held out;
// the token-routing pricing changed after it (docs/validation.md gives both). The strict
// checks are that each row evaluates to a finite time; MAPEs and memory verdicts are printed
// (no target: the issue asks for them as they are).
TEST_CASE("NVIDIA MoE pre-training runs (Mixtral, Qwen3 MoE, GPT-OSS, DeepSeek-V3, Kimi K2): rows evaluate, MAPE printed per GPU and precision") {
  std::size_t evaluated = 0, gpt_oss = 0, deepseek_kimi = 0;
  for (const auto& [gpu_type, preset] :
       {std::pair<const char*, const char*>{"H100", "dgx-h100"}, {"B200", "dgx-b200"},
        {"B300", "dgx-b300"}, {"GB200", "gb200-nvl72"}, {"GB300", "gb300-nvl72"}}) {
    std::vector<std::string> skipped;
    const auto rows = nemo_rows(gpu_type, preset, &skipped, /*moe=*/true);
    precision_groups(std::string(gpu_type) + " MoE", rows, skipped.size());
    evaluated += rows.size();
    for (const auto& r : rows) {
      gpt_oss += r.id.find("GPT-OSS") != std::string::npos ? 1 : 0;
      deepseek_kimi += r.id.find("DeepSeek-V3") != std::string::npos || r.id.find("Kimi") != std::string::npos ? 1 : 0;
    }
  }
  CHECK(evaluated >= 20);
  CHECK(gpt_oss == 31);  // every GPT-OSS row of the sources (sliding windows, 2026-11-27)
  // 36 of the 38 DeepSeek-V3 / Kimi K2 rows with a step time (MLA, 2026-11-27): not the
  // H100 row (tp 2 with MLA is refused) nor GB200's "alt" (ep 64 does not divide tp·dp 32).
  CHECK(deepseek_kimi == 36);
}

// NVIDIA's published GB200 and GB300 NVL72 pre-training runs (the same file and plan choices),
// on the gb200-nvl72 / gb300-nvl72 presets: 4-GPU trays in 18-tray NVLink domains, the
// GPUs' datasheet peaks, dgx-b200's calibration (no GB200 row was fitted). Held out: the fp8
// rows were run once after the presets were written, the mxfp8 and nvfp4 rows once after
// those formats were; nothing was changed after seeing them.
TEST_CASE("NVIDIA GB200 NVL72 pre-training runs: rows evaluate and are finite, MAPE printed") {
  blackwell_rows("GB200", "gb200-nvl72", "gb200");
}

TEST_CASE("NVIDIA GB300 NVL72 pre-training runs: rows evaluate and are finite, MAPE printed") {
  blackwell_rows("GB300", "gb300-nvl72", "gb300");
}

// Issue 15, "one evaluator": a Megatron plan written as a plan file with Megatron's
// per-operator layouts (megatron_plan_file) and priced by the evaluator of searched plans
// (planner::evaluate_plan) must give sim/lowering's iteration time and peak memory within
// 2 % on every row of SC'21 Table 1 and Korthikanti Table 4; that equality is what would
// carry the Megatron validation over to searched plans. The rows, plans and cost model are
// those of the two tests above (Table 4 as a whole iteration of its one-layer model: the
// evaluator has no per-layer times). may_fail: the target is not met yet (docs/validation.md gives the
// table); the strict checks are that every row is written, evaluates and is finite.
struct OneEvaluatorRow {
  std::string model;
  double lowering_s = 0, evaluator_s = 0;
  std::int64_t lowering_peak = 0, evaluator_peak = 0;
};
// What evaluate_plan needs to price a plan file of `model` on `spec` (cost model `cm`):
// no baselines.
planner::SearchInput plan_file_input(const ir::ModelConfig& model, const TrainingSetup& training,
                                     const cluster::ClusterSpec& spec, const cost_model::CostModel& cm) {
  planner::SearchInput in;
  in.model = model;
  in.cluster = spec;
  in.cost = cm;
  in.global_batch_size = training.global_batch_size;
  in.dtype = training.dtype;
  in.options.compare_baselines = false;
  return in;
}
// One plan priced both ways on `gpus` GPUs of `preset` with the shipped calibration: by
// sim/lowering (lower_and_simulate, as the tests above) and by evaluate_plan of its plan file.
OneEvaluatorRow one_evaluator_row(const std::string& name, const ir::ModelConfig& model,
                                  const TrainingSetup& training, const MegatronPlan& plan,
                                  const std::string& preset, std::int64_t gpus) {
  const RowRun lowered = lower_and_simulate(model, training, plan, preset, gpus);
  const cluster::ClusterSpec spec = preset_cluster(preset, gpus);
  auto cm = cost_model::CostModel::create(spec, preset_params(preset));
  REQUIRE(cm.ok());
  auto file = megatron_plan_file(model, training, plan, spec);
  REQUIRE_MESSAGE(file.ok(), file.status().message());
  // Megatron-LM of these runs blocks on its pipeline sends (no overlap_p2p_comm).
  CHECK(file->p2p == schema::P2pMode::kBlocking);
  auto evaluated = planner::evaluate_plan(plan_file_input(model, training, spec, *cm), *file);
  REQUIRE_MESSAGE(evaluated.ok(), name << ": " << evaluated.status().message());
  OneEvaluatorRow o;
  o.model = name;
  o.lowering_s = lowered.simulation.report.iteration_time.value();
  o.evaluator_s = evaluated->prediction.iteration_time_s;
  o.lowering_peak = lowered.simulation.report.peak_memory_bytes;
  o.evaluator_peak = evaluated->prediction.peak_memory_bytes;
  return o;
}
std::vector<OneEvaluatorRow> one_evaluator_rows() {
  static const std::vector<OneEvaluatorRow> rows = [] {
    std::vector<OneEvaluatorRow> out;
    for (const auto& row : read_csv(ALPASIM_SOURCE_DIR "/validation/data/megatron_sc21_table1.csv")) {
      const Sc21Row r = sc21_row(row);
      out.push_back(one_evaluator_row(row.at("model"), r.model, r.training, r.plan, "dgx-a100-80gb", r.gpus));
    }
    // Korthikanti et al. 2022 Table 4's runs: one 22B layer (with the embedding and head),
    // t = 8 on one node, microbatch 4, each experiment's sequence parallelism and recompute.
    for (const auto& row : read_csv(ALPASIM_SOURCE_DIR "/validation/data/korthikanti_2022_table4_per_layer.csv")) {
      const std::string& name = row.at("experiment");
      const KorthikantiRun k = korthikanti_run(name);
      out.push_back(one_evaluator_row("22B: " + name, korthikanti_22b_layer(), k.training, k.plan,
                                      "dgx-a100-80gb", 8));
    }
    return out;
  }();
  return rows;
}

// Checks that every row evaluated to a finite, positive time and memory, and prints the
// table (`title` heads its first column).
void check_and_print(const char* title, const std::vector<OneEvaluatorRow>& rows) {
  std::printf("%-34s %11s %11s %8s %12s %12s %8s\n", title, "lowering_s", "evaluator_s", "time",
              "lowering_GB", "evaluator_GB", "memory");
  for (const auto& r : rows) {
    CHECK(std::isfinite(r.evaluator_s));
    CHECK(r.evaluator_s > 0);
    CHECK(r.evaluator_peak > 0);
    std::printf("%-34s %11.3f %11.3f %+7.1f%% %12.2f %12.2f %+7.1f%%\n", r.model.c_str(), r.lowering_s,
                r.evaluator_s, 100.0 * (r.evaluator_s / r.lowering_s - 1), r.lowering_peak / 1e9,
                r.evaluator_peak / 1e9, 100.0 * (static_cast<double>(r.evaluator_peak) / r.lowering_peak - 1));
  }
}

TEST_CASE("one evaluator: SC'21 table 1 and Korthikanti table 4 written as Megatron plan files evaluate on every row") {
  const auto rows = one_evaluator_rows();
  CHECK(rows.size() == 15);
  check_and_print("model", rows);
}

// Issue 15's equality: met on every row since 2026-11-27 (the tests fail on the code before
// that stop: SC'21 7.5B +2.2 % time, Korthikanti's rows without SP +3.0 % memory).
TEST_CASE("one evaluator: SC'21 table 1 and Korthikanti table 4 as plan files within 2 % of sim/lowering, time and memory") {
  for (const auto& r : one_evaluator_rows()) {
    CAPTURE(r.model);
    CHECK(std::abs(r.evaluator_s / r.lowering_s - 1) <= 0.02);
    CHECK(std::abs(static_cast<double>(r.evaluator_peak) / static_cast<double>(r.lowering_peak) - 1) <= 0.02);
  }
}

// LLaMA-shaped Megatron plans (grouped-query attention, rotary, fused SwiGLU, untied head,
// flash attention) written as plan files since 2026-11-26 (schema::megatron_operator_
// shardings): priced both ways on DGX H100 in bf16, blocking sends, no overlaps (plan files
// do not carry them). 8 blocks of Llama 3 8B's shape at sequence 4,096, global batch 32.
std::vector<OneEvaluatorRow> llama_one_evaluator_rows() {
  ir::TransformerConfig t;
  t.builtin = "llama";
  t.num_layers = 8;
  t.hidden_size = 4096;
  t.num_heads = 32;
  t.num_kv_heads = 8;
  t.ffn_hidden_size = 14336;
  t.seq_len = 4096;
  t.vocab_size = 128256;
  ir::set_architecture_defaults(t);
  t.fused_attention = true;
  t.fused_swiglu = true;
  ir::ModelConfig model;
  model.name = "llama 8 blocks";
  model.spec = t;
  TrainingSetup training;
  training.global_batch_size = 32;
  training.dtype = core::DType::kBf16;
  std::vector<OneEvaluatorRow> out;
  struct Shape { std::int64_t tp, pp, dp; bool sp; };
  // Nemotron-4's blocks (since stop 41): LLaMA's attention with Nemotron's non-gated
  // squared-ReLU MLP, 4h wide, and LayerNorm.
  ir::ModelConfig nemotron = model;
  nemotron.name = "nemotron 8 blocks";
  auto& n = std::get<ir::TransformerConfig>(nemotron.spec);
  n.builtin = "nemotron";
  n.ffn_hidden_size = 4 * n.hidden_size;
  ir::set_architecture_defaults(n);
  for (const Shape& sh : {Shape{2, 2, 2, false}, Shape{4, 2, 1, true}, Shape{8, 1, 1, true}, Shape{1, 4, 2, false}}) {
    MegatronPlan plan;
    plan.tp = sh.tp;
    plan.pp = sh.pp;
    plan.dp = sh.dp;
    plan.microbatch_size = 1;
    plan.sequence_parallel = sh.sp;
    plan.recompute = ir::RecomputePolicy::kNone;
    const std::string name = "tp " + std::to_string(sh.tp) + " pp " + std::to_string(sh.pp) + " dp " +
                             std::to_string(sh.dp) + (sh.sp ? " sp" : "");
    out.push_back(one_evaluator_row(name, model, training, plan, "dgx-h100", 8));
    out.push_back(one_evaluator_row("nemotron " + name, nemotron, training, plan, "dgx-h100", 8));
  }
  return out;
}

TEST_CASE("one evaluator: LLaMA Megatron plans are written as plan files and evaluate") {
  const auto rows = llama_one_evaluator_rows();
  CHECK(rows.size() == 8);
  check_and_print("LLaMA plan", rows);
}

// Met since 2026-11-27: time within 2 % (it was -2.8 %, +1.1 %, +7.6 %, -10.5 % on
// 2026-11-26, before Q, K, V and gate, up shared their gathers and reduced their input
// gradients once), memory within 2 % since a flash kernel's recomputed s x s tiles stopped
// counting as device memory in the evaluator (+3.8 / +4.2 / +2.4 / +13.4 % before;
// docs/validation.md).
TEST_CASE("one evaluator: LLaMA Megatron plans as plan files within 2 % of sim/lowering, time and memory") {
  for (const auto& r : llama_one_evaluator_rows()) {
    CAPTURE(r.model);
    CHECK(std::abs(r.evaluator_s / r.lowering_s - 1) <= 0.02);
    CHECK(std::abs(static_cast<double>(r.evaluator_peak) / static_cast<double>(r.lowering_peak) - 1) <= 0.02);
  }
}

// A sequence-parallel Megatron GPT written as a plan file: each pass gathers a tensor once
// however many operators read it in the same layout (Megatron gathers the layer-norm output
// once for its fused QKV GEMM; the graph has Q, K and V apart, and the evaluator used to
// charge a gather to each of the three: 4 forward all-gathers per block instead of 2), and
// the cross entropy works on the vocabulary-split logits.
TEST_CASE("one evaluator: a sequence-parallel GPT gathers each layer-norm output once per pass, and never its logits") {
  ir::ModelConfig model = gpt(2, 1024, 16, 1024, 51200);
  std::get<ir::TransformerConfig>(model.spec).fused_attention = true;
  TrainingSetup training;
  training.global_batch_size = 8;
  training.dtype = core::DType::kBf16;
  MegatronPlan plan;
  plan.tp = 8;
  plan.microbatch_size = 1;
  plan.sequence_parallel = true;
  plan.recompute = ir::RecomputePolicy::kNone;
  const cluster::ClusterSpec spec = preset_cluster("dgx-h100", 8);
  auto cm = cost_model::CostModel::create(spec, preset_params("dgx-h100"));
  REQUIRE(cm.ok());
  auto file = megatron_plan_file(model, training, plan, spec);
  REQUIRE_MESSAGE(file.ok(), file.status().message());
  auto evaluated = planner::evaluate_plan(plan_file_input(model, training, spec, *cm), *file);
  REQUIRE_MESSAGE(evaluated.ok(), evaluated.status().message());
  REQUIRE(evaluated->problem.stages.size() == 1);
  const sim::StageCosts& st = evaluated->problem.stages[0];
  int gathers = 0;
  std::string listed;
  for (const auto& c : st.forward_collectives) {
    listed += c.where + " " + c.collective + " " + std::to_string(c.bytes) + "; ";
    // Layer 1 is the first block (layer 0 the embedding); a resharding copy is listed as
    // "reshard" on the operator that first reads the copy.
    if (c.where.rfind("layer 1 ", 0) == 0 && c.collective == "reshard") {
      ++gathers;
      CHECK((c.where == "layer 1 attn/q" || c.where == "layer 1 mlp/fc1"));
    }
  }
  CAPTURE(listed);
  // The attention's and the MLP's layer-norm outputs, gathered for Q (K and V read the same
  // copy) and for fc1.
  CHECK(gathers == 2);
  // The head's cross entropy reduces its vocabulary slice and all-reduces per-token values
  // (b·s = 1,024 of them per microbatch, a few KB), as Megatron's vocabulary-parallel cross
  // entropy does; it used to gather the whole [b, s, V] logits (an elementwise operator with
  // the vocabulary kept whole).
  bool cross_entropy = false;
  for (const auto& c : st.forward_collectives) {
    if (c.where != "layer 3 cross_entropy") continue;
    cross_entropy = true;
    CHECK(c.collective == "all_reduce");
    CHECK(c.bytes <= 1024 * 4);
  }
  CHECK(cross_entropy);
}

}  // namespace
}  // namespace alpasim::sim::lowering

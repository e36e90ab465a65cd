#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster_spec.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/units.h"
#include "cost_model/cost_model.h"
#include "ir/model_config.h"
#include "schema/plan.h"
#include "sim/lowering/megatron_lowering.h"
#include "sim/pipeline_problem.h"

namespace alpasim::planner {

/// What `search()` does (the scenario's search.mode). "alpa" is the full search; the
/// others are the baselines, each planned under the same cost model and simulator.
///   "alpa"            Alpa's inter-op DP over intra-op plans + microbatches, recompute and
///                     schedule, top-K re-scored by the simulator (docs/search.md)
///   "megatron"        best Megatron-LM 3D grid point (tp, pp, dp, microbatch, interleave,
///                     recompute), analytic Megatron costing
///   "data_parallel"   tp = pp = 1 (replicated weights, all-reduce)
///   "zero2"           data parallel, gradients and optimizer states sharded
///   "zero3"           ZeRO-2 + parameters sharded (all-gathered per layer)
///   "inter_op_only"   pipeline + data parallel, no operator sharding (tp = 1, pp > 1)
///   "intra_op_only"   one stage on the whole cluster, intra-op pass on every logical mesh
///   "equal_layer"     equal layer counts per stage, equal submeshes, intra-op per stage
///   "equal_operator"  equal FLOPs per stage, equal submeshes, intra-op per stage
///   "dp_ep"           one stage, logical mesh (N, 1): data parallel + expert parallel (MoE)
const std::vector<std::string>& search_mode_names();
/// True for a name in search_mode_names().
bool is_search_mode(std::string_view mode);

/// Knobs of the search (all have working defaults).
struct SearchOptions {
  /// Wall-clock budget of the whole search, baselines included (docs/search.md
  /// "Deadlines"): no new (microbatch, recompute) point, equal-partition seed at an
  /// unexplored point, or baseline starts after it, and one running then stops; the first
  /// point still answers (no plan otherwise): its solves due past the limit are cut after
  /// 1 ms keeping the layouts they reached, and it simulates candidates until one fits.
  /// The result says when the clock cut the search (SearchResult::explanation, "stopped by
  /// the wall clock").
  double time_limit_s = 60;
  /// Deterministic work budget: at most this many (microbatch, recompute) points (0: no
  /// limit). Unlike time_limit_s it gives the same plan on any machine.
  int max_points = 0;
  int threads = 2;           ///< intra-op solves in parallel; results do not depend on it
  int top_k = 4;             ///< DP solutions per point re-scored by the simulator
  double epsilon = 1e-3;     ///< Alpa's ε filter on t_max (relative)
  int max_layers = 16;       ///< clustered layers the DP partitions
  /// Candidate microbatch sizes (sequences/images per microbatch of the whole pipeline);
  /// empty: powers of two 1..32 that divide the global batch. Ignored when
  /// num_microbatches is fixed.
  std::vector<std::int64_t> microbatch_sizes;
  std::vector<schema::Recompute> recompute = {schema::Recompute::kNone,
                                              schema::Recompute::kFull};
  bool try_interleave = true;
  bool try_gpipe = true;
  bool compare_baselines = true;  ///< fill SearchResult::baselines (mode "alpa")
  /// Per-GPU memory budget; unset = the GPU's memory.
  std::optional<core::Bytes> memory_limit;
  /// Skip Megatron-grid points whose simulation lower bound (pipeline_bound.h) cannot beat
  /// the best plan so far. Exact (same plan, same bytes); false simulates every grid point,
  /// which the tests compare against.
  bool prune_grid = true;
  /// Skip (microbatch, recompute) points whose compute lower bound cannot beat the best
  /// plan so far, and equal-partition candidates whose simulation lower bound cannot
  /// (docs/search.md "Search speed"). Never a slower result; false evaluates them all.
  bool prune_points = true;
  /// Modes megatron, data_parallel and inter_op_only: the grid's points, ranked by the
  /// grid's analytic costs, are re-scored by the evaluator of plan files (their plans written
  /// with Megatron's per-operator layouts) in that order until one fits (at most 16), so the
  /// answer is priced as searched plans are and its plan carries those layouts. False keeps
  /// the analytic price (ZeRO-2/3 and models other than the builtin gpt and llama always do).
  bool rescore_grid = true;
  /// Mode megatron (the full grid, also as the alpa mode's baseline): Megatron-Core's
  /// context parallelism (rotary models) and expert parallelism (MoE models) are tried
  /// around the grid's points (docs/search.md, "Context and expert parallelism"), each
  /// priced by sim/lowering, the Megatron lowering fixed plans use; an answer with cp or ep
  /// > 1, and any answer for a MoE model (whose grid price is analytic), is that lowering's
  /// price (BaselineRow::by_megatron_lowering) and has no plan file.
  bool explore_megatron_parallelism = true;
  /// Called (on the calling thread) as the search starts each phase: a (microbatch size,
  /// recompute) point, or a baseline, with a one-line description of it
  /// ("point 3: microbatch 4, recompute none", "baseline 2 of 8: megatron"). For progress
  /// display only: it sees nothing the result depends on. Empty: not called.
  std::function<void(const std::string& phase)> progress;
};

/// Everything the search needs. `cost` must be built for `cluster`.
struct SearchInput {
  ir::ModelConfig model;
  cluster::ClusterSpec cluster;
  std::optional<cost_model::CostModel> cost;
  std::int64_t global_batch_size = 0;
  core::DType dtype = core::DType::kFp16;
  /// With dtype bf16: Blackwell's block-scaled GEMMs (mxfp8, nvfp4) for the blocks' linears.
  /// fp8 and these precisions are priced by the Megatron lowering only: mode "megatron"
  /// ranks its grid at the storage precision (bf16) and answers with the fastest point the
  /// lowering prices at this one; the other modes and plan files refuse them
  /// (prices_only_by_megatron_lowering).
  sim::lowering::BlockScaled block_scaled = sim::lowering::BlockScaled::kNone;
  std::string optimizer = "adam";  ///< "adam" or "sgd"
  std::optional<std::int64_t> num_microbatches;  ///< unset: searched
  std::string mode = "alpa";
  SearchOptions options;
};

/// The simulator's verdict on one plan.
struct Prediction {
  double iteration_time_s = 0;
  double model_tflops_per_gpu = 0;     ///< Megatron definition (no recompute)
  double hardware_tflops_per_gpu = 0;  ///< with recomputation
  double samples_per_s = 0;
  double bubble_fraction = 0;
  std::int64_t peak_memory_bytes = 0;  ///< max over devices
  std::vector<std::int64_t> peak_memory_bytes_per_stage;
  bool fits = true;  ///< every device within its memory
  std::string memory_message;  ///< empty when it fits
};

/// One row of the comparison table.
struct BaselineRow {
  std::string mode;
  bool ok = false;
  std::string description;  ///< the configuration chosen, or why none
  Prediction prediction;
  /// Priced by the one evaluator (evaluate_plan of its plan file), as the searched plan is;
  /// false for analytic prices (zero2 / zero3, and grids the plan format cannot write).
  bool by_evaluator = false;
  /// A Megatron point with context or expert parallelism, priced by sim/lowering (the
  /// Megatron lowering of fixed plans), not by the evaluator of plan files.
  bool by_megatron_lowering = false;
};

/// The result of search() / evaluate_plan().
struct SearchResult {
  schema::Plan plan;
  Prediction prediction;
  /// The simulator input of the chosen plan (collectives resolved): write it, simulate it
  /// again, or make a trace from it.
  sim::PipelineProblem problem;
  std::vector<BaselineRow> baselines;  ///< mode "alpa" with compare_baselines
  /// "" when plan is the search's own; else the baseline mode whose plan is the answer: a
  /// baseline priced by the same evaluator that fits and is faster than the searched plan
  /// (then searched_prediction is the searched plan's and prediction the answer's).
  std::string answered_by;
  Prediction searched_prediction;
  double wall_time_s = 0;
  /// Human-readable reasoning: layers, points tried, DP statistics, why this plan won.
  std::vector<std::string> explanation;
  /// The answer in Megatron-LM's terms when it is a Megatron point priced by sim/lowering
  /// (context or expert parallelism, or any point of a MoE model; search.megatron keys),
  /// which `plan` cannot say: `plan` then holds its stages and meshes only, and
  /// plan_file_unavailable says why no plan file is written.
  std::optional<schema::MegatronShape> megatron_shape;
  std::string plan_file_unavailable;
  int intra_op_solves = 0;     ///< distinct intra-op problems solved
  int intra_op_queries = 0;    ///< layer × mesh cost lookups (identical layers share solves)
  int candidates_simulated = 0;
};

/// True when `in`'s precision (fp8, mxfp8, nvfp4) has a price only in the Megatron
/// lowering: not in the evaluator of plan files.
bool prices_only_by_megatron_lowering(const SearchInput& in);

/// Plans the training of input.model on input.cluster in mode input.mode. Errors:
/// kInvalidArgument for a bad input (unknown mode, batch not divisible...);
/// kResourceExhausted when no plan fits memory, naming the smallest memory per device any
/// considered plan needs. Deterministic: the same input gives the same plan bytes.
core::Result<SearchResult> search(const SearchInput& input);

/// Evaluates a given plan (e.g. read from plan.json) exactly as the search scored it:
/// the same intra-op costs, lowering and simulator, so a plan written by search() comes
/// back with the same prediction. Plan layer indices are model layers (Op::layer).
core::Result<SearchResult> evaluate_plan(const SearchInput& input, const schema::Plan& plan);

/// A fixed-width text table of result.baselines with the chosen plan first.
std::string format_comparison(const SearchResult& result);
/// "" unless a baseline row that fits is faster than the searched plan. Then a line for the
/// answer when a baseline is it (answered_by: by how much it beats the searched plan), and
/// a line for the fastest other row faster than the answer: by how much, and how to get its
/// plan (its mode as search.mode; "analytic" when the evaluator did not price it).
std::string faster_baseline_note(const SearchResult& result);

}  // namespace alpasim::planner

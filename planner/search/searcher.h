#pragma once

// The search's internals, shared by its translation units (not an API: only
// planner/search/*.cc include it). searcher.h: the per-layer costs, the training-graph
// points, the Searcher's interface and the helpers every mode uses. The Searcher is
// defined in searcher_points.cc (the training graphs of the (microbatch, recompute)
// points, their layers' classes and lower bounds), searcher_costs.cc (the intra-op solves
// and the per-layer costs and boundaries they give) and searcher_evaluate.cc (the one
// evaluator: a plan lowered onto the simulator and simulated); searcher.cc: the helpers;
// alpa_mode.cc: mode "alpa" (the inter-op DP and its seeds); baselines.cc: the equal
// partitions and the Megatron grid; search.cc: the modes' dispatch and planner::search /
// evaluate_plan.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "core/check.h"
#include "core/text.h"
#include "ir/accounting.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "planner/adapters/ir_adapter.h"
#include "planner/intra_op/intra_op_pass.h"
#include "planner/inter_op/inter_op_dp.h"
#include "planner/search/layer_boundary.h"
#include "planner/search/pipeline_bound.h"
#include "planner/search/search.h"
#include "planner/search/stage_memory.h"
#include "schema/megatron_layouts.h"
#include "sim/pipeline_sim.h"

namespace alpasim::planner::search_detail {


using adapters::SubmeshShape;
using intra_op::LogicalMesh;
using Clock = std::chrono::steady_clock;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// A priced collective as the trace shows it (sim::BlockingCollective): `bytes` the buffer
// per GPU, `group` the GPUs taking part, `e` what the cost model priced.
inline sim::BlockingCollective traced_collective(cost_model::Collective kind, std::int64_t bytes, int group,
                                                 const cost_model::CollectiveEstimate& e, std::string where,
                                                 std::string category = "grad_collective") {
  return sim::BlockingCollective{cost_model::collective_name(kind), bytes, group, cost_model::algorithm_text(e),
                                 e.time, std::move(where), std::move(category)};
}

// Costs of one model layer on one GPU of a stage mesh, per microbatch (optimizer and
// gradient synchronisation: per iteration).
struct LayerCost {
  double fwd_s = 0, bwd_s = 0, rc_s = 0;  // include the communication below
  double fwd_comm_s = 0, bwd_comm_s = 0;
  double grad_sync_s = 0;  // once per iteration (weight-update sharding collectives)
  // Of grad_sync_s: the reduce-scatter + all-gather of the gradients of weights replicated
  // over mesh axes (weight-update sharding), and the all-reduce that replaces them when a
  // plan keeps every replica's optimizer states whole (weight_update_sharding false).
  double replica_sync_rs_ag_s = 0, replica_sync_all_reduce_s = 0;
  double opt_s = 0;        // once per iteration
  // Bytes per device that opt_s streams: the optimizer update and the mixed-precision step's
  // passes over this layer's weights, one memory-bound pass (a multi-tensor kernel, as
  // sim/lowering prices it): scaled as bytes, never as a time with its fixed costs.
  double opt_bytes = 0;
  // Per microbatch, seconds: accumulating the GEMM weights' gradients by a separate add
  // (not in bwd_s; added where a plan has Plan::gradient_accumulation_fusion false).
  double accumulate_gemm_s = 0;
  std::int64_t param_b = 0, grad_b = 0, opt_b = 0, act_b = 0, work_b = 0, boundary_b = 0;
  // Of act_b: tensors the next layer's backward or recomputation reads (the residual stream
  // a block passes on; under full recomputation the next block's checkpointed input), and
  // those of them this layer's own backward does not read. Where the next layer runs on
  // another pipeline chunk, the receiver stores its copy and the sender stores only what
  // its own backward reads (problem_of).
  std::int64_t saved_for_next_b = 0, saved_only_for_next_b = 0;
  // Optimizer states without weight-update sharding: split only as the parameters are
  // (replicated over the mesh axes a parameter is replicated over), >= opt_b.
  std::int64_t opt_replicated_b = 0;
  // Parameters of another layer this layer reads (GPT's tied word embedding, read by the
  // head): per device, as this layer's sharding holds them. A stage that does not own them
  // keeps a copy with its gradient and optimizer state, and the owner and the copy
  // all-reduce the gradient once per iteration (Megatron, megatron/training.py; as
  // sim/lowering prices it). tied_owner: the owning layer, -1 when none.
  int tied_owner = -1;
  std::int64_t tied_param_b = 0, tied_opt_b = 0, tied_opt_replicated_b = 0;
  double fwd_flops = 0, bwd_flops = 0, rc_flops = 0;  // per GPU
  // The intra-op communication inside fwd_s / bwd_s / rc_s, one entry per operator that
  // communicates, in graph order (for the trace: sim::collective_trace_slices). Shared, so
  // that copying a LayerCost into a lowering stays cheap.
  using Calls = std::shared_ptr<const std::vector<sim::BlockingCollective>>;
  Calls fwd_calls, bwd_calls, rc_calls;
  // The same for grad_sync_s (category grad_collective): the optimizer-phase operators'
  // communication, and per set of replicated mesh axes the replicas' gradient sync as the
  // plan runs it (replica_sync_calls: the weight-update-sharding reduce-scatter + all-gather,
  // or, when the plan keeps whole optimizer states, replica_all_reduce_calls, the all-reduce).
  Calls sync_calls, replica_sync_calls, replica_all_reduce_calls;
  // Bytes per device of the replicas' gradient synchronisation, by the set of mesh axes the
  // weights are replicated over: what a plan's lowering coalesces over its chunk's layers.
  std::shared_ptr<const std::map<intra_op::MeshAxes, std::int64_t>> replica_sync_bytes;
  double total_s() const { return fwd_s + bwd_s + rc_s; }
};

// One training graph: (microbatch size, recompute).
struct Point {
  std::int64_t mbs = 1;
  schema::Recompute recompute = schema::Recompute::kNone;
  ir::Graph graph;
  std::vector<ir::LayerStats> stats;
  int num_layers = 0;
  // Per op of `graph`: the parameter a weight gradient is for (ir::weight_gradient_parameters).
  std::vector<ir::OpId> gradient_param;
  // Per layer: its weight gradients (ops the variant-0 intra-op graphs leave out).
  std::vector<std::vector<ir::OpId>> weight_ops;
  // Per op: a parameter with a weight gradient in another layer than its own (a tied
  // table read by the head), whose gradient's inputs one layer's graph cannot all see.
  std::vector<char> gradient_in_other_layer;
  // Per op: a GEMM's or convolution's weight (ir::kernel_weight_parameters).
  std::vector<char> gemm_weight;
  std::vector<int> rep;  // representative layer of each layer's structural class
  std::map<int, intra_op::IntraOpGraph> graphs;  // by representative
  std::map<int, std::vector<ir::OpId>> node_ops;
  // Variant 1: the same layers with weight gradients and updates (see ensure_costs).
  std::map<int, intra_op::IntraOpGraph> graphs_w;
  std::map<int, std::vector<ir::OpId>> node_ops_w;
  std::map<int, std::string> keys;
  // Per representative: variant-0 node index -> variant-1 node index (the same operator
  // or the same input tensor; -1 when variant 1 has no such node).
  std::map<int, std::vector<int>> node_w;
  // Tensors crossing the boundary between layers l - 1 and l, by l (layer_boundary.h).
  // Nodes are variant-0 indices of the layers' own graphs, equal to their representatives'
  // (same structural key).
  std::vector<std::vector<BoundaryEdge>> boundary;
  // Per l: an id shared by boundaries with the same representatives and edges (-1: none),
  // the key of the layer_boundary cache.
  std::vector<int> boundary_class;
  bool layer_graphs_built = false;  // rep, graphs, node_ops, graphs_w, node_ops_w, keys, boundary
};

inline ir::RecomputePolicy to_ir(schema::Recompute r) {
  switch (r) {
    case schema::Recompute::kNone: return ir::RecomputePolicy::kNone;
    case schema::Recompute::kSelective: return ir::RecomputePolicy::kSelective;
    case schema::Recompute::kFull: return ir::RecomputePolicy::kFull;
  }
  return ir::RecomputePolicy::kNone;
}

inline std::string mesh_key(const SubmeshShape& s, const LogicalMesh& m) {
  return std::to_string(s.nodes) + "x" + std::to_string(s.gpus_per_node) + "/" + m.to_string();
}

// The model axis (cols) of a logical mesh: a power of two within one NVLink domain
// (`nvlink_gpus`: a node, or a GB200 NVL72 rack's trays, ClusterSpec::nvlink_domain_gpus),
// or the whole node (the search-space restriction of docs/search.md; rows then carry data
// parallelism). Across NVLink domains a model axis would put its collectives on the NICs.
inline bool model_axis_ok(std::int64_t cols, std::int64_t gpus_per_node, std::int64_t nvlink_gpus) {
  if (cols == gpus_per_node) return true;
  if ((cols & (cols - 1)) != 0) return false;
  // Wider than a node: only as whole parts of the domain, so no group straddles two domains.
  return cols <= gpus_per_node || (cols <= nvlink_gpus && nvlink_gpus % cols == 0);
}

inline std::vector<LogicalMesh> logical_shapes(const SubmeshShape& s, std::int64_t max_cols,
                                               std::int64_t nvlink_gpus) {
  std::vector<LogicalMesh> out;
  for (std::int64_t c = 1; c <= s.size(); ++c) {
    if (s.size() % c != 0 || c > max_cols || !model_axis_ok(c, s.gpus_per_node, nvlink_gpus)) continue;
    out.push_back({s.size() / c, c});
  }
  return out;
}

struct Evaluated {
  schema::Plan plan;
  Prediction prediction;
  sim::PipelineProblem problem;
  std::vector<int> variants;  // intra-op variant per plan stage
  bool ok = false;
  std::string error;
  // Priced by evaluate() (the one evaluator of plan files), not an analytic grid price.
  bool by_evaluator = false;
  // A Megatron point with context or expert parallelism, priced by sim/lowering: its shape
  // (the plan holds its stages and meshes, not its cp and ep).
  std::optional<schema::MegatronShape> megatron_shape;
};

class Searcher {
 public:
  explicit Searcher(const SearchInput& in) : in_(in), cost_(*in.cost) {
    nodes_ = in.cluster.nodes;
    gpn_ = in.cluster.gpus_per_node;
    num_gpus_ = nodes_ * gpn_;
    memory_limit_ = in.options.memory_limit ? in.options.memory_limit->value()
                                            : in.cluster.usable_memory().value();
    ir::parse_optimizer_kind(in.optimizer, &optimizer_);
  }

  double memory_limit() const { return static_cast<double>(memory_limit_); }
  void set_unlimited_memory() { memory_limit_ = std::numeric_limits<std::int64_t>::max() / 4; }
  /// Rank plans by peak memory instead of time (the "what would it need" pass).
  bool minimize_memory = false;
  /// Set when the run's precision is one only the Megatron lowering prices (fp8, mxfp8,
  /// nvfp4; prices_only_by_megatron_lowering): this Searcher's graphs, grid and evaluator
  /// are at the storage precision (bf16), which only ranks the grid's points, and mode
  /// megatron answers with a point the lowering priced at this precision (baselines.cc).
  struct LoweringPrecision {
    core::DType dtype = core::DType::kBf16;
    sim::lowering::BlockScaled block_scaled = sim::lowering::BlockScaled::kNone;
  };
  std::optional<LoweringPrecision> lowering_precision;
  /// Set while a mode runs as a row of the alpa mode's comparison table: the Megatron row
  /// then leaves Megatron-LM's runtime flags out (baselines.cc, explore_context_and_expert_
  /// parallelism), so the table compares plans under one runtime.
  bool baseline_row = false;
  /// Megatron-grid statistics: grid points simulated / skipped by their lower bound.
  int grid_simulated = 0;
  int grid_pruned = 0;
  /// When set, simulate() skips a plan whose pipeline_lower_bound exceeds it (seconds), or
  /// that cannot fit (cannot_fit), and returns it with ok = false; counted in
  /// candidates_pruned. Set it only while a plan that fits and takes that long is kept.
  std::optional<double> prune_above_s;
  int candidates_pruned = 0;
  /// When set, ensure_costs() starts no intra-op solve past this instant, gives each solve
  /// at most the time left, and then caches no result the deadline may have changed (a
  /// solve cut short before it proved its optimum); it sets `interrupted` when it skipped
  /// or cut any. The search uses it to stop a point in the middle (docs/search.md).
  std::optional<Clock::time_point> deadline;
  bool interrupted = false;
  /// With `deadline` (the search's first point, which must answer): a solve due past the
  /// deadline still runs, under kCutSolveLimitS as a hard limit, and a result it did not
  /// prove optimal is cached as it is: a valid layout priced as such, perhaps not the best
  /// one. Counted in approximate_solves; `interrupted` is not set for them.
  bool accept_cut_solves = false;
  int approximate_solves = 0;
  static constexpr double kCutSolveLimitS = 1e-3;
  bool past_deadline() const { return deadline && Clock::now() >= *deadline; }
  /// The instant `limit_s` seconds (SearchOptions::time_limit_s) after `start`.
  static Clock::time_point deadline_after(Clock::time_point start, double limit_s) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
  }
  /// When true, problem_of() lists each chunk's intra-op communication operator by operator
  /// (StageCosts::forward_collectives, ...: trace events). Off while searching (cost); on
  /// for the plan that is answered.
  bool list_collectives = false;
  /// When true, simulate() skips a plan that cannot fit (cannot_fit) and returns it with ok
  /// = false and prediction.fits = false: for callers that only look for a fitting plan.
  bool skip_unfit = false;
  /// (microbatch size, recompute) points skipped by point_lower_bound_s.
  int points_pruned = 0;
  /// run_equal's answers when called without an incumbent or a point list, by (by_flops,
  /// forced stages, forced mesh columns, minimize_memory): with baselines the alpa mode's
  /// seeds run exactly as the equal_layer / equal_operator baselines do, so those baselines
  /// take the seeds' answers instead of simulating the same candidates again. Only runs the
  /// deadline did not cut are kept.
  std::map<std::tuple<bool, int, std::int64_t, bool>, Evaluated> equal_partition_answers;
  std::int64_t num_gpus() const { return num_gpus_; }
  std::int64_t nodes() const { return nodes_; }
  std::int64_t gpn() const { return gpn_; }
  /// GPUs of one NVLink domain in use (a node, or several on multi-node NVLink): the widest
  /// model axis (tensor parallelism) the searches consider.
  std::int64_t nvlink_gpus() const { return in_.cluster.nvlink_domain_gpus(); }
  int solves() const { return solves_; }
  int queries() const { return queries_; }

  // The training graph of (mbs, rc). `with_layer_graphs`: also the per-layer intra-op graphs
  // and structural classes (the intra-op modes); the analytic Megatron grid needs neither.
  core::Result<Point*> point(std::int64_t mbs, schema::Recompute rc, bool with_layer_graphs = true);

  // Per-layer intra-op graphs (both variants) of each structural class of p's layers.
  core::Status build_layer_graphs(Point& pt);

  // Solves every (representative layer, mesh, variant) of `p` not solved yet, in parallel.
  // Variant 0: the layer without weight gradients (they accumulate over the microbatches
  // and synchronise once per iteration, priced afterwards from the weights' shardings): the
  // fastest per-microbatch plan, which may leave weights replicated. Variant 1: the layer
  // with weight gradients and updates, so the pass also pays gradient collectives per
  // microbatch and leans to sharded weights (Megatron-like, far less memory). Both are
  // unconstrained solves (memory is checked by the inter-op DP); meshes of one device
  // have variant 0 only.
  // `count_queries`: false for a prefetch (solving ahead, in parallel, what the caller's
  // next evaluations will query and count themselves).
  core::Status ensure_costs(Point& p, const std::vector<std::pair<SubmeshShape, LogicalMesh>>& meshes,
                            bool count_queries = true);

  // The intra-op pass's collective hook of a mesh (make_collective_hook), cached.
  core::Result<const intra_op::CollectiveCostFn*> hook(const SubmeshShape& sub, const LogicalMesh& mesh);

  // Resharding at the boundary between layers l - 1 and l of one stage, per microbatch:
  // each crossing tensor (Point::boundary) goes from the layout its producer's solution
  // writes to the layout its consumer's solution reads (price_boundary). Layers in
  // different stages pay the pipeline send instead. Zero when the two solutions agree
  // (Megatron's layouts: replicated between blocks, or sequence-split on both sides).
  // ensure_costs(p, {sub, mesh}) must have run.
  // `written`: per layer, the key suffix of the layouts a plan writes for it
  // (price_written_layouts); layers it does not list take the search's solution.
  const BoundaryCost& layer_boundary(const Point& p, int l, const SubmeshShape& sub,
                                     const LogicalMesh& mesh, int variant,
                                     const std::map<int, std::string>* written = nullptr);

  // `written`: "" for the search's solution of the layer, else the suffix
  // price_written_layouts returned for the layouts a plan writes.
  const LayerCost& layer_cost(const Point& p, int layer, const SubmeshShape& sub,
                              const LogicalMesh& mesh, int variant, const std::string& written = "") const;
  const intra_op::IntraOpPlan& layer_plan(const Point& p, int layer, const SubmeshShape& sub,
                                          const LogicalMesh& mesh, int variant,
                                          const std::string& written = "") const;

  // A multi-GPU stage of a plan from outside whose layouts are not the search's own: each
  // of its layers is priced with the layouts the stage writes for the layer's nodes (the
  // intra-op pass restricted to them, IntraOpOptions::required; nodes the stage gives no
  // layout are optimised: a weight, or a tensor received from another stage). Returns, per
  // layer of the stage, the suffix of its costs_ / plans_ key, and sets *variant: 1 when
  // the stage writes the layouts of weight updates (the layer graphs with weight
  // gradients and updates), else 0. Layers with equal representatives and equal layouts
  // share one solve.
  core::Result<std::map<int, std::string>> price_written_layouts(Point& p, const schema::PlanStage& st,
                                                                int stage_index, const SubmeshShape& sub,
                                                                const LogicalMesh& mesh, int* variant);

  // ---- Lowering of a plan (stages with costs per layer) into the simulator. ----

  // `layer_costs[i]`: the per-layer costs of virtual stage i's layers. `meshes[i]`: device ids
  // of physical stage i (p entries).
  struct Lowering {
    std::vector<std::vector<LayerCost>> chunk_layers;  // p·v chunks
    // Per chunk, when set: its memory by the executor's rules (stage_memory.h), which
    // replaces the layer sums above in problem_of.
    std::vector<std::optional<StageMemory>> chunk_memory;
    std::vector<std::vector<std::int64_t>> mesh_devices;  // p meshes, all GPUs of a mesh
    std::vector<int> mesh_gpus;  // representative-GPU count per mesh (num_gpus in sim)
    int data_parallel = 1;
    sim::GradSyncMode grad_sync_mode = sim::GradSyncMode::kAllReduce;
    // ZeRO-2/3 as DeepSpeed runs them: each microbatch's gradients are reduce-scattered in
    // its backward (priced in the layers' backward), so no gradient collective follows the
    // last backward; ZeRO-2 then all-gathers the updated parameters.
    bool gradients_reduced_per_microbatch = false;
    // ZeRO-3: the parameters stay partitioned after the step (each layer's are gathered in
    // its forward and backward, priced there): no all-gather after the step.
    bool parameters_gathered_per_layer = false;
    bool blocking_p2p = false;
    bool local_all_gather = true;
    // GPUs of each all-gather group after a local-all-gather send: 0 = the whole receiving
    // mesh gathers the whole tensor (Alpa §5); t = each group of t consecutive GPUs gathers
    // its t/|mesh| of it (Megatron's scatter-gather: a tensor-parallel group per replica).
    std::int64_t all_gather_group = 0;
    // dp > 1: groups per mesh for the gradient collective (concurrent), set by the caller.
    std::vector<std::vector<std::vector<std::int64_t>>> dp_groups;
  };

  core::Result<Evaluated> simulate(const Lowering& lw, const schema::Plan& plan);

  // Bytes/s of one receiving GPU's flow of a pipeline send from the GPUs `from` to the
  // GPUs `to`. Every receiving GPU gets its part at the same time (the whole tensor, or
  // 1/k of it before the local all-gather), sent by the GPU at its position in `from`;
  // flows that leave a node share its NICs and network links (Topology::concurrent_groups
  // of the disjoint (sender, receiver) pairs, min(|from|, |to|) of them: a sender serving
  // several receivers is counted once, which undercounts its NIC's load). Each flow gets
  // the smaller of its point-to-point bandwidth and that share; the slowest flow sets the
  // link. Cached: the search evaluates the same mesh pairs many times.
  double send_flow_bandwidth(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to);

  // The simulator input of a lowered plan (validated, not simulated).
  core::Result<sim::PipelineProblem> problem_of(const Lowering& lw, const schema::Plan& plan);

  // Simulates a problem built by problem_of.
  core::Result<Evaluated> run_problem(sim::PipelineProblem pb, const schema::Plan& plan);

  // Evaluates a plan whose stages carry submesh + logical mesh, under the intra-op costs.
  // `variants`: the intra-op variant of every stage (empty: inferred from the stages'
  // shardings, variant 0 for stages without).
  core::Result<Evaluated> evaluate(const schema::Plan& plan, std::vector<int> variants = {});

  // Lowering::all_gather_group of a plan whose stages are all priced as written (0, the
  // whole receiving mesh, otherwise): by the layout in which each stage's last layer writes
  // the activation it sends. A receiving GPU needs the part its own layout holds, so only
  // the GPUs holding the same part gather it: split over the mesh rows only (the batch over
  // Megatron's data-parallel rows), a row of consecutive GPUs gathers its share, as
  // Megatron's scatter/gather does per tensor-parallel group; split over both axes, nothing
  // is gathered (1). Every sending stage must give the same answer on meshes of one shape.
  std::int64_t written_send_gather_group(const Point& p, const schema::Plan& plan,
                                         const std::vector<std::pair<SubmeshShape, LogicalMesh>>& meshes,
                                         const std::vector<int>& variants,
                                         const std::vector<std::map<int, std::string>>& written) const;

  // The executor's memory (stage_memory.h) of every chunk: one GPU, or, in a plan
  // evaluated as written, a multi-GPU chunk lowered data parallel (stage_memory) or
  // operator by operator from its shardings (ShardedPlanMemory, its whole-plan work done
  // once per plan, not once per chunk). A search candidate's
  // multi-GPU chunks (sharded once emitted) keep the layer sums. Data-parallel walks are
  // cached per (per-device batch, recompute, stage ranges, meshes, chunk, mesh size,
  // weight-update sharding): the walk is O(operators of the graph).
  core::Status fill_stage_memory(const schema::Plan& plan, bool as_written, Lowering* lw);

  schema::Plan base_plan() const;

  // `plan` (a Megatron grid point: stages on logical meshes of data-parallel rows and
  // tensor-parallel columns) with Megatron's per-operator layouts on every multi-GPU stage.
  // UNIMPLEMENTED for models the layouts do not cover and for a stage whose submesh does not
  // hold its logical mesh (one spanning part of a node).
  core::Result<schema::Plan> with_megatron_layouts(const schema::Plan& plan);

  // Fills a plan stage's intra-op shardings from the solved plans of its layers.
  void fill_shardings(const Point& pt, schema::PlanStage* st, int variant) const;

  const SearchInput& input() const { return in_; }
  const cost_model::CostModel& cost() const { return cost_; }
  ir::OptimizerKind optimizer() const { return optimizer_; }

 private:
  std::string cost_key(const Point& p, int rep, const SubmeshShape& sub,
                       const LogicalMesh& mesh, int variant) const;

  // LayerCost::fwd_calls / bwd_calls / rc_calls: per operator whose layout communicates
  // (node_cost_s above its compute), one entry named by its strategy's collective
  // ("all_reduce", "reduce_scatter") or "reshard" when only its operands are resharded; its
  // time is all of the operator's communication (strategy and operand resharding). A
  // gradient whose all-reduce weight-update sharding turned into a reduce-scatter +
  // all-gather keeps only what stays per microbatch (that pair is synchronised once per
  // iteration, as in to_layer_cost).
  void list_layer_calls(const Point& p, const intra_op::IntraOpGraph& g, const std::vector<ir::OpId>& ops,
                        const LogicalMesh& mesh, const intra_op::IntraOpPlan& plan, LayerCost* c) const;

  LayerCost to_layer_cost(const Point& p, int rep, const LogicalMesh& mesh, int variant,
                          const intra_op::IntraOpPlan& plan,
                          const intra_op::CollectiveCostFn& hook);

 public:
  adapters::ComputeTimes compute_for(const Point& p, int layer, std::int64_t devices);

  // The replicas' gradient synchronisation of one chunk's layers as a runtime runs it: one
  // collective per set of mesh axes over the gradients of all of them (Megatron's contiguous
  // gradient buffer is one all-reduce; XLA combines all-reduces), so each collective's fixed
  // costs are paid once, not once per layer (sim/lowering prices a stage's synchronisation
  // the same way). The whole of it is charged to the chunk's first layer.
  core::Status coalesce_replica_sync(const SubmeshShape& sub, const LogicalMesh& mesh, bool weight_update_sharding,
                                     std::vector<LayerCost>* layers);

  // Per layer of p: the bytes its optimizer operators stream (ir::memory_traffic_bytes,
  // unsplit), cached.
  const std::vector<double>& layer_optimizer_bytes(const Point& p);

  // Compute times of every layer of p on `devices` GPUs (adapters::per_layer_compute: one
  // pass over the graph, bit-identical to layer_range_compute per layer), cached.
  const std::vector<adapters::ComputeTimes>& layer_computes(const Point& p, std::int64_t devices);

  // A lower bound (seconds) on the simulated iteration time of every plan of point p whose
  // meshes together hold all N GPUs, each of a size in `sizes` (a superset of the mesh
  // sizes the caller may use). Why it holds: the simulator runs a device's forward,
  // recompute and backward ops one at a time (pipeline_bound.h), so the iteration takes
  // at least max_d busy_d >= Σ_m (n_m / N) busy_m (meshes m of n_m GPUs, Σ n_m = N), with
  // busy_m = B Σ_{layers l on m} (fwd + bwd + rc)(l) and each layer's times >= its
  // compute on n_m GPUs (the intra-op communication added to them is >= 0). Hence
  // T >= (B / N) Σ_l min_{n in sizes} n · compute(l, n). Each op's duration is rounded to
  // the nanosecond (at most 0.5 ns lost per op, <= 3 ops per microbatch and chunk, <= 2
  // chunks per device): 3 B ns are taken off, and 1e-9 relative for the summation order.
  // A lower bound (seconds) on the simulated time of every 1F1B plan of point p whose
  // stage i holds layers [starts[i], starts[i+1]) on a mesh of `devices` GPUs, whatever
  // its logical mesh and shardings: pipeline_lower_bound of the same pipeline with compute
  // only. Exact: the bound is monotone in every op duration, and each stage time the
  // search lowers is its layers' compute plus communication >= 0, summed in the same order
  // (rounding is monotone too).
  double partition_lower_bound_s(const Point& p, const std::vector<int>& starts, std::int64_t devices);

  double point_lower_bound_s(const Point& p, const std::set<std::int64_t>& sizes);

 private:
  const SearchInput& in_;
  cost_model::CostModel cost_;
  std::int64_t nodes_ = 1, gpn_ = 1, num_gpus_ = 1;
  std::int64_t memory_limit_ = 0;
  ir::OptimizerKind optimizer_ = ir::OptimizerKind::kAdam;
  using StageMemoryKey = std::tuple<std::int64_t, int, std::vector<std::int64_t>, int, int, std::int64_t, bool>;
  std::map<StageMemoryKey, std::optional<StageMemory>> stage_memory_;  // fill_stage_memory
  std::map<std::pair<std::int64_t, int>, std::unique_ptr<Point>> points_;
  std::map<std::string, LayerCost> costs_;
  std::map<std::string, intra_op::IntraOpPlan> plans_;
  std::map<std::tuple<std::int64_t, int, std::int64_t>, std::vector<adapters::ComputeTimes>> compute_;
  std::map<std::pair<std::int64_t, int>, std::vector<double>> optimizer_bytes_;
  std::map<std::tuple<std::int64_t, int, std::set<std::int64_t>>, double> point_bounds_;
  std::map<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>, double> send_bandwidth_;
  std::map<std::string, intra_op::CollectiveCostFn> hooks_;  // by mesh_key
  std::map<std::string, BoundaryCost> boundary_costs_;       // layer_boundary
  std::map<std::string, std::size_t> written_layouts_;       // price_written_layouts: layouts -> id
  int solves_ = 0;
  int queries_ = 0;
};


// ---------------------------------------------------------------------------------------
// Helpers shared by the modes (searcher.cc).

/// Microbatch sizes to try: divisors of the global batch that `min_divisor` divides.
std::vector<std::int64_t> microbatch_sizes(const SearchInput& in, std::int64_t min_divisor);
/// Contiguous groups of layers with near-equal weights (exact linear-partition DP), at
/// most `groups`; the group starts followed by the layer count.
std::vector<int> balanced_partition(const std::vector<double>& w, int groups);
/// Per-layer FLOPs of point p (the weights of the FLOP-balanced partitions).
std::vector<double> layer_weights(const Point& p);
std::string describe_plan(const schema::Plan& plan);
/// Strict weak order of evaluated plans: fitting first, then faster (or smaller in the
/// least-memory ranking).
bool better(const Searcher& s, const Evaluated& a, const Evaluated& b);
/// Plans with stages placed by assign_devices.
core::Result<schema::Plan> make_plan(Searcher& s, const std::vector<schema::PlanStage>& stages_in,
                                     std::int64_t num_microbatches, schema::Schedule schedule,
                                     int interleave, schema::Recompute rc);
SubmeshShape shape_of_size(std::int64_t size, std::int64_t gpn);
bool valid_submesh_size(std::int64_t size, std::int64_t nodes, std::int64_t gpn);

// ---------------------------------------------------------------------------------------
// Modes.

struct AlpaStats {
  int points = 0, dp_passes = 0, t_max_candidates = 0, simulated = 0;
  bool stopped_by_clock = false;   // the time limit ended the point loop
  bool stopped_by_budget = false;  // max_points ended it
  std::set<std::pair<std::int64_t, int>> explored;  // (microbatch size, recompute) points
  std::vector<std::string> lines;
};
struct GridFilter {
  bool tp1 = false;        // data parallel / inter-op only / ZeRO
  bool pp1 = false;
  bool pp_gt1 = false;
  int zero = 0;
};

/// True when point pt's lower bound cannot beat the fitting incumbent (alpa_mode.cc).
bool point_cannot_win(Searcher& s, const Point& pt, const Evaluated& incumbent);
/// True when every plan of mode "alpa" at point pt (its lower bound over the mode's mesh
/// sizes) is slower than `time_s` (alpa_mode.cc).
bool point_slower_than(Searcher& s, const Point& pt, double time_s);
/// Mode "alpa" (alpa_mode.cc).
core::Result<Evaluated> run_alpa(Searcher& s, AlpaStats& stats, Clock::time_point start,
                                 bool restrict_to_data_parallel_meshes = false);
/// Equal partitions of layers or FLOPs over equal submeshes (baselines.cc).
core::Result<Evaluated> run_equal(Searcher& s, bool by_flops, int forced_stages = 0,
                                  std::int64_t forced_cols = 0,
                                  const Evaluated* incumbent = nullptr,
                                  const std::set<std::pair<std::int64_t, int>>* only = nullptr);
/// The Megatron-style 3D grid, analytic ranking re-scored by the evaluator (baselines.cc).
core::Result<Evaluated> run_megatron(Searcher& s, const GridFilter& f, std::string* description);

}  // namespace alpasim::planner::search_detail

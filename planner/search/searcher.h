#pragma once

// The search's internals, shared by its translation units (not an API: only
// planner/search/*.cc include it). searcher.h: the per-layer costs, the training-graph
// points, the Searcher (intra-op costs, the lowering of a plan to the simulator, the
// evaluator of plans) and the helpers every mode uses; alpa_mode.cc: mode "alpa" (the
// inter-op DP and its seeds); baselines.cc: the equal partitions and the Megatron grid;
// search.cc: the modes' dispatch and planner::search / evaluate_plan.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
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
  core::Result<Point*> point(std::int64_t mbs, schema::Recompute rc, bool with_layer_graphs = true) {
    const auto key = std::make_pair(mbs, static_cast<int>(rc));
    auto it = points_.find(key);
    if (it != points_.end()) {
      if (with_layer_graphs && !it->second->layer_graphs_built) {
        ALPASIM_RETURN_IF_ERROR(build_layer_graphs(*it->second));
      }
      return it->second.get();
    }
    auto p = std::make_unique<Point>();
    p->mbs = mbs;
    p->recompute = rc;
    ir::BuildOptions bo;
    bo.microbatch_size = mbs;
    bo.dtype = in_.dtype;
    ALPASIM_ASSIGN_OR_RETURN(ir::Graph fwd, ir::build_forward_graph(in_.model, bo));
    ir::TrainingOptions to;
    to.optimizer = optimizer_;
    to.recompute = to_ir(rc);
    p->graph = ir::derive_training_graph(fwd, to);
    p->stats = ir::layer_stats(p->graph);
    p->num_layers = p->graph.num_layers();
    p->gradient_param = ir::weight_gradient_parameters(p->graph);
    p->weight_ops.assign(static_cast<std::size_t>(std::max(0, p->num_layers)), {});
    p->gradient_in_other_layer.assign(p->graph.size(), 0);
    p->gemm_weight = ir::kernel_weight_parameters(p->graph);
    for (const ir::Op& op : p->graph.ops()) {
      const ir::OpId param = p->gradient_param[static_cast<std::size_t>(op.id)];
      if (param == ir::kNoOp) continue;
      if (op.layer != p->graph.op(param).layer) p->gradient_in_other_layer[static_cast<std::size_t>(param)] = 1;
      if (op.layer >= 0 && op.layer < p->num_layers) p->weight_ops[static_cast<std::size_t>(op.layer)].push_back(op.id);
    }
    if (with_layer_graphs) ALPASIM_RETURN_IF_ERROR(build_layer_graphs(*p));
    Point* raw = p.get();
    points_.emplace(key, std::move(p));
    return raw;
  }

  // Per-layer intra-op graphs (both variants) of each structural class of p's layers.
  core::Status build_layer_graphs(Point& pt) {
    Point* p = &pt;
    p->layer_graphs_built = true;
    std::map<std::string, int> first;
    std::vector<std::vector<ir::OpId>> layer_ops(static_cast<std::size_t>(p->num_layers));
    for (int l = 0; l < p->num_layers; ++l) {
      std::vector<ir::OpId> ops;
      ALPASIM_ASSIGN_OR_RETURN(intra_op::IntraOpGraph g,
                               adapters::layer_range_graph(p->graph, l, l + 1, &ops, false));
      std::string skey = g.structural_key();
      auto [f, inserted] = first.emplace(skey, l);
      p->rep.push_back(f->second);
      layer_ops[static_cast<std::size_t>(l)] = ops;
      if (inserted) {
        std::vector<ir::OpId> ops_w;
        ALPASIM_ASSIGN_OR_RETURN(intra_op::IntraOpGraph gw,
                                 adapters::layer_range_graph(p->graph, l, l + 1, &ops_w, true));
        std::map<ir::OpId, int> index_w;
        for (std::size_t v = 0; v < ops_w.size(); ++v) index_w.emplace(ops_w[v], static_cast<int>(v));
        std::vector<int> to_w;
        for (ir::OpId id : ops) {
          auto it = index_w.find(id);
          to_w.push_back(it == index_w.end() ? -1 : it->second);
        }
        p->node_w.emplace(l, std::move(to_w));
        p->graphs_w.emplace(l, std::move(gw));
        p->node_ops_w.emplace(l, std::move(ops_w));
        p->graphs.emplace(l, std::move(g));
        p->node_ops.emplace(l, std::move(ops));
        p->keys.emplace(l, std::move(skey));
      }
    }
    p->boundary = layer_boundary_edges(p->graph, layer_ops);
    std::map<std::string, int> classes;
    p->boundary_class.assign(static_cast<std::size_t>(p->num_layers), -1);
    for (int l = 1; l < p->num_layers; ++l) {
      const auto& edges = p->boundary[static_cast<std::size_t>(l)];
      if (edges.empty()) continue;
      std::string key = std::to_string(p->rep[static_cast<std::size_t>(l - 1)]) + "," +
                        std::to_string(p->rep[static_cast<std::size_t>(l)]);
      for (const auto& e : edges) {
        key += ";" + std::to_string(e.producer_layer - l) + ":" + std::to_string(e.producer_node) +
               ">" + std::to_string(e.consumer_layer - l) + ":" + std::to_string(e.consumer_node);
      }
      p->boundary_class[static_cast<std::size_t>(l)] =
          classes.emplace(key, static_cast<int>(classes.size())).first->second;
    }
    return core::Status();
  }

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
                            bool count_queries = true) {
    struct Task {
      int rep;
      SubmeshShape sub;
      LogicalMesh mesh;
      int variant;
      int hook;
    };
    std::vector<Task> tasks;
    std::set<std::string> queued;
    std::vector<intra_op::CollectiveCostFn> hooks;
    std::map<std::string, int> hook_of;
    for (const auto& [sub, mesh] : meshes) {
      const std::string mk = mesh_key(sub, mesh);
      if (!hook_of.count(mk)) {
        ALPASIM_ASSIGN_OR_RETURN(const intra_op::CollectiveCostFn* h, hook(sub, mesh));
        hook_of[mk] = static_cast<int>(hooks.size());
        hooks.push_back(*h);
      }
      for (const auto& [rep, g] : p.graphs) {
        for (int var = 0; var < (mesh.num_devices() > 1 ? 2 : 1); ++var) {
          std::string key = cost_key(p, rep, sub, mesh, var);
          if (count_queries) ++queries_;
          if (costs_.count(key) || !queued.insert(key).second) continue;
          tasks.push_back({rep, sub, mesh, var, hook_of[mk]});
        }
      }
    }
    if (tasks.empty()) return core::Status();
    std::vector<core::Result<intra_op::IntraOpPlan>> results(
        tasks.size(), core::Result<intra_op::IntraOpPlan>(core::internal_error("not run")));
    std::atomic<std::size_t> next{0};
    constexpr double kSolveLimitS = 30.0;  // per solve, without a deadline
    // Per task: not started (deadline), or given less time than kSolveLimitS.
    std::vector<char> skipped(tasks.size(), 0), shortened(tasks.size(), 0);
    auto worker = [&]() {
      intra_op::IntraOpPass pass;
      for (;;) {
        const std::size_t i = next.fetch_add(1);
        if (i >= tasks.size()) return;
        const Task& t = tasks[i];
        double limit_s = kSolveLimitS;
        if (deadline) {
          const double left_s = std::chrono::duration<double>(*deadline - Clock::now()).count();
          if (left_s <= 0 && !accept_cut_solves) {
            skipped[i] = 1;
            continue;
          }
          if (left_s < limit_s) {
            limit_s = std::max(left_s, accept_cut_solves ? kCutSolveLimitS : 0.0);
            shortened[i] = 1;
          }
        }
        intra_op::CostHooks h;
        h.collective = hooks[static_cast<std::size_t>(t.hook)];
        // Replicated memory-bound work (strategies.h); the even split is compute_for's.
        h.memory_bound = [this](core::Bytes b) { return cost_.memory_bound(b); };
        intra_op::IntraOpOptions o;
        o.time_limit = core::seconds(limit_s);
        o.stop_at_time_limit = shortened[i] != 0;
        const auto& graph = t.variant == 0 ? p.graphs.at(t.rep) : p.graphs_w.at(t.rep);
        results[i] = pass.run(graph, t.mesh, h, o);
        if (accept_cut_solves && shortened[i] != 0 && results[i].ok() &&
            (results[i].value().feasibility == intra_op::Feasibility::kTimedOut ||
             results[i].value().node_cost_s.size() != graph.nodes.size())) {
          // Cut before it had any layout: the first point needs one, so solve it fully. (The
          // search's solves have no memory limit, so none ends out of memory without one.)
          o.time_limit = core::seconds(kSolveLimitS);
          o.stop_at_time_limit = false;
          shortened[i] = 0;
          results[i] = pass.run(graph, t.mesh, h, o);
        }
      }
    };
    const int threads = std::max(1, std::min<int>(in_.options.threads, static_cast<int>(tasks.size())));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (skipped[i] != 0) {
        interrupted = true;
        continue;
      }
      ++solves_;
      if (!results[i].ok()) return results[i].status();
      if (shortened[i] != 0 && !results[i].value().proven_optimal) {
        if (!accept_cut_solves) {
          interrupted = true;  // perhaps cut by the deadline: not the answer without one
          continue;
        }
        ++approximate_solves;  // the first point's: kept as solved
      }
      const Task& t = tasks[i];
      const std::string key = cost_key(p, t.rep, t.sub, t.mesh, t.variant);
      costs_.emplace(key, to_layer_cost(p, t.rep, t.mesh, t.variant, results[i].value(),
                                        hooks[static_cast<std::size_t>(t.hook)]));
      plans_.emplace(key, std::move(results[i]).value());
    }
    return core::Status();
  }

  // The intra-op pass's collective hook of a mesh (make_collective_hook), cached.
  core::Result<const intra_op::CollectiveCostFn*> hook(const SubmeshShape& sub, const LogicalMesh& mesh) {
    const std::string mk = mesh_key(sub, mesh);
    auto it = hooks_.find(mk);
    if (it == hooks_.end()) {
      ALPASIM_ASSIGN_OR_RETURN(intra_op::CollectiveCostFn h, adapters::make_collective_hook(cost_, sub, mesh));
      it = hooks_.emplace(mk, std::move(h)).first;
    }
    return &it->second;
  }

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
                                     const std::map<int, std::string>* written = nullptr) {
    static const BoundaryCost kNone;
    if (l <= 0 || l >= p.num_layers || mesh.num_devices() == 1) return kNone;
    const int cls = p.boundary_class[static_cast<std::size_t>(l)];
    if (cls < 0) return kNone;
    auto suffix = [&](int layer) -> std::string {
      if (written == nullptr) return "";
      auto w = written->find(layer);
      return w == written->end() ? "" : w->second;
    };
    std::string key = std::to_string(p.mbs) + "|" + std::to_string(static_cast<int>(p.recompute)) +
                      "|" + std::to_string(cls) + "|" + mesh_key(sub, mesh) + "|" +
                      std::to_string(variant);
    for (const BoundaryEdge& e : p.boundary[static_cast<std::size_t>(l)]) {
      key += suffix(e.producer_layer) + suffix(e.consumer_layer);
    }
    auto it = boundary_costs_.find(key);
    if (it != boundary_costs_.end()) return it->second;
    std::vector<BoundaryTransfer> transfers;
    for (const BoundaryEdge& e : p.boundary[static_cast<std::size_t>(l)]) {
      const int prep = p.rep[static_cast<std::size_t>(e.producer_layer)];
      const int crep = p.rep[static_cast<std::size_t>(e.consumer_layer)];
      int pu = e.producer_node, cv = e.consumer_node;
      if (variant == 1) {
        pu = p.node_w.at(prep)[static_cast<std::size_t>(pu)];
        cv = p.node_w.at(crep)[static_cast<std::size_t>(cv)];
        ALPASIM_CHECK(pu >= 0 && cv >= 0) << "variant 1 adds weight gradients, it removes no node";
      }
      const auto& from = layer_plan(p, e.producer_layer, sub, mesh, variant, suffix(e.producer_layer)).shardings;
      const auto& to = layer_plan(p, e.consumer_layer, sub, mesh, variant, suffix(e.consumer_layer)).shardings;
      ALPASIM_CHECK(static_cast<std::size_t>(pu) < from.size() && static_cast<std::size_t>(cv) < to.size());
      const auto& node = p.graphs.at(crep).nodes[static_cast<std::size_t>(e.consumer_node)];
      transfers.push_back({node.shape, node.element_bytes, from[static_cast<std::size_t>(pu)].output,
                           to[static_cast<std::size_t>(cv)].output, e.phase});
    }
    auto fn = hook(sub, mesh);
    ALPASIM_CHECK(fn.ok()) << fn.status().message();  // built by ensure_costs for this mesh
    const BoundaryCost b = price_boundary(transfers, mesh, **fn);
    if (std::getenv("ALPASIM_SEARCH_DEBUG") != nullptr) {
      std::fprintf(stderr, "boundary %d mbs %lld rc %d mesh %s var %d: %zu tensors, fwd %.3g bwd %.3g rc %.3g s\n",
                   l, static_cast<long long>(p.mbs), static_cast<int>(p.recompute),
                   mesh_key(sub, mesh).c_str(), variant, transfers.size(), b.forward_s, b.backward_s,
                   b.recompute_s);
    }
    return boundary_costs_.emplace(key, b).first->second;
  }

  // `written`: "" for the search's solution of the layer, else the suffix
  // price_written_layouts returned for the layouts a plan writes.
  const LayerCost& layer_cost(const Point& p, int layer, const SubmeshShape& sub,
                              const LogicalMesh& mesh, int variant, const std::string& written = "") const {
    if (mesh.num_devices() == 1) variant = 0;
    return costs_.at(cost_key(p, p.rep[static_cast<std::size_t>(layer)], sub, mesh, variant) + written);
  }
  const intra_op::IntraOpPlan& layer_plan(const Point& p, int layer, const SubmeshShape& sub,
                                          const LogicalMesh& mesh, int variant,
                                          const std::string& written = "") const {
    if (mesh.num_devices() == 1) variant = 0;
    return plans_.at(cost_key(p, p.rep[static_cast<std::size_t>(layer)], sub, mesh, variant) + written);
  }

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
                                                                const LogicalMesh& mesh, int* variant) {
    std::map<std::string, const schema::OperatorSharding*> by_name;
    for (const auto& sh : st.shardings) by_name.emplace(sh.op, &sh);
    *variant = 0;
    for (const ir::Op& op : p.graph.ops()) {
      if (op.layer >= st.layer_begin && op.layer < st.layer_end && op.phase == ir::Phase::kOptimizer &&
          by_name.count(op.name) != 0) {
        *variant = 1;
        break;
      }
    }
    ALPASIM_ASSIGN_OR_RETURN(const intra_op::CollectiveCostFn* fn, hook(sub, mesh));
    std::map<int, std::string> suffixes;
    for (auto l = st.layer_begin; l < st.layer_end; ++l) {
      const int layer = static_cast<int>(l);
      const int rep = p.rep[static_cast<std::size_t>(layer)];
      std::vector<ir::OpId> own;
      ALPASIM_RETURN_IF_ERROR(
          adapters::layer_range_graph(p.graph, layer, layer + 1, &own, *variant == 1).status());
      std::vector<std::optional<schema::OperatorSharding>> required(own.size());
      std::string layouts = std::to_string(*variant);
      for (std::size_t i = 0; i < own.size(); ++i) {
        const ir::Op& op = p.graph.op(own[i]);
        layouts += ';';
        // Every node the stage gives a layout: the layer's operators and weights, a tied
        // weight of another layer, and a tensor from the previous layer of the stage (it
        // arrives in its producer's layout; converting it is priced inside this layer).
        auto it = by_name.find(op.name);
        if (it == by_name.end()) continue;
        required[i] = *it->second;
        if (op.layer != layer || op.is_source()) {
          // A weight or a tensor of another layer is a source here: its output layout only.
          required[i]->strategy.clear();
          required[i]->inputs.clear();
        }
        layouts += it->second->strategy + ":";
        for (const auto& spec : it->second->inputs) layouts += spec.to_string() + ",";
        layouts += ">" + it->second->output.to_string();
      }
      const std::string suffix =
          "|written" + std::to_string(written_layouts_.emplace(layouts, written_layouts_.size()).first->second);
      suffixes.emplace(layer, suffix);
      const std::string key = cost_key(p, rep, sub, mesh, *variant) + suffix;
      if (costs_.count(key) != 0) continue;
      intra_op::CostHooks h;
      h.collective = *fn;
      h.memory_bound = [this](core::Bytes b) { return cost_.memory_bound(b); };
      intra_op::IntraOpOptions o;
      o.time_limit = core::seconds(30.0);
      o.required = std::move(required);
      intra_op::IntraOpPass pass;
      const auto& graph = *variant == 0 ? p.graphs.at(rep) : p.graphs_w.at(rep);
      auto solved = pass.run(graph, mesh, h, o);
      if (!solved.ok()) {
        return solved.status().with_context("/stages/" + std::to_string(stage_index) + "/shardings (layer " +
                                            std::to_string(layer) + ")");
      }
      ++solves_;
      costs_.emplace(key, to_layer_cost(p, rep, mesh, *variant, solved.value(), *fn));
      plans_.emplace(key, std::move(solved).value());
    }
    return suffixes;
  }

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
    bool blocking_p2p = false;
    bool local_all_gather = true;
    // GPUs of each all-gather group after a local-all-gather send: 0 = the whole receiving
    // mesh gathers the whole tensor (Alpa §5); t = each group of t consecutive GPUs gathers
    // its t/|mesh| of it (Megatron's scatter-gather: a tensor-parallel group per replica).
    std::int64_t all_gather_group = 0;
    // dp > 1: groups per mesh for the gradient collective (concurrent), set by the caller.
    std::vector<std::vector<std::vector<std::int64_t>>> dp_groups;
  };

  core::Result<Evaluated> simulate(const Lowering& lw, const schema::Plan& plan) {
    ALPASIM_ASSIGN_OR_RETURN(sim::PipelineProblem pb, problem_of(lw, plan));
    if (prune_above_s || skip_unfit) {
      auto overflows = cannot_fit(pb);
      const bool unfit = overflows.ok() && overflows.value();
      if (prune_above_s) {
        // Exact skips: the simulated time is >= the bound (pipeline_bound.h), so a plan whose
        // bound exceeds *prune_above_s cannot beat the plan the caller compares with; nor
        // can a plan whose memory bound says it does not fit (that plan fits).
        auto bound = pipeline_lower_bound(pb);
        if (unfit || (bound.ok() && sim::to_seconds(bound.value()).value() > *prune_above_s)) {
          ++candidates_pruned;
          Evaluated skipped;
          skipped.error = "pruned by its lower bound";
          return skipped;  // ok = false: never better than anything
        }
      } else if (unfit) {
        Evaluated skipped;
        skipped.prediction.fits = false;
        skipped.error = "cannot fit by its memory bound";
        return skipped;
      }
    }
    return run_problem(std::move(pb), plan);
  }

  // Bytes/s of one receiving GPU's flow of a pipeline send from the GPUs `from` to the
  // GPUs `to`. Every receiving GPU gets its part at the same time (the whole tensor, or
  // 1/k of it before the local all-gather), sent by the GPU at its position in `from`;
  // flows that leave a node share its NICs and network links (Topology::concurrent_groups
  // of the disjoint (sender, receiver) pairs, min(|from|, |to|) of them: a sender serving
  // several receivers is counted once, which undercounts its NIC's load). Each flow gets
  // the smaller of its point-to-point bandwidth and that share; the slowest flow sets the
  // link. Cached: the search evaluates the same mesh pairs many times.
  double send_flow_bandwidth(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to) {
    auto key = std::make_pair(from, to);
    if (auto it = send_bandwidth_.find(key); it != send_bandwidth_.end()) return it->second;
    const cluster::Topology& topo = cost_.topology();
    std::vector<std::vector<std::int64_t>> pairs;
    double bandwidth = topo.point_to_point(from.front(), to.front()).bandwidth.value();
    for (std::size_t i = 0; i < std::min(from.size(), to.size()); ++i) {
      if (from[i] == to[i]) continue;
      bandwidth = std::min(bandwidth, topo.point_to_point(from[i], to[i]).bandwidth.value());
      if (topo.domain_of(from[i]) != topo.domain_of(to[i])) pairs.push_back({from[i], to[i]});
    }
    if (!pairs.empty()) {
      auto groups = topo.concurrent_groups(pairs);
      ALPASIM_CHECK(groups.ok()) << groups.status().message();  // pairs are disjoint and valid
      for (const cluster::GroupInfo& g : groups.value()) {
        bandwidth = std::min(bandwidth, g.inter_rank_bandwidth.value());
      }
    }
    send_bandwidth_.emplace(std::move(key), bandwidth);
    return bandwidth;
  }

  // The simulator input of a lowered plan (validated, not simulated).
  core::Result<sim::PipelineProblem> problem_of(const Lowering& lw, const schema::Plan& plan) {
    sim::PipelineProblem pb;
    const int p = static_cast<int>(lw.mesh_devices.size());
    const int chunks = static_cast<int>(lw.chunk_layers.size());
    const int v = chunks / p;
    pb.schedule = plan.schedule == schema::Schedule::kGpipe ? sim::PipelineSchedule::kGPipe
                  : v > 1 ? sim::PipelineSchedule::kInterleaved1F1B
                          : sim::PipelineSchedule::kOneFOneB;
    pb.num_microbatches = static_cast<int>(plan.num_microbatches);
    pb.interleave = v;
    pb.data_parallel = lw.data_parallel;
    pb.grad_sync_mode = lw.grad_sync_mode;
    pb.blocking_p2p = lw.blocking_p2p;
    for (int m = 0; m < p; ++m) {
      sim::MeshSpec ms;
      ms.num_gpus = lw.mesh_gpus[static_cast<std::size_t>(m)];
      ms.memory_limit = core::bytes(memory_limit_);
      pb.meshes.push_back(ms);
    }
    // One link per mesh pair and direction, carrying one receiving GPU's flow (the
    // simulator moves each GPU's part, all at once): the point-to-point bandwidth of the
    // meshes' first GPUs, or less where the flows of all the receiving GPUs leave a node
    // through the NICs they share (send_flow_bandwidth).
    auto route = [&](int from, int to) {
      const auto& from_devices = lw.mesh_devices[static_cast<std::size_t>(from)];
      const auto& to_devices = lw.mesh_devices[static_cast<std::size_t>(to)];
      const auto a = from_devices.front();
      const auto b = to_devices.front();
      sim::Route r;
      if (a == b) return r;
      const cluster::PathInfo path = cost_.topology().point_to_point(a, b);
      sim::LinkSpec link;
      link.name = "mesh" + std::to_string(from) + "->mesh" + std::to_string(to);
      link.capacity = core::BytesPerSecond(send_flow_bandwidth(from_devices, to_devices));
      pb.links.push_back(link);
      r.links.push_back(static_cast<sim::LinkId>(pb.links.size() - 1));
      r.latency = path.latency;
      return r;
    };
    if (p > 1) {
      for (int m = 0; m < p; ++m) {
        const int next = (m + 1) % p;
        const int prev = (m + p - 1) % p;
        if (m + 1 < p || v > 1) pb.meshes[static_cast<std::size_t>(m)].send_next = route(m, next);
        if (m > 0 || v > 1) pb.meshes[static_cast<std::size_t>(m)].send_prev = route(m, prev);
      }
    }
    // Tied weights read by a chunk on a mesh that does not own them (GPT's word embedding
    // on the head's mesh): that mesh holds a copy, its gradient and optimizer state
    // (counted on its first chunk that reads it), and after the backward each device
    // all-reduces the copy's gradient with its peer on the owner's mesh, as Megatron does
    // and sim/lowering prices it (megatron/training.py, "All-reduce word_embeddings' grad
    // across first and last stages"): once per iteration, on both chunks.
    std::vector<std::int64_t> tied_b(static_cast<std::size_t>(chunks), 0);
    std::vector<std::int64_t> tied_os(static_cast<std::size_t>(chunks), 0);
    std::vector<double> tied_ar_s(static_cast<std::size_t>(chunks), 0);
    std::vector<std::vector<sim::BlockingCollective>> tied_calls(static_cast<std::size_t>(chunks));
    {
      std::set<std::pair<int, int>> counted;  // (mesh, owner layer)
      for (int c = 0; c < chunks; ++c) {
        for (const LayerCost& l : lw.chunk_layers[static_cast<std::size_t>(c)]) {
          if (l.tied_owner < 0 || l.tied_param_b <= 0) continue;
          int oc = -1;
          for (int k = 0; k < chunks && k < static_cast<int>(plan.stages.size()); ++k) {
            const auto& sk = plan.stages[static_cast<std::size_t>(k)];
            if (sk.layer_begin <= l.tied_owner && l.tied_owner < sk.layer_end) oc = k;
          }
          if (oc < 0 || oc % p == c % p || !counted.insert({c % p, l.tied_owner}).second) continue;
          tied_b[static_cast<std::size_t>(c)] += l.tied_param_b;
          tied_os[static_cast<std::size_t>(c)] += l.tied_opt_b;
          const auto& reader = lw.mesh_devices[static_cast<std::size_t>(c % p)];
          const auto& owner = lw.mesh_devices[static_cast<std::size_t>(oc % p)];
          std::vector<std::vector<std::int64_t>> pairs;
          for (std::size_t i = 0; i < std::min(reader.size(), owner.size()); ++i) {
            pairs.push_back({owner[i], reader[i]});
          }
          if (pairs.empty()) continue;
          ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> gi, cost_.concurrent_groups(pairs));
          const cost_model::CollectiveEstimate e =
              cost_.collective(cost_model::Collective::kAllReduce, core::bytes(l.tied_param_b), gi.front());
          tied_ar_s[static_cast<std::size_t>(c)] += e.time.value();
          tied_ar_s[static_cast<std::size_t>(oc)] += e.time.value();
          const sim::BlockingCollective call = traced_collective(
              cost_model::Collective::kAllReduce, l.tied_param_b, 2, e, "tied weights of layer " +
              std::to_string(l.tied_owner));
          tied_calls[static_cast<std::size_t>(c)].push_back(call);
          tied_calls[static_cast<std::size_t>(oc)].push_back(call);
        }
      }
    }
    for (int c = 0; c < chunks; ++c) {
      const auto& layers = lw.chunk_layers[static_cast<std::size_t>(c)];
      sim::StageCosts st;
      double fwd = 0, bwd = 0, rc = 0, fc = 0, bc = 0, gs = 0, opt = 0, ff = 0, bf = 0, rf = 0;
      std::int64_t act = 0, work = 0, par = 0, grad = 0, os = 0;
      for (const LayerCost& l : layers) {
        fwd += l.fwd_s; bwd += l.bwd_s; rc += l.rc_s; fc += l.fwd_comm_s; bc += l.bwd_comm_s;
        if (!plan.gradient_accumulation_fusion) bwd += l.accumulate_gemm_s;
        gs += l.grad_sync_s; opt += l.opt_s; ff += l.fwd_flops; bf += l.bwd_flops; rf += l.rc_flops;
        act += l.act_b; work = std::max(work, l.work_b); par += l.param_b; grad += l.grad_b;
        os += l.opt_b;
      }
      // A tensor saved for the next layer's backward is stored by the chunk that runs it.
      if (c + 1 < chunks && !layers.empty()) act -= layers.back().saved_only_for_next_b;
      if (c > 0 && !lw.chunk_layers[static_cast<std::size_t>(c - 1)].empty()) {
        act += lw.chunk_layers[static_cast<std::size_t>(c - 1)].back().saved_for_next_b;
      }
      par += tied_b[static_cast<std::size_t>(c)];
      grad += tied_b[static_cast<std::size_t>(c)];
      os += tied_os[static_cast<std::size_t>(c)];
      st.forward_s = core::seconds(fwd);
      st.backward_s = core::seconds(bwd);
      st.recompute_s = core::seconds(rc);
      st.forward_tp_comm_s = core::seconds(std::min(fc, fwd));
      st.backward_tp_comm_s = core::seconds(std::min(bc, bwd));
      if (list_collectives && c < static_cast<int>(plan.stages.size())) {
        // The backward runs the chunk's layers last to first; the forward (and its
        // recomputation) first to last. Each call is named after the layer that runs it.
        const std::int64_t first_layer = plan.stages[static_cast<std::size_t>(c)].layer_begin;
        auto add = [&](const LayerCost::Calls& calls, std::size_t i, std::vector<sim::BlockingCollective>* to) {
          if (!calls) return;
          for (sim::BlockingCollective call : *calls) {
            call.where = "layer " + std::to_string(first_layer + static_cast<std::int64_t>(i)) + " " + call.where;
            to->push_back(std::move(call));
          }
        };
        for (std::size_t i = 0; i < layers.size(); ++i) {
          add(layers[i].fwd_calls, i, &st.forward_collectives);
          add(layers[i].rc_calls, i, &st.recompute_collectives);
        }
        for (std::size_t i = layers.size(); i-- > 0;) add(layers[i].bwd_calls, i, &st.backward_collectives);
      }
      st.forward_flops = core::Flops(ff);
      st.backward_flops = core::Flops(bf);
      st.recompute_flops = core::Flops(rf);
      st.stored_activation_bytes = core::bytes(act);
      st.working_activation_bytes = core::bytes(work);
      st.parameter_bytes = core::bytes(par);
      st.gradient_bytes = core::bytes(grad);
      st.optimizer_state_bytes = core::bytes(os);
      if (c < static_cast<int>(lw.chunk_memory.size()) && lw.chunk_memory[static_cast<std::size_t>(c)]) {
        const StageMemory& sm = *lw.chunk_memory[static_cast<std::size_t>(c)];
        st.stored_activation_bytes = core::bytes(sm.stored_bytes);
        st.forward_working_activation_bytes = core::bytes(sm.forward_working_bytes);
        st.working_activation_bytes = core::bytes(sm.backward_working_bytes);
        st.backward_received_ahead_bytes = core::bytes(sm.backward_received_ahead_bytes);
        st.backward_received_earlier_bytes = core::bytes(sm.backward_received_earlier_bytes);
        st.parameter_bytes = core::bytes(sm.parameter_bytes + sm.received_parameter_bytes);
        st.gradient_bytes = core::bytes(sm.gradient_bytes);
        st.optimizer_state_bytes = core::bytes(sm.optimizer_state_bytes);
      }
      const int mesh = c % p;
      const int next_mesh = (c + 1) % p;
      if (c + 1 < chunks && !layers.empty()) {
        st.output_activation_bytes = core::bytes(layers.back().boundary_b);
        const auto& nd = lw.mesh_devices[static_cast<std::size_t>(next_mesh)];
        if (lw.local_all_gather && nd.size() > 1) {
          st.output_reshard = sim::ReshardMode::kLocalAllGather;
          st.reshard_group = static_cast<int>(nd.size());
          const auto mesh_size = static_cast<std::int64_t>(nd.size());
          const std::int64_t gather = lw.all_gather_group > 0 ? lw.all_gather_group : mesh_size;
          ALPASIM_CHECK(mesh_size % gather == 0) << gather << " does not divide " << mesh_size;
          st.reshard_all_gather_s = core::seconds(0.0);
          if (gather > 1) {
            const std::vector<std::int64_t> first_group(nd.begin(), nd.begin() + gather);
            ALPASIM_ASSIGN_OR_RETURN(cluster::GroupInfo g, cost_.group(first_group));
            const std::int64_t bytes = layers.back().boundary_b / (mesh_size / gather);
            const cost_model::CollectiveEstimate e =
                cost_.collective(cost_model::Collective::kAllGather, core::bytes(bytes), g);
            st.reshard_all_gather_s = e.time;
            if (list_collectives) {
              st.reshard_collectives = {traced_collective(cost_model::Collective::kAllGather, bytes,
                                                          static_cast<int>(gather), e, "stage boundary",
                                                          "reshard_collective")};
            }
          }
        }
      }
      if (lw.data_parallel > 1) {
        st.grad_sync_bytes = core::bytes(par);
        st.optimizer_step_s = core::seconds(opt);
        if (par > 0) {
          const auto& groups = lw.dp_groups[static_cast<std::size_t>(mesh)];
          ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> gi, cost_.concurrent_groups(groups));
          const auto kind = lw.grad_sync_mode == sim::GradSyncMode::kAllReduce
                                ? cost_model::Collective::kAllReduce
                                : cost_model::Collective::kReduceScatter;
          const cost_model::CollectiveEstimate e = cost_.collective(kind, core::bytes(par), gi.front());
          st.grad_sync_s = e.time;
          const int group = static_cast<int>(groups.front().size());
          if (list_collectives) st.grad_sync_collectives = {traced_collective(kind, par, group, e, "gradients")};
          if (lw.grad_sync_mode == sim::GradSyncMode::kReduceScatterAllGather) {
            const cost_model::CollectiveEstimate ag =
                cost_.collective(cost_model::Collective::kAllGather, core::bytes(par), gi.front());
            st.param_all_gather_s = ag.time;
            if (list_collectives) {
              st.param_all_gather_collectives = {
                  traced_collective(cost_model::Collective::kAllGather, par, group, ag, "parameters")};
            }
          }
        }
      } else {
        // Gradient collectives inside the stage mesh (the intra-op pass's weight-update
        // sharding, the replicas' all-reduce of a data-parallel mesh) run once per
        // iteration as their own task after the chunk's last backward, before the step.
        st.optimizer_step_s = core::seconds(opt);
        if (gs > 0) st.grad_sync_s = core::seconds(gs);
        if (list_collectives && c < static_cast<int>(plan.stages.size())) {
          const std::int64_t first_layer = plan.stages[static_cast<std::size_t>(c)].layer_begin;
          for (std::size_t i = 0; i < layers.size(); ++i) {
            for (const LayerCost::Calls& calls : {layers[i].sync_calls, layers[i].replica_sync_calls}) {
              if (!calls) continue;
              for (sim::BlockingCollective call : *calls) {
                call.where = "layer " + std::to_string(first_layer + static_cast<std::int64_t>(i)) + " " +
                             call.where;
                st.grad_sync_collectives.push_back(std::move(call));
              }
            }
          }
        }
      }
      if (const double ar = tied_ar_s[static_cast<std::size_t>(c)]; ar > 0) {
        const auto& calls = tied_calls[static_cast<std::size_t>(c)];
        if (st.grad_sync_s) {
          *st.grad_sync_s += core::seconds(ar);
          if (list_collectives) st.grad_sync_collectives.insert(st.grad_sync_collectives.end(), calls.begin(), calls.end());
        } else if (lw.data_parallel == 1) {
          st.grad_sync_s = core::seconds(ar);
          if (list_collectives) st.grad_sync_collectives = calls;
        } else {
          st.optimizer_step_s += core::seconds(ar);  // a data-parallel chunk with no gradients
        }
      }
      pb.stages.push_back(st);
    }
    ALPASIM_RETURN_IF_ERROR(sim::validate(pb));
    return pb;
  }

  // Simulates a problem built by problem_of.
  core::Result<Evaluated> run_problem(sim::PipelineProblem pb, const schema::Plan& plan) {
    ALPASIM_ASSIGN_OR_RETURN(sim::PipelineSimulation s, sim::simulate_pipeline(pb));
    Evaluated e;
    e.plan = plan;
    e.problem = std::move(pb);
    const sim::PipelineReport& r = s.report;
    Prediction& pr = e.prediction;
    pr.iteration_time_s = r.iteration_time.value();
    pr.model_tflops_per_gpu = r.model_flops_per_gpu.value() / 1e12;
    pr.hardware_tflops_per_gpu = r.hardware_flops_per_gpu.value() / 1e12;
    pr.samples_per_s = pr.iteration_time_s > 0
                           ? static_cast<double>(plan.global_batch_size) / pr.iteration_time_s
                           : 0;
    pr.bubble_fraction = r.bubble_fraction;
    pr.peak_memory_bytes = r.peak_memory_bytes;
    for (const auto& d : r.devices) pr.peak_memory_bytes_per_stage.push_back(d.peak_memory_bytes);
    pr.fits = r.overflows.empty();
    if (!pr.fits) pr.memory_message = r.memory_status().message();
    e.ok = true;
    return e;
  }

  // Evaluates a plan whose stages carry submesh + logical mesh, under the intra-op costs.
  // `variants`: the intra-op variant of every stage (empty: inferred from the stages'
  // shardings, variant 0 for stages without).
  core::Result<Evaluated> evaluate(const schema::Plan& plan, std::vector<int> variants = {}) {
    // A plan from outside (evaluate_plan) runs as written; a search candidate's multi-GPU
    // stages get the intra-op solution's shardings afterwards (fill_shardings).
    const bool as_written = variants.empty();
    if (plan.global_batch_size % plan.num_microbatches != 0) {
      return core::invalid_argument("global batch " + std::to_string(plan.global_batch_size) +
                                    " is not divisible by " +
                                    std::to_string(plan.num_microbatches) + " microbatches");
    }
    const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
    ALPASIM_ASSIGN_OR_RETURN(Point * pt, point(mbs, plan.recompute));
    std::vector<std::pair<SubmeshShape, LogicalMesh>> meshes;
    for (const auto& st : plan.stages) {
      meshes.push_back({{st.submesh_nodes, st.submesh_gpus_per_node},
                        {st.logical_rows, st.logical_cols}});
    }
    // A multi-GPU stage that lists a weight's layout is not the search's (which lists
    // none): it is priced as written without solving the search's layouts to compare.
    std::vector<bool> lists_weights(plan.stages.size(), false);
    if (as_written) {
      std::set<std::string> weight_names;
      for (std::size_t c = 0; c < plan.stages.size(); ++c) {
        const auto& st = plan.stages[c];
        if (st.shardings.empty() || st.logical_rows * st.logical_cols == 1) continue;
        if (weight_names.empty()) {
          for (const ir::Op& op : pt->graph.ops()) {
            if (op.kind == ir::OpKind::kParameter) weight_names.insert(op.name);
          }
        }
        for (const auto& sh : st.shardings) {
          if (weight_names.count(sh.op) != 0) {
            lists_weights[c] = true;
            break;
          }
        }
      }
    }
    {
      std::vector<std::pair<SubmeshShape, LogicalMesh>> search_meshes;
      for (std::size_t c = 0; c < meshes.size(); ++c) {
        if (!lists_weights[c]) search_meshes.push_back(meshes[c]);
      }
      ALPASIM_RETURN_IF_ERROR(ensure_costs(*pt, search_meshes));
      if (interrupted) {  // some layer was left unsolved at the deadline
        Evaluated cut;  // ok = false: never better than anything, and no fitting answer
        cut.prediction.fits = false;
        cut.error = "stopped by the time limit";
        return cut;
      }
    }
    const int v = static_cast<int>(plan.interleave);
    const int chunks = static_cast<int>(plan.stages.size());
    if (chunks % v != 0) return core::invalid_argument("stages are not a multiple of interleave");
    if (plan.stages.back().layer_end != pt->num_layers) {
      return core::invalid_argument("the plan's stages end at layer " +
                                    std::to_string(plan.stages.back().layer_end) +
                                    " but the model has " + std::to_string(pt->num_layers) +
                                    " layers");
    }
    // Per chunk: the layouts it writes that are not the search's solution (a plan written
    // by hand or by another tool), by layer (price_written_layouts); empty otherwise.
    std::vector<std::map<int, std::string>> written(static_cast<std::size_t>(chunks));
    if (variants.empty()) {
      for (std::size_t c = 0; c < plan.stages.size(); ++c) {
        const auto& st = plan.stages[c];
        int var = 0;
        if (!st.shardings.empty() && st.logical_rows * st.logical_cols > 1) {
          // The search's own layouts (variant 1, or 0) keep its costs; others are priced
          // as written.
          bool own = false;
          for (int candidate : {1, 0}) {
            if (lists_weights[c]) break;
            schema::PlanStage probe = st;
            probe.shardings.clear();
            fill_shardings(*pt, &probe, candidate);
            if (probe.shardings == st.shardings) {
              var = candidate;
              own = true;
              break;
            }
          }
          if (!own) {
            ALPASIM_ASSIGN_OR_RETURN(written[c], price_written_layouts(*pt, st, static_cast<int>(c),
                                                                       meshes[c].first, meshes[c].second, &var));
          }
        }
        variants.push_back(var);
      }
    }
    Lowering lw;
    lw.blocking_p2p = plan.p2p == schema::P2pMode::kBlocking;
    const int p = chunks / v;
    for (int c = 0; c < chunks; ++c) {
      const auto& st = plan.stages[static_cast<std::size_t>(c)];
      const auto& written_c = written[static_cast<std::size_t>(c)];
      std::vector<LayerCost> layers;
      for (auto l = st.layer_begin; l < st.layer_end; ++l) {
        const auto w = written_c.find(static_cast<int>(l));
        LayerCost lc = layer_cost(*pt, static_cast<int>(l), meshes[static_cast<std::size_t>(c)].first,
                                  meshes[static_cast<std::size_t>(c)].second,
                                  variants[static_cast<std::size_t>(c)],
                                  w == written_c.end() ? std::string() : w->second);
        if (!st.weight_update_sharding && lc.opt_replicated_b > lc.opt_b) {
          // The plan keeps every replica's optimizer states whole: each device holds and
          // updates the states of its parameter shards (the step is memory-bound over them).
          if (lc.opt_b > 0 && lc.opt_bytes > 0) {
            lc.opt_bytes *= static_cast<double>(lc.opt_replicated_b) / static_cast<double>(lc.opt_b);
            lc.opt_s = cost_.memory_bound(core::bytes(static_cast<std::int64_t>(lc.opt_bytes))).value();
          }
          lc.opt_b = lc.opt_replicated_b;
        }
        if (!st.weight_update_sharding) {
          lc.tied_opt_b = lc.tied_opt_replicated_b;
          // Whole states on every replica: the replicas all-reduce their gradients.
          lc.grad_sync_s += lc.replica_sync_all_reduce_s - lc.replica_sync_rs_ag_s;
          lc.replica_sync_calls = lc.replica_all_reduce_calls;
        }
        if (l > st.layer_begin) {
          const BoundaryCost& b = layer_boundary(*pt, static_cast<int>(l), meshes[static_cast<std::size_t>(c)].first,
                                                 meshes[static_cast<std::size_t>(c)].second,
                                                 variants[static_cast<std::size_t>(c)],
                                                 written_c.empty() ? nullptr : &written_c);
          lc.fwd_s += b.forward_s;
          lc.fwd_comm_s += b.forward_s;
          lc.bwd_s += b.backward_s;
          lc.bwd_comm_s += b.backward_s;
          lc.rc_s += b.recompute_s;
          if (list_collectives) {
            // The tensors from the layer before, resharded into this layer's layouts when it
            // starts (forward, recomputation), and their gradients back when its backward ends.
            auto with_boundary = [&](const LayerCost::Calls& calls, double seconds, bool at_end) {
              auto out = std::make_shared<std::vector<sim::BlockingCollective>>();
              if (calls) *out = *calls;
              if (!(seconds > 0)) return LayerCost::Calls(std::move(out));
              sim::BlockingCollective call;
              call.collective = "reshard";
              call.algorithm = "layer boundary";
              call.group_size = static_cast<int>(meshes[static_cast<std::size_t>(c)].second.num_devices());
              call.time = core::seconds(seconds);
              call.where = "boundary from the layer before";
              out->insert(at_end ? out->end() : out->begin(), std::move(call));
              return LayerCost::Calls(std::move(out));
            };
            lc.fwd_calls = with_boundary(lc.fwd_calls, b.forward_s, false);
            lc.bwd_calls = with_boundary(lc.bwd_calls, b.backward_s, true);
            lc.rc_calls = with_boundary(lc.rc_calls, b.recompute_s, false);
          }
        }
        layers.push_back(lc);
      }
      ALPASIM_RETURN_IF_ERROR(coalesce_replica_sync(meshes[static_cast<std::size_t>(c)].first,
                                                    meshes[static_cast<std::size_t>(c)].second,
                                                    st.weight_update_sharding, &layers));
      lw.chunk_layers.push_back(std::move(layers));
      if (c < p) {
        lw.mesh_devices.push_back(st.device_ids);
        lw.mesh_gpus.push_back(static_cast<int>(st.device_ids.size()));
      }
    }
    lw.all_gather_group = written_send_gather_group(*pt, plan, meshes, variants, written);
    ALPASIM_RETURN_IF_ERROR(fill_stage_memory(plan, as_written, &lw));
    ALPASIM_ASSIGN_OR_RETURN(Evaluated e, simulate(lw, plan));
    e.variants = std::move(variants);
    e.by_evaluator = true;
    return e;
  }

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
                                         const std::vector<std::map<int, std::string>>& written) const {
    std::optional<std::int64_t> group;
    for (std::size_t c = 0; c + 1 < plan.stages.size(); ++c) {
      const auto& mesh = meshes[c].second;
      if (written[c].empty() || variants[c] != 0 || !(meshes[c + 1].second == mesh)) return 0;
      const int last = static_cast<int>(plan.stages[c].layer_end) - 1;
      const auto& solved = layer_plan(p, last, meshes[c].first, mesh, 0, written[c].at(last));
      for (const BoundaryEdge& e : p.boundary[static_cast<std::size_t>(last + 1)]) {
        if (e.producer_layer != last || e.phase != ir::Phase::kForward) continue;
        const schema::ShardingSpec& spec = solved.shardings.at(static_cast<std::size_t>(e.producer_node)).output;
        const bool rows = mesh.rows > 1 && spec.uses_mesh_axis(0);
        const bool cols = mesh.cols > 1 && spec.uses_mesh_axis(1);
        const std::int64_t g = rows && cols ? 1 : rows ? mesh.cols : cols ? 0 : mesh.num_devices();
        if (g == 0 || (group && *group != g)) return 0;
        group = g;
      }
    }
    return group && *group < meshes.front().second.num_devices() ? *group : 0;
  }

  // The executor's memory (stage_memory.h) of every chunk: one GPU, or, in a plan
  // evaluated as written, a multi-GPU chunk lowered data parallel (stage_memory) or
  // operator by operator from its shardings (ShardedPlanMemory, its whole-plan work done
  // once per plan, not once per chunk). A search candidate's
  // multi-GPU chunks (sharded once emitted) keep the layer sums. Data-parallel walks are
  // cached per (per-device batch, recompute, stage ranges, meshes, chunk, mesh size,
  // weight-update sharding): the walk is O(operators of the graph).
  core::Status fill_stage_memory(const schema::Plan& plan, bool as_written, Lowering* lw) {
    const auto chunks = plan.stages.size();
    lw->chunk_memory.assign(chunks, std::nullopt);
    const int p = static_cast<int>(lw->mesh_devices.size());
    const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
    std::vector<std::int64_t> starts;
    for (const auto& st : plan.stages) starts.push_back(st.layer_begin);
    starts.push_back(plan.stages.back().layer_end);
    // The whole plan's part of the sharded walks, prepared at the first sharded chunk.
    std::optional<core::Result<ShardedPlanMemory>> sharded;
    for (std::size_t c = 0; c < chunks; ++c) {
      const auto& st = plan.stages[c];
      const auto d = static_cast<std::int64_t>(st.device_ids.size());
      if (d < 1 || (d > 1 && !as_written) || mbs % d != 0) continue;
      if (d > 1 && !st.shardings.empty()) {
        // Lowered operator by operator unless every sharding is data parallel (nullopt
        // below: the data-parallel walk).
        if (!sharded) {
          ALPASIM_ASSIGN_OR_RETURN(Point * full, point(mbs, plan.recompute, false));
          ALPASIM_ASSIGN_OR_RETURN(Point * one, point(1, plan.recompute, false));
          ALPASIM_ASSIGN_OR_RETURN(Point * two, point(2, plan.recompute, false));
          ShardedStageMemoryInput ssi;
          ssi.plan = &plan;
          ssi.microbatch_graph = &full->graph;
          ssi.one_sample_graph = &one->graph;
          ssi.two_sample_graph = &two->graph;
          sharded = ShardedPlanMemory::prepare(ssi);
        }
        auto sm = sharded->ok() ? sharded->value().stage(static_cast<int>(c))
                                : core::Result<std::optional<StageMemory>>(sharded->status());
        if (!sm.ok()) {
          if (sm.status().code() != core::StatusCode::kUnimplemented) return sm.status();
          continue;  // unsupported layouts keep the sums
        }
        if (*sm) {
          lw->chunk_memory[c] = **sm;
          continue;
        }
      }
      const StageMemoryKey key{mbs / d, static_cast<int>(plan.recompute), starts, p,
                               static_cast<int>(c), d, st.weight_update_sharding};
      auto it = stage_memory_.find(key);
      if (it == stage_memory_.end()) {
        ALPASIM_ASSIGN_OR_RETURN(Point * pt, point(mbs / d, plan.recompute, false));
        StageMemoryInput smi;
        smi.graph = &pt->graph;
        smi.stage_starts = starts;
        smi.meshes = p;
        smi.stage = static_cast<int>(c);
        smi.mesh_size = d;
        smi.weight_update_sharding = st.weight_update_sharding;
        auto sm = stage_memory(smi);
        // Unsupported layouts (a tensor shared by two chunks of one mesh) keep the sums.
        std::optional<StageMemory> value;
        if (sm.ok()) {
          value = *sm;
        } else if (sm.status().code() != core::StatusCode::kUnimplemented) {
          return sm.status();
        }
        it = stage_memory_.emplace(key, value).first;
      }
      lw->chunk_memory[c] = it->second;
    }
    return core::ok_status();
  }

  schema::Plan base_plan() const {
    schema::Plan plan;
    plan.model = in_.model;
    plan.cluster = in_.cluster;
    plan.dtype = in_.dtype;
    plan.global_batch_size = in_.global_batch_size;
    plan.generator = "alpa-sim search.mode=" + in_.mode;
    return plan;
  }

  // `plan` (a Megatron grid point: stages on logical meshes of data-parallel rows and
  // tensor-parallel columns) with Megatron's per-operator layouts on every multi-GPU stage.
  // UNIMPLEMENTED for models the layouts do not cover and for a stage whose submesh does not
  // hold its logical mesh (one spanning part of a node).
  core::Result<schema::Plan> with_megatron_layouts(const schema::Plan& plan) {
    schema::Plan out = plan;
    const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
    ALPASIM_ASSIGN_OR_RETURN(Point * pt, point(mbs, plan.recompute, false));
    for (auto& st : out.stages) {
      if (st.logical_rows * st.logical_cols == 1) continue;
      if (st.submesh_nodes * st.submesh_gpus_per_node != st.logical_rows * st.logical_cols) {
        // E.g. dp 3 x tp 4 = 12 GPUs on 8-GPU nodes: a node and a half, which a plan file's
        // submesh (nodes x GPUs per node) cannot describe. The grid no longer makes such
        // points (schema::submesh_expressible); a plan from elsewhere may still.
        return core::unimplemented("a stage of " + std::to_string(st.logical_rows * st.logical_cols) +
                                   " GPUs spans part of a node: not expressible as a submesh of " +
                                   std::to_string(gpn()) + "-GPU nodes");
      }
      ALPASIM_ASSIGN_OR_RETURN(st.shardings,
                               schema::megatron_operator_shardings(pt->graph, in_.model, mbs, st.layer_begin,
                                                                   st.layer_end, st.logical_rows,
                                                                   st.logical_cols, false));
    }
    return out;
  }

  // Fills a plan stage's intra-op shardings from the solved plans of its layers.
  void fill_shardings(const Point& pt, schema::PlanStage* st, int variant) const {
    const SubmeshShape sub{st->submesh_nodes, st->submesh_gpus_per_node};
    const LogicalMesh mesh{st->logical_rows, st->logical_cols};
    for (auto l = st->layer_begin; l < st->layer_end; ++l) {
      const auto& ip = layer_plan(pt, static_cast<int>(l), sub, mesh, variant);
      // Names come from the representative layer: rename to this layer's ops.
      std::vector<ir::OpId> own;
      auto g = adapters::layer_range_graph(pt.graph, static_cast<std::int32_t>(l),
                                           static_cast<std::int32_t>(l + 1), &own, variant == 1);
      schema::PlanStage tmp;
      intra_op::write_to_stage(ip, &tmp);
      for (std::size_t i = 0; i < tmp.shardings.size() && i < own.size(); ++i) {
        const ir::Op& op = pt.graph.op(own[i]);
        if (op.layer != l || op.is_source()) continue;
        tmp.shardings[i].op = op.name;
        st->shardings.push_back(std::move(tmp.shardings[i]));
      }
      // Gradients are reduce-scattered and optimizer states sharded on every multi-GPU mesh.
      st->weight_update_sharding = mesh.num_devices() > 1;
    }
  }

  const SearchInput& input() const { return in_; }
  const cost_model::CostModel& cost() const { return cost_; }
  ir::OptimizerKind optimizer() const { return optimizer_; }

 private:
  std::string cost_key(const Point& p, int rep, const SubmeshShape& sub,
                       const LogicalMesh& mesh, int variant) const {
    return std::to_string(p.mbs) + "|" + std::to_string(static_cast<int>(p.recompute)) + "|" +
           std::to_string(rep) + "|" + mesh_key(sub, mesh) + "|" + std::to_string(variant);
  }

  // LayerCost::fwd_calls / bwd_calls / rc_calls: per operator whose layout communicates
  // (node_cost_s above its compute), one entry named by its strategy's collective
  // ("all_reduce", "reduce_scatter") or "reshard" when only its operands are resharded; its
  // time is all of the operator's communication (strategy and operand resharding). A
  // gradient whose all-reduce weight-update sharding turned into a reduce-scatter +
  // all-gather keeps only what stays per microbatch (that pair is synchronised once per
  // iteration, as in to_layer_cost).
  void list_layer_calls(const Point& p, const intra_op::IntraOpGraph& g, const std::vector<ir::OpId>& ops,
                        const LogicalMesh& mesh, const intra_op::IntraOpPlan& plan, LayerCost* c) const {
    std::map<std::string, double> moved;  // gradient op -> seconds taken out per microbatch
    for (const auto& w : plan.weight_update_sharding) moved[w.gradient] += w.reduce_scatter_plus_all_gather.value();
    auto fwd = std::make_shared<std::vector<sim::BlockingCollective>>();
    auto bwd = std::make_shared<std::vector<sim::BlockingCollective>>();
    auto rc = std::make_shared<std::vector<sim::BlockingCollective>>();
    auto sync = std::make_shared<std::vector<sim::BlockingCollective>>();
    for (std::size_t v = 0; v < g.nodes.size() && v < plan.shardings.size(); ++v) {
      const ir::Op& op = p.graph.op(ops[v]);
      double comm = plan.node_cost_s[v] - plan.node_compute_s[v];
      if (auto it = moved.find(op.name); it != moved.end()) comm -= it->second;
      if (!(comm > 0)) continue;
      std::vector<sim::BlockingCollective>* to = nullptr;
      switch (op.phase) {
        case ir::Phase::kForward: to = fwd.get(); break;
        case ir::Phase::kBackward: to = bwd.get(); break;
        case ir::Phase::kRecompute: to = rc.get(); break;
        case ir::Phase::kOptimizer: to = sync.get(); break;  // once per iteration: the grad-sync task
      }
      if (to == nullptr) continue;
      const schema::OperatorSharding& sh = plan.shardings[v];
      sim::BlockingCollective call;
      call.collective = "reshard";
      call.algorithm = "operand resharding";
      call.group_size = static_cast<int>(mesh.num_devices());
      const std::int64_t out_shards = std::max<std::int64_t>(1, sh.output.num_shards(mesh.rows, mesh.cols));
      for (const char* kind : {"all-reduce", "reduce-scatter"}) {
        const auto at = sh.strategy.find(std::string("(") + kind + " ");
        if (at == std::string::npos) continue;
        call.collective = std::string(kind) == "all-reduce" ? "all_reduce" : "reduce_scatter";
        call.algorithm = "intra-op strategy";
        // The mesh axes after the kind: "0", "1" or "01".
        int group = 1;
        for (std::size_t k = at + std::string(kind).size() + 2; k < sh.strategy.size(); ++k) {
          if (sh.strategy[k] == '0') group *= static_cast<int>(mesh.rows);
          else if (sh.strategy[k] == '1') group *= static_cast<int>(mesh.cols);
          else break;
        }
        call.group_size = group;
        // nccl-tests' size: the buffer each GPU holds before the collective.
        call.bytes = op.out.bytes() / out_shards * (call.collective == "reduce_scatter" ? group : 1);
        break;
      }
      call.time = core::seconds(comm);
      // The layer is priced by its structural class's representative: keep the operator's
      // name inside its layer; problem_of() prefixes the layer that runs it.
      const auto slash = op.name.find('/');
      call.where = slash == std::string::npos ? op.name : op.name.substr(slash + 1);
      if (to == sync.get()) call.category = "grad_collective";
      to->push_back(std::move(call));
    }
    c->fwd_calls = std::move(fwd);
    c->bwd_calls = std::move(bwd);
    c->rc_calls = std::move(rc);
    c->sync_calls = std::move(sync);
  }

  LayerCost to_layer_cost(const Point& p, int rep, const LogicalMesh& mesh, int variant,
                          const intra_op::IntraOpPlan& plan,
                          const intra_op::CollectiveCostFn& hook) {
    LayerCost c;
    const auto& g = variant == 0 ? p.graphs.at(rep) : p.graphs_w.at(rep);
    const auto& ops = variant == 0 ? p.node_ops.at(rep) : p.node_ops_w.at(rep);
    const std::int64_t devices = mesh.num_devices();
    // The pass prices each operator's collectives, the resharding of its operands and the
    // work its layout adds to an even split (a replicated memory-bound operator computes
    // its whole size on every device) per microbatch (plan.node_cost_s, of which
    // node_compute_s is the work); each is charged to the operator's phase: forward,
    // backward, recompute, or (variant 1's optimizer updates, once per iteration) the
    // gradient synchronisation. Variant 1 priced its weight-update-sharded gradient
    // collectives (backward) per microbatch: they are taken out here and priced once per
    // iteration below, like variant 0's.
    ALPASIM_CHECK(plan.node_cost_s.size() == g.nodes.size() && plan.node_compute_s.size() == g.nodes.size() &&
                  ops.size() == g.nodes.size());
    double fwd_work = 0, bwd_work = 0, rc_comm = 0, opt_comm = 0;
    for (std::size_t v = 0; v < g.nodes.size(); ++v) {
      const double work = plan.node_compute_s[v];
      const double comm_v = plan.node_cost_s[v] - work;
      switch (p.graph.op(ops[v]).phase) {
        case ir::Phase::kForward: c.fwd_comm_s += comm_v; fwd_work += work; break;
        case ir::Phase::kBackward: c.bwd_comm_s += comm_v; bwd_work += work; break;
        case ir::Phase::kRecompute: rc_comm += plan.node_cost_s[v]; break;
        case ir::Phase::kOptimizer: opt_comm += plan.node_cost_s[v]; break;
      }
    }
    // Weight gradients are not nodes of the intra-op graph, and compute_for splits them
    // over every device. Each writes its parameter's layout and reads its input gradients':
    // a parameter replicated over an axis on which its input gradient is replicated too (a
    // row-parallel linear's bias, a layer norm's scale, under tensor parallelism without
    // sequence parallelism) has its gradient computed whole on every device of that axis,
    // which then hold equal gradients and need no synchronisation over it.
    // grad_read_axes[parameter]: the axes its gradient is summed over. (A replicated
    // update is priced whole by the caller, from opt_replicated_b.)
    std::map<ir::OpId, intra_op::MeshAxes> grad_read_axes;
    {
      std::map<ir::OpId, std::size_t> node_of;
      for (std::size_t v = 0; v < ops.size() && v < plan.shardings.size(); ++v) node_of.emplace(ops[v], v);
      // The mesh axes longer than 1: the only ones a tensor can be split or summed over.
      const intra_op::MeshAxes mesh_axes =
          (mesh.rows > 1 ? intra_op::kAxis0 : 0u) | (mesh.cols > 1 ? intra_op::kAxis1 : 0u);
      auto spec_axes = [&](const schema::ShardingSpec& spec) {
        intra_op::MeshAxes axes = 0;
        if (spec.uses_mesh_axis(0)) axes |= intra_op::kAxis0;
        if (spec.uses_mesh_axis(1)) axes |= intra_op::kAxis1;
        return axes & mesh_axes;
      };
      // The mesh axes a tensor is split on: a node's layout, a weight gradient's parameter's.
      auto tensor_axes = [&](ir::OpId id) -> std::optional<intra_op::MeshAxes> {
        auto it = node_of.find(id);
        if (it == node_of.end()) {
          const ir::OpId param = p.gradient_param[static_cast<std::size_t>(id)];
          if (param == ir::kNoOp) return std::nullopt;
          it = node_of.find(param);
          if (it == node_of.end()) return std::nullopt;
        }
        return spec_axes(plan.shardings[it->second].output);
      };
      for (ir::OpId id : p.weight_ops[static_cast<std::size_t>(rep)]) {
        if (node_of.count(id) != 0) continue;  // priced as a node (variant 1)
        const ir::Op& op = p.graph.op(id);
        const ir::OpId param = p.gradient_param[static_cast<std::size_t>(id)];
        const std::optional<intra_op::MeshAxes> written = tensor_axes(param);
        if (!written) continue;
        // An input without a layout here (another layer's tensor only weight gradients
        // read) may be split anywhere: its gradient is synchronised as before, and no
        // extra work is charged for it.
        intra_op::MeshAxes read = 0;
        for (ir::OpId in : op.inputs) read |= tensor_axes(in).value_or(intra_op::kBothAxes);
        read &= mesh_axes;
        // A gradient summed with another layer's (a tied table's) is synchronised as before.
        grad_read_axes[param] |= p.gradient_in_other_layer[static_cast<std::size_t>(param)] != 0 ? mesh_axes : read;
        const std::int64_t read_shards = intra_op::group_size(mesh, read);
        const std::int64_t write_shards = intra_op::group_size(mesh, *written);
        const std::int64_t work_shards = intra_op::group_size(mesh, read | *written);
        // A GEMM splits its work over every axis any of its tensors is split on.
        if ((op.is_matmul() ? work_shards : std::min(read_shards, write_shards)) >= devices) continue;
        bwd_work += std::max(
            0.0, adapters::op_compute_split(p.graph, op, work_shards, read_shards, write_shards, cost_).value() -
                     adapters::op_compute(p.graph, op, devices, cost_).value());
      }
    }
    for (const auto& w : plan.weight_update_sharding) c.bwd_comm_s -= w.reduce_scatter_plus_all_gather.value();
    c.bwd_comm_s = std::max(0.0, c.bwd_comm_s);
    list_layer_calls(p, g, ops, mesh, plan, &c);
    const double comm = c.fwd_comm_s + c.bwd_comm_s + rc_comm + opt_comm;
    const auto ct = compute_for(p, rep, devices);
    c.fwd_s = ct.forward.value() + fwd_work + c.fwd_comm_s;
    c.bwd_s = ct.backward.value() + bwd_work + c.bwd_comm_s;
    c.rc_s = ct.recompute.value() + rc_comm;
    c.grad_sync_s = opt_comm;
    const std::int64_t state_per_param =
        ir::optimizer_state_bytes_per_parameter(optimizer_, in_.dtype);
    // The weights' dtype in memory (fp8 training keeps bf16 weights and gradients).
    const core::DType storage = in_.dtype == core::DType::kFp8 ? core::DType::kBf16 : in_.dtype;
    const std::int64_t accumulate_per_param = ir::gradient_accumulation_bytes_per_parameter(storage);
    const std::int64_t step_per_param = ir::mixed_precision_step_bytes_per_parameter(storage);
    double accumulation_s = 0;
    std::int64_t step_bytes = 0;
    // Gradient bytes per device to synchronise, by the mesh axes each weight is
    // replicated over (accumulated over the microbatches, synchronised once).
    std::map<intra_op::MeshAxes, std::int64_t> sync_bytes;
    for (std::size_t v = 0; v < g.nodes.size() && v < ops.size(); ++v) {
      const ir::Op& op = p.graph.op(ops[v]);
      if (op.layer != rep && op.kind != ir::OpKind::kParameter) continue;  // another layer's
      std::int64_t shards = devices;
      intra_op::MeshAxes used = intra_op::kBothAxes;
      if (v < plan.shardings.size()) {
        const auto& spec = plan.shardings[v].output;
        shards = std::max<std::int64_t>(1, spec.num_shards(mesh.rows, mesh.cols));
        used = (spec.uses_mesh_axis(0) ? intra_op::kAxis0 : 0u) |
               (spec.uses_mesh_axis(1) ? intra_op::kAxis1 : 0u);
      }
      const std::int64_t bytes = op.out.bytes() / shards;
      if (op.layer != rep) {  // a weight of another layer read here (tied embedding)
        c.tied_owner = op.layer;
        c.tied_param_b += bytes;
        c.tied_opt_b += op.out.num_elements() * state_per_param / devices;
        c.tied_opt_replicated_b += op.out.num_elements() * state_per_param / shards;
        continue;
      }
      if (op.grad_role == ir::GradRole::kWeightGrad || op.phase == ir::Phase::kOptimizer) continue;
      if (op.kind == ir::OpKind::kParameter) {
        c.param_b += bytes;
        c.grad_b += bytes;
        // Each microbatch's gradient is accumulated into a buffer (one memory-bound kernel
        // per weight, on its tile; a GEMM weight's only when the plan does not fuse it into
        // the weight-gradient GEMM, accumulate_gemm_s); the mixed-precision step's passes over every weight
        // are priced like the update, split over every device here (the caller scales a
        // whole-state replica's step up as it does the update's).
        const double accumulate =
            cost_.memory_bound(core::bytes(op.out.num_elements() / shards * accumulate_per_param)).value();
        (p.gemm_weight[static_cast<std::size_t>(ops[v])] != 0 ? c.accumulate_gemm_s : accumulation_s) += accumulate;
        step_bytes += op.out.num_elements() * step_per_param / devices;
        // Weight-update sharding (Alpa §4.2 / ZeRO): states split over every device.
        c.opt_b += op.out.num_elements() * state_per_param / devices;
        c.opt_replicated_b += op.out.num_elements() * state_per_param / shards;
        intra_op::MeshAxes replicated = 0;
        if (mesh.rows > 1 && !(used & intra_op::kAxis0)) replicated |= intra_op::kAxis0;
        if (mesh.cols > 1 && !(used & intra_op::kAxis1)) replicated |= intra_op::kAxis1;
        // Only over the axes its gradient is summed over (a weight gradient computed
        // whole from replicated inputs is already equal on every replica).
        if (auto it = grad_read_axes.find(ops[v]); it != grad_read_axes.end()) replicated &= it->second;
        if (replicated != 0) sync_bytes[replicated] += bytes;
      } else if (op.phase == ir::Phase::kForward) {
        bool saved_here = false, saved_later = false;
        for (ir::OpId u : p.graph.consumers(op.id)) {
          const ir::Op& user = p.graph.op(u);
          if (user.phase != ir::Phase::kBackward && user.phase != ir::Phase::kRecompute) continue;
          (user.layer == op.layer ? saved_here : saved_later) = true;
        }
        // A stored activation takes its tile's bytes on each device: a tensor the plan
        // replicates (Megatron's layer-norm outputs, residuals and dropout masks under
        // tensor parallelism without sequence parallelism) is held in full on every one.
        const std::int64_t tile = op.out.bytes() / shards;
        if (saved_here || saved_later) c.act_b += tile;
        if (saved_later) c.saved_for_next_b += tile;
        if (saved_later && !saved_here) c.saved_only_for_next_b += tile;
      } else if (op.phase == ir::Phase::kRecompute) {
        // What the recomputed forward keeps for the backward (held together when the
        // backward starts); an intermediate only other recomputed operators read is freed
        // as the recomputation goes on.
        bool read_by_backward = false;
        for (ir::OpId u : p.graph.consumers(op.id)) {
          read_by_backward |= p.graph.op(u).phase == ir::Phase::kBackward;
        }
        if (read_by_backward) c.work_b += op.out.bytes() / shards;
      }
    }
    c.bwd_s += accumulation_s;
    // The update (every optimizer operator's bytes, split over the devices as compute_for
    // splits them) and the step's passes, as one pass over the layer's states.
    c.opt_bytes = layer_optimizer_bytes(p)[static_cast<std::size_t>(rep)] / static_cast<double>(devices) +
                  static_cast<double>(step_bytes);
    if (c.opt_bytes > 0) c.opt_s = cost_.memory_bound(core::bytes(static_cast<std::int64_t>(c.opt_bytes))).value();
    // Reduce-scatter the accumulated gradients, update the shard, all-gather the weights.
    auto rs_ag_calls = std::make_shared<std::vector<sim::BlockingCollective>>();
    auto all_reduce_calls = std::make_shared<std::vector<sim::BlockingCollective>>();
    for (const auto& [axes, bytes] : sync_bytes) {
      const double rs = hook(intra_op::Collective::kReduceScatter, core::bytes(bytes), axes).value();
      const double ag = hook(intra_op::Collective::kAllGather, core::bytes(bytes), axes).value();
      const double ar = hook(intra_op::Collective::kAllReduce, core::bytes(bytes), axes).value();
      c.grad_sync_s += rs + ag;
      c.replica_sync_rs_ag_s += rs + ag;
      c.replica_sync_all_reduce_s += ar;
      // For the trace: the replicas over `axes`, each holding the gradients' `bytes`.
      const int group = static_cast<int>(intra_op::group_size(mesh, axes));
      const std::int64_t gradient_bytes = bytes;  // a lambda cannot capture a structured binding (C++17)
      auto call = [&](const char* collective, const char* algorithm, double seconds) {
        return sim::BlockingCollective{collective, gradient_bytes, group, algorithm, core::seconds(seconds),
                                       "gradients", "grad_collective"};
      };
      rs_ag_calls->push_back(call("reduce_scatter", "weight-update sharding", rs));
      rs_ag_calls->push_back(call("all_gather", "weight-update sharding", ag));
      all_reduce_calls->push_back(call("all_reduce", "replica all-reduce", ar));
    }
    c.replica_sync_calls = std::move(rs_ag_calls);
    c.replica_all_reduce_calls = std::move(all_reduce_calls);
    if (!sync_bytes.empty()) c.replica_sync_bytes = std::make_shared<const std::map<intra_op::MeshAxes, std::int64_t>>(sync_bytes);
    const auto& s = p.stats[static_cast<std::size_t>(rep)];
    c.boundary_b = s.boundary_bytes;
    const double d = static_cast<double>(devices);
    c.fwd_flops = static_cast<double>(s.flops.matmul_forward) / d;
    c.bwd_flops = static_cast<double>(s.flops.matmul_backward) / d;
    c.rc_flops = static_cast<double>(s.flops.matmul_recompute) / d;
    if (std::getenv("ALPASIM_SEARCH_DEBUG") != nullptr) {
      std::fprintf(stderr, "layer %d mbs %lld rc %d mesh %s: fwd %.3g bwd %.3g rc %.3g comm %.3g gs %.3g opt %.3g | param %lld opt %lld act %lld work %lld | %s%s %zu wus | %.3f s var %d nodes %d reduced %d\n",
                   rep, static_cast<long long>(p.mbs), static_cast<int>(p.recompute), mesh.to_string().c_str(),
                   c.fwd_s, c.bwd_s, c.rc_s, comm, c.grad_sync_s, c.opt_s, static_cast<long long>(c.param_b),
                   static_cast<long long>(c.opt_b), static_cast<long long>(c.act_b),
                   static_cast<long long>(c.work_b), plan.method.c_str(), plan.proven_optimal ? "" : " (not proven optimal)", sync_bytes.size(),
                   plan.wall_time.value(), variant, plan.nodes, plan.reduced_nodes);
    }
    return c;
  }

 public:
  adapters::ComputeTimes compute_for(const Point& p, int layer, std::int64_t devices) {
    return layer_computes(p, devices)[static_cast<std::size_t>(layer)];
  }

  // The replicas' gradient synchronisation of one chunk's layers as a runtime runs it: one
  // collective per set of mesh axes over the gradients of all of them (Megatron's contiguous
  // gradient buffer is one all-reduce; XLA combines all-reduces), so each collective's fixed
  // costs are paid once, not once per layer (sim/lowering prices a stage's synchronisation
  // the same way). The whole of it is charged to the chunk's first layer.
  core::Status coalesce_replica_sync(const SubmeshShape& sub, const LogicalMesh& mesh, bool weight_update_sharding,
                                     std::vector<LayerCost>* layers) {
    std::map<intra_op::MeshAxes, std::int64_t> bytes_by_axes;
    for (LayerCost& lc : *layers) {
      if (!lc.replica_sync_bytes) continue;
      for (const auto& [axes, bytes] : *lc.replica_sync_bytes) bytes_by_axes[axes] += bytes;
      lc.grad_sync_s -= weight_update_sharding ? lc.replica_sync_rs_ag_s : lc.replica_sync_all_reduce_s;
      lc.grad_sync_s = std::max(0.0, lc.grad_sync_s);
      lc.replica_sync_calls = nullptr;
    }
    if (bytes_by_axes.empty() || layers->empty()) return core::Status();
    ALPASIM_ASSIGN_OR_RETURN(const intra_op::CollectiveCostFn* h, hook(sub, mesh));
    auto calls = std::make_shared<std::vector<sim::BlockingCollective>>();
    double total = 0;
    for (const auto& entry : bytes_by_axes) {
      // Named copies: a lambda cannot capture a structured binding (C++17; clang before 16).
      const intra_op::MeshAxes axes = entry.first;
      const std::int64_t bytes = entry.second;
      const int group = static_cast<int>(intra_op::group_size(mesh, axes));
      auto add = [&](intra_op::Collective kind, const char* name, const char* algorithm) {
        const double seconds = (*h)(kind, core::bytes(bytes), axes).value();
        total += seconds;
        std::string over = "gradients replicated over mesh axis";
        if ((axes & intra_op::kAxis0) != 0 && (axes & intra_op::kAxis1) != 0) over += "es 0 and 1";
        else over += (axes & intra_op::kAxis0) != 0 ? " 0" : " 1";
        calls->push_back(sim::BlockingCollective{name, bytes, group, algorithm, core::seconds(seconds),
                                                 over + " (one buffer for the chunk)", "grad_collective"});
      };
      if (weight_update_sharding) {
        add(intra_op::Collective::kReduceScatter, "reduce_scatter", "weight-update sharding");
        add(intra_op::Collective::kAllGather, "all_gather", "weight-update sharding");
      } else {
        add(intra_op::Collective::kAllReduce, "all_reduce", "replica all-reduce");
      }
    }
    layers->front().grad_sync_s += total;
    layers->front().replica_sync_calls = std::move(calls);
    return core::Status();
  }

  // Per layer of p: the bytes its optimizer operators stream (ir::memory_traffic_bytes,
  // unsplit), cached.
  const std::vector<double>& layer_optimizer_bytes(const Point& p) {
    const auto key = std::make_pair(p.mbs, static_cast<int>(p.recompute));
    auto it = optimizer_bytes_.find(key);
    if (it == optimizer_bytes_.end()) {
      std::vector<double> bytes(static_cast<std::size_t>(std::max(0, p.num_layers)), 0.0);
      for (const ir::Op& op : p.graph.ops()) {
        if (op.phase != ir::Phase::kOptimizer || op.layer < 0 || op.layer >= p.num_layers) continue;
        bytes[static_cast<std::size_t>(op.layer)] += static_cast<double>(ir::memory_traffic_bytes(p.graph, op));
      }
      it = optimizer_bytes_.emplace(key, std::move(bytes)).first;
    }
    return it->second;
  }

  // Compute times of every layer of p on `devices` GPUs (adapters::per_layer_compute: one
  // pass over the graph, bit-identical to layer_range_compute per layer), cached.
  const std::vector<adapters::ComputeTimes>& layer_computes(const Point& p, std::int64_t devices) {
    const auto key = std::make_tuple(p.mbs, static_cast<int>(p.recompute), devices);
    auto it = compute_.find(key);
    if (it == compute_.end()) {
      it = compute_.emplace(key, adapters::per_layer_compute(p.graph, devices, cost_)).first;
    }
    return it->second;
  }

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
  double partition_lower_bound_s(const Point& p, const std::vector<int>& starts, std::int64_t devices) {
    ALPASIM_CHECK(p.layer_graphs_built) << "the bound prices layers by their representatives";
    const auto& ct = layer_computes(p, devices);
    sim::PipelineProblem pb;
    pb.schedule = sim::PipelineSchedule::kOneFOneB;
    pb.num_microbatches = static_cast<int>(in_.global_batch_size / p.mbs);
    pb.interleave = 1;
    for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
      pb.meshes.emplace_back();
      double fwd = 0, bwd = 0, rc = 0, opt = 0;
      for (int l = starts[i]; l < starts[i + 1]; ++l) {
        // The search prices every layer with its structural class's representative.
        const auto& c = ct[static_cast<std::size_t>(p.rep[static_cast<std::size_t>(l)])];
        fwd += c.forward.value();
        bwd += c.backward.value();
        rc += c.recompute.value();
        opt += c.optimizer.value();
      }
      sim::StageCosts st;
      st.forward_s = core::seconds(fwd);
      st.backward_s = core::seconds(bwd);
      st.recompute_s = core::seconds(rc);
      st.optimizer_step_s = core::seconds(opt);
      pb.stages.push_back(st);
    }
    auto bound = pipeline_lower_bound(pb);
    return bound.ok() ? sim::to_seconds(bound.value()).value() : 0.0;
  }

  double point_lower_bound_s(const Point& p, const std::set<std::int64_t>& sizes) {
    ALPASIM_CHECK(p.layer_graphs_built) << "the bound prices layers by their representatives";
    const auto key = std::make_tuple(p.mbs, static_cast<int>(p.recompute), sizes);
    auto it = point_bounds_.find(key);
    if (it != point_bounds_.end()) return it->second;
    std::vector<double> per_layer(static_cast<std::size_t>(p.num_layers), kInf);
    for (const std::int64_t n : sizes) {
      const auto& ct = layer_computes(p, n);
      for (std::size_t l = 0; l < per_layer.size(); ++l) {
        const auto& c = ct[static_cast<std::size_t>(p.rep[l])];  // as the search prices layer l
        const double gpu_s = static_cast<double>(n) * (c.forward.value() + c.backward.value() +
                                                       c.recompute.value());
        per_layer[l] = std::min(per_layer[l], gpu_s);
      }
    }
    double sum = 0;
    for (const double x : per_layer) sum += x;
    const double B = static_cast<double>(in_.global_batch_size / p.mbs);
    const double bound = sizes.empty() ? 0.0
        : std::max(0.0, B * sum / static_cast<double>(num_gpus_) * (1 - 1e-9) - 3e-9 * B);
    point_bounds_.emplace(key, bound);
    return bound;
  }

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

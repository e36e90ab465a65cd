#include "planner/search/search.h"

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
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>
#include <variant>

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
#include "planner/search/stage_memory.h"
#include "schema/megatron_layouts.h"
#include "sim/pipeline_sim.h"

namespace alpasim::planner {
namespace {

using adapters::SubmeshShape;
using intra_op::LogicalMesh;
using Clock = std::chrono::steady_clock;

constexpr double kInf = std::numeric_limits<double>::infinity();

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
  double total_s() const { return fwd_s + bwd_s + rc_s; }
};

// One training graph: (microbatch size, recompute).
struct Point {
  std::int64_t mbs = 1;
  schema::Recompute recompute = schema::Recompute::kNone;
  ir::Graph graph;
  std::vector<ir::LayerStats> stats;
  int num_layers = 0;
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

ir::RecomputePolicy to_ir(schema::Recompute r) {
  switch (r) {
    case schema::Recompute::kNone: return ir::RecomputePolicy::kNone;
    case schema::Recompute::kSelective: return ir::RecomputePolicy::kSelective;
    case schema::Recompute::kFull: return ir::RecomputePolicy::kFull;
  }
  return ir::RecomputePolicy::kNone;
}

std::string mesh_key(const SubmeshShape& s, const LogicalMesh& m) {
  return std::to_string(s.nodes) + "x" + std::to_string(s.gpus_per_node) + "/" + m.to_string();
}

// The model axis (cols) of a logical mesh: a power of two inside one node, or the whole
// node (the search-space restriction of docs/search.md; rows then carry data parallelism).
bool model_axis_ok(std::int64_t cols, std::int64_t gpus_per_node) {
  return cols == gpus_per_node || (cols <= gpus_per_node && (cols & (cols - 1)) == 0);
}

std::vector<LogicalMesh> logical_shapes(const SubmeshShape& s, std::int64_t max_cols) {
  std::vector<LogicalMesh> out;
  for (std::int64_t c = 1; c <= s.size(); ++c) {
    if (s.size() % c != 0 || c > max_cols || !model_axis_ok(c, s.gpus_per_node)) continue;
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
  /// When set, simulate() skips a plan whose pipeline_lower_bound exceeds it (seconds)
  /// and returns it with ok = false; counted in candidates_pruned.
  std::optional<double> prune_above_s;
  int candidates_pruned = 0;
  /// (microbatch size, recompute) points skipped by point_lower_bound_s.
  int points_pruned = 0;
  std::int64_t num_gpus() const { return num_gpus_; }
  std::int64_t nodes() const { return nodes_; }
  std::int64_t gpn() const { return gpn_; }
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
  core::Status ensure_costs(Point& p, const std::vector<std::pair<SubmeshShape, LogicalMesh>>& meshes) {
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
          ++queries_;
          if (costs_.count(key) || !queued.insert(key).second) continue;
          tasks.push_back({rep, sub, mesh, var, hook_of[mk]});
        }
      }
    }
    if (tasks.empty()) return core::Status();
    std::vector<core::Result<intra_op::IntraOpPlan>> results(
        tasks.size(), core::Result<intra_op::IntraOpPlan>(core::internal_error("not run")));
    std::atomic<std::size_t> next{0};
    auto worker = [&]() {
      intra_op::IntraOpPass pass;
      for (;;) {
        const std::size_t i = next.fetch_add(1);
        if (i >= tasks.size()) return;
        const Task& t = tasks[i];
        intra_op::CostHooks h;
        h.collective = hooks[static_cast<std::size_t>(t.hook)];
        // Replicated memory-bound work (strategies.h); the even split is compute_for's.
        h.memory_bound = [this](core::Bytes b) { return cost_.memory_bound(b); };
        intra_op::IntraOpOptions o;
        o.time_limit = core::seconds(30.0);
        const auto& graph = t.variant == 0 ? p.graphs.at(t.rep) : p.graphs_w.at(t.rep);
        results[i] = pass.run(graph, t.mesh, h, o);
      }
    };
    const int threads = std::max(1, std::min<int>(in_.options.threads, static_cast<int>(tasks.size())));
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
    solves_ += static_cast<int>(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (!results[i].ok()) return results[i].status();
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
    if (prune_above_s) {
      // Exact skip: the simulated time is >= the bound (pipeline_bound.h), so a plan whose
      // bound exceeds *prune_above_s cannot beat the plan the caller compares with.
      auto bound = pipeline_lower_bound(pb);
      if (bound.ok() && sim::to_seconds(bound.value()).value() > *prune_above_s) {
        ++candidates_pruned;
        Evaluated skipped;
        skipped.error = "pruned by its lower bound";
        return skipped;  // ok = false: never better than anything
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
      if (topo.node_of(from[i]) != topo.node_of(to[i])) pairs.push_back({from[i], to[i]});
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
          const double ar = cost_.collective(cost_model::Collective::kAllReduce,
                                             core::bytes(l.tied_param_b), gi.front()).time.value();
          tied_ar_s[static_cast<std::size_t>(c)] += ar;
          tied_ar_s[static_cast<std::size_t>(oc)] += ar;
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
            st.reshard_all_gather_s =
                cost_.collective(cost_model::Collective::kAllGather,
                                 core::bytes(layers.back().boundary_b / (mesh_size / gather)), g).time;
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
          st.grad_sync_s = cost_.collective(kind, core::bytes(par), gi.front()).time;
          if (lw.grad_sync_mode == sim::GradSyncMode::kReduceScatterAllGather) {
            st.param_all_gather_s =
                cost_.collective(cost_model::Collective::kAllGather, core::bytes(par), gi.front()).time;
          }
        }
      } else {
        // Gradient collectives inside the stage mesh (the intra-op pass's weight-update
        // sharding) run once per iteration, after the last backward: not overlapped.
        st.optimizer_step_s = core::seconds(opt + gs);
      }
      if (const double ar = tied_ar_s[static_cast<std::size_t>(c)]; ar > 0) {
        if (st.grad_sync_s) {
          *st.grad_sync_s += core::seconds(ar);
        } else {
          st.optimizer_step_s += core::seconds(ar);
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
          if (lc.opt_b > 0) {
            lc.opt_s *= static_cast<double>(lc.opt_replicated_b) / static_cast<double>(lc.opt_b);
          }
          lc.opt_b = lc.opt_replicated_b;
        }
        if (!st.weight_update_sharding) {
          lc.tied_opt_b = lc.tied_opt_replicated_b;
          // Whole states on every replica: the replicas all-reduce their gradients.
          lc.grad_sync_s += lc.replica_sync_all_reduce_s - lc.replica_sync_rs_ag_s;
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
        }
        layers.push_back(lc);
      }
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
  // operator by operator from its shardings (sharded_stage_memory). A search candidate's
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
    for (std::size_t c = 0; c < chunks; ++c) {
      const auto& st = plan.stages[c];
      const auto d = static_cast<std::int64_t>(st.device_ids.size());
      if (d < 1 || (d > 1 && !as_written) || mbs % d != 0) continue;
      if (d > 1 && !st.shardings.empty()) {
        // Lowered operator by operator unless every sharding is data parallel. Without
        // sharded_memory_as_executor a sharded stage keeps the sums; a data-parallel one
        // (nullopt below) still takes the data-parallel walk.
        ALPASIM_ASSIGN_OR_RETURN(Point * full, point(mbs, plan.recompute, false));
        ALPASIM_ASSIGN_OR_RETURN(Point * one, point(1, plan.recompute, false));
        ALPASIM_ASSIGN_OR_RETURN(Point * two, point(2, plan.recompute, false));
        ShardedStageMemoryInput ssi;
        ssi.plan = &plan;
        ssi.microbatch_graph = &full->graph;
        ssi.one_sample_graph = &one->graph;
        ssi.two_sample_graph = &two->graph;
        ssi.stage = static_cast<int>(c);
        ssi.classify_only = !in_.options.sharded_memory_as_executor;
        auto sm = sharded_stage_memory(ssi);
        if (!sm.ok()) {
          if (sm.status().code() != core::StatusCode::kUnimplemented) return sm.status();
          continue;  // unsupported layouts keep the sums
        }
        if (*sm) {
          if (in_.options.sharded_memory_as_executor) lw->chunk_memory[c] = **sm;
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
  // UNIMPLEMENTED for models the layouts do not cover.
  core::Result<schema::Plan> with_megatron_layouts(const schema::Plan& plan) {
    schema::Plan out = plan;
    const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
    ALPASIM_ASSIGN_OR_RETURN(Point * pt, point(mbs, plan.recompute, false));
    for (auto& st : out.stages) {
      if (st.logical_rows * st.logical_cols == 1) continue;
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
    for (const auto& w : plan.weight_update_sharding) c.bwd_comm_s -= w.reduce_scatter_plus_all_gather.value();
    c.bwd_comm_s = std::max(0.0, c.bwd_comm_s);
    const double comm = c.fwd_comm_s + c.bwd_comm_s + rc_comm + opt_comm;
    const auto ct = compute_for(p, rep, devices);
    c.fwd_s = ct.forward.value() + fwd_work + c.fwd_comm_s;
    c.bwd_s = ct.backward.value() + bwd_work + c.bwd_comm_s;
    c.rc_s = ct.recompute.value() + rc_comm;
    c.opt_s = ct.optimizer.value();
    c.grad_sync_s = opt_comm;
    const std::int64_t state_per_param =
        ir::optimizer_state_bytes_per_parameter(optimizer_, in_.dtype);
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
        // Weight-update sharding (Alpa §4.2 / ZeRO): states split over every device.
        c.opt_b += op.out.num_elements() * state_per_param / devices;
        c.opt_replicated_b += op.out.num_elements() * state_per_param / shards;
        intra_op::MeshAxes replicated = 0;
        if (mesh.rows > 1 && !(used & intra_op::kAxis0)) replicated |= intra_op::kAxis0;
        if (mesh.cols > 1 && !(used & intra_op::kAxis1)) replicated |= intra_op::kAxis1;
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
        c.work_b += op.out.bytes() / shards;
      }
    }
    // Reduce-scatter the accumulated gradients, update the shard, all-gather the weights.
    for (const auto& [axes, bytes] : sync_bytes) {
      const double rs_ag = hook(intra_op::Collective::kReduceScatter, core::bytes(bytes), axes).value() +
                           hook(intra_op::Collective::kAllGather, core::bytes(bytes), axes).value();
      c.grad_sync_s += rs_ag;
      c.replica_sync_rs_ag_s += rs_ag;
      c.replica_sync_all_reduce_s += hook(intra_op::Collective::kAllReduce, core::bytes(bytes), axes).value();
    }
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
  std::map<std::tuple<std::int64_t, int, std::set<std::int64_t>>, double> point_bounds_;
  std::map<std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>, double> send_bandwidth_;
  std::map<std::string, intra_op::CollectiveCostFn> hooks_;  // by mesh_key
  std::map<std::string, BoundaryCost> boundary_costs_;       // layer_boundary
  std::map<std::string, std::size_t> written_layouts_;       // price_written_layouts: layouts -> id
  int solves_ = 0;
  int queries_ = 0;
};

// ---------------------------------------------------------------------------------------
// Helpers shared by the modes.

std::vector<std::int64_t> microbatch_sizes(const SearchInput& in, std::int64_t min_divisor) {
  std::vector<std::int64_t> out;
  if (in.num_microbatches) {
    if (in.global_batch_size % *in.num_microbatches == 0) {
      out.push_back(in.global_batch_size / *in.num_microbatches);
    }
    return out;
  }
  std::vector<std::int64_t> cand = in.options.microbatch_sizes;
  if (cand.empty()) cand = {1, 2, 4, 8, 16, 32};
  for (std::int64_t m : cand) {
    if (m >= 1 && in.global_batch_size % m == 0 && m % min_divisor == 0 &&
        m <= in.global_batch_size) {
      out.push_back(m);
    }
  }
  return out;
}

// Contiguous groups of layers with near-equal FLOPs: minimises the heaviest group (exact
// linear-partition DP), at most `groups` groups. Returns the group starts + num_layers.
std::vector<int> balanced_partition(const std::vector<double>& w, int groups) {
  const int n = static_cast<int>(w.size());
  groups = std::max(1, std::min(groups, n));
  std::vector<double> pre(static_cast<std::size_t>(n + 1), 0);
  for (int i = 0; i < n; ++i) pre[static_cast<std::size_t>(i + 1)] = pre[static_cast<std::size_t>(i)] + w[static_cast<std::size_t>(i)];
  // best[g][i]: min max-weight of splitting the first i layers into g groups.
  std::vector<std::vector<double>> best(static_cast<std::size_t>(groups + 1),
                                        std::vector<double>(static_cast<std::size_t>(n + 1), kInf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<std::size_t>(n + 1), 0));
  best[0][0] = 0;
  for (int g = 1; g <= groups; ++g) {
    for (int i = g; i <= n; ++i) {
      for (int j = g - 1; j < i; ++j) {
        const double v = std::max(best[static_cast<std::size_t>(g - 1)][static_cast<std::size_t>(j)],
                                  pre[static_cast<std::size_t>(i)] - pre[static_cast<std::size_t>(j)]);
        if (v < best[static_cast<std::size_t>(g)][static_cast<std::size_t>(i)]) {
          best[static_cast<std::size_t>(g)][static_cast<std::size_t>(i)] = v;
          cut[static_cast<std::size_t>(g)][static_cast<std::size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<int> starts;
  int i = n;
  for (int g = groups; g >= 1; --g) {
    starts.push_back(i);
    i = cut[static_cast<std::size_t>(g)][static_cast<std::size_t>(i)];
  }
  starts.push_back(0);
  std::reverse(starts.begin(), starts.end());
  return starts;  // groups + 1 entries
}

std::vector<double> layer_weights(const Point& p) {
  std::vector<double> w;
  for (const auto& s : p.stats) {
    w.push_back(static_cast<double>(s.flops.total_forward + s.flops.total_backward) + 1.0);
  }
  return w;
}

std::string describe_plan(const schema::Plan& plan) {
  std::ostringstream os;
  os << plan.stages.size() / static_cast<std::size_t>(plan.interleave) << " stage(s)";
  if (plan.interleave > 1) os << " x " << plan.interleave << " chunks";
  os << ", " << plan.num_microbatches << " microbatches of "
     << plan.global_batch_size / plan.num_microbatches << ", " << schema::schedule_name(plan.schedule)
     << ", recompute " << schema::recompute_name(plan.recompute) << ":";
  for (const auto& st : plan.stages) {
    os << " [" << st.layer_begin << "," << st.layer_end << ") " << st.submesh_nodes << "x"
       << st.submesh_gpus_per_node << " as " << st.logical_rows << "x" << st.logical_cols << ";";
  }
  return os.str();
}

bool better(const Searcher& s, const Evaluated& a, const Evaluated& b) {
  if (!b.ok) return a.ok;
  if (!a.ok) return false;
  if (s.minimize_memory) {
    if (a.prediction.peak_memory_bytes != b.prediction.peak_memory_bytes) {
      return a.prediction.peak_memory_bytes < b.prediction.peak_memory_bytes;
    }
    return a.prediction.iteration_time_s < b.prediction.iteration_time_s;
  }
  if (a.prediction.fits != b.prediction.fits) return a.prediction.fits;
  if (!a.prediction.fits) return a.prediction.peak_memory_bytes < b.prediction.peak_memory_bytes;
  return a.prediction.iteration_time_s < b.prediction.iteration_time_s;
}

// Plans with stages placed by assign_devices.
core::Result<schema::Plan> make_plan(Searcher& s, const std::vector<schema::PlanStage>& stages_in,
                                     std::int64_t num_microbatches, schema::Schedule schedule,
                                     int interleave, schema::Recompute rc) {
  schema::Plan plan = s.base_plan();
  plan.num_microbatches = num_microbatches;
  plan.schedule = schedule;
  plan.interleave = interleave;
  plan.recompute = rc;
  const int p = static_cast<int>(stages_in.size()) / interleave;
  std::vector<SubmeshShape> subs;
  for (int i = 0; i < p; ++i) {
    subs.push_back({stages_in[static_cast<std::size_t>(i)].submesh_nodes,
                    stages_in[static_cast<std::size_t>(i)].submesh_gpus_per_node});
  }
  ALPASIM_ASSIGN_OR_RETURN(std::vector<inter_op::Placement> place,
                           inter_op::assign_devices(subs, s.nodes(), s.gpn()));
  plan.stages = stages_in;
  for (std::size_t c = 0; c < plan.stages.size(); ++c) {
    auto& st = plan.stages[c];
    const auto& pl = place[c % static_cast<std::size_t>(p)];
    st.device_ids = adapters::mesh_device_ids({st.submesh_nodes, st.submesh_gpus_per_node},
                                              {st.logical_rows, st.logical_cols}, s.gpn(),
                                              pl.first_node, pl.first_local);
    // The rule fill_shardings writes into the final plan; candidates are priced with it.
    st.weight_update_sharding = st.logical_rows * st.logical_cols > 1;
  }
  return plan;
}

SubmeshShape shape_of_size(std::int64_t size, std::int64_t gpn) {
  if (size <= gpn) return {1, size};
  return {size / gpn, gpn};
}

bool valid_submesh_size(std::int64_t size, std::int64_t nodes, std::int64_t gpn) {
  if (size <= 0) return false;
  if (size < gpn) return (size & (size - 1)) == 0;
  return size % gpn == 0 && size / gpn <= nodes;
}

// ---------------------------------------------------------------------------------------
// Mode "alpa".

struct AlpaStats {
  int points = 0, dp_passes = 0, t_max_candidates = 0, simulated = 0;
  std::set<std::pair<std::int64_t, int>> explored;  // (microbatch size, recompute) points
  std::vector<std::string> lines;
};

// Submeshes of Alpa §5.2, restricted for search speed (docs/search.md): above 4 nodes
// only power-of-two node counts; above 8 nodes only whole nodes (the DP then counts
// devices in nodes). Both keep Theorem 1's exact covering.
std::vector<SubmeshShape> alpa_submeshes(std::int64_t nodes, std::int64_t gpn) {
  std::vector<SubmeshShape> subs;
  for (const auto& sm : inter_op::submesh_shapes(nodes, gpn)) {
    if (nodes > 4 && sm.nodes > 1 && (sm.nodes & (sm.nodes - 1)) != 0) continue;
    if (nodes > 8 && sm.gpus_per_node < gpn) continue;
    subs.push_back(sm);
  }
  return subs;
}

// Every mesh size a plan of mode "alpa" (the DP's submeshes, the equal partitions' N/p)
// may use: the sizes Searcher::point_lower_bound_s minimises over.
std::set<std::int64_t> alpa_mesh_sizes(const Searcher& s) {
  std::set<std::int64_t> sizes;
  for (const auto& sm : alpa_submeshes(s.nodes(), s.gpn())) sizes.insert(sm.size());
  for (std::int64_t p = 1; p <= s.num_gpus(); p *= 2) {
    if (s.num_gpus() % p == 0 && valid_submesh_size(s.num_gpus() / p, s.nodes(), s.gpn())) {
      sizes.insert(s.num_gpus() / p);
    }
  }
  return sizes;
}

// True when point pt's lower bound (point_lower_bound_s) exceeds the fitting incumbent's
// time, so no plan of the point can beat it (SearchOptions::prune_points).
bool point_cannot_win(Searcher& s, const Point& pt, const Evaluated& incumbent) {
  if (!s.input().options.prune_points || s.minimize_memory || !incumbent.ok ||
      !incumbent.prediction.fits) {
    return false;
  }
  return s.point_lower_bound_s(pt, alpa_mesh_sizes(s)) > incumbent.prediction.iteration_time_s;
}

core::Result<Evaluated> run_alpa(Searcher& s, AlpaStats& stats, Clock::time_point start,
                                 bool restrict_to_data_parallel_meshes = false) {
  const SearchInput& in = s.input();
  const std::int64_t nodes = s.nodes(), gpn = s.gpn();
  const std::vector<SubmeshShape> subs = alpa_submeshes(nodes, gpn);
  const std::int64_t max_cols = nodes > 8 ? gpn : std::numeric_limits<std::int64_t>::max();
  std::vector<std::pair<SubmeshShape, LogicalMesh>> meshes;
  std::vector<std::vector<LogicalMesh>> logical(subs.size());
  for (std::size_t j = 0; j < subs.size(); ++j) {
    for (const auto& m : logical_shapes(subs[j], restrict_to_data_parallel_meshes ? 1 : max_cols)) {
      logical[j].push_back(m);
      meshes.push_back({subs[j], m});
    }
  }
  Evaluated best;
  for (schema::Recompute rc : in.options.recompute) {
    // Microbatch sizes in increasing order; stop once a size simulates slower than the one
    // before (iteration time is unimodal in it: more microbatches shrink the bubble, smaller
    // ones lose GEMM efficiency).
    double previous = kInf;
    for (std::int64_t mbs : microbatch_sizes(in, 1)) {
      Evaluated point_best;
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (stats.points > 0 && elapsed > in.options.time_limit_s) {
        stats.lines.push_back("time limit reached after " + std::to_string(stats.points) +
                              " (microbatch, recompute) points");
        break;
      }
      const auto tp0 = Clock::now();
      ALPASIM_ASSIGN_OR_RETURN(Point * pt, s.point(mbs, rc));
      const auto tp1 = Clock::now();
      // A point whose compute alone cannot beat the best plan so far is skipped before its
      // intra-op solves. It neither stops the microbatch loop nor becomes `previous`: the
      // loop then reaches at least the points it reached before (docs/search.md), so the
      // result is never slower than without the skip.
      if (point_cannot_win(s, *pt, best)) {
        ++s.points_pruned;
        continue;
      }
      ++stats.points;
      if (in.options.progress) {
        in.options.progress("point " + std::to_string(stats.points) + ": microbatch " +
                            std::to_string(mbs) + ", recompute " +
                            std::string(schema::recompute_name(rc)));
      }
      stats.explored.insert({mbs, static_cast<int>(rc)});
      ALPASIM_RETURN_IF_ERROR(s.ensure_costs(*pt, meshes));
      const auto tp2 = Clock::now();
      const std::int64_t B = in.global_batch_size / mbs;
      // Clustered layers.
      const std::vector<int> starts = balanced_partition(layer_weights(*pt), in.options.max_layers);
      const int L = static_cast<int>(starts.size()) - 1;
      inter_op::InterOpProblem prob;
      prob.num_layers = L;
      prob.num_devices = s.num_gpus();
      prob.num_microbatches = B;
      prob.max_stages = L;
      prob.submeshes = subs;
      prob.resize();
      // Chosen logical mesh per (begin, end, submesh, s).
      std::vector<int> chosen(prob.table.size(), -1);
      for (std::size_t j = 0; j < subs.size(); ++j) {
        for (std::size_t q = 0; q < logical[j].size(); ++q) {
          for (int var = 0; var < (logical[j][q].num_devices() > 1 ? 2 : 1); ++var) {
          // Per clustered layer sums.
          std::vector<double> t(static_cast<std::size_t>(L), 0), st(static_cast<std::size_t>(L), 0),
              act(static_cast<std::size_t>(L), 0), work(static_cast<std::size_t>(L), 0);
          // Tied weights a clustered layer reads from another one (owner: its cluster):
          // a stage without the owner holds a copy, its gradient and optimizer state.
          std::vector<double> tied(static_cast<std::size_t>(L), 0);
          std::vector<int> tied_owner(static_cast<std::size_t>(L), -1);
          // Resharding between layer starts[g] and the one before, paid only when a stage
          // holds both (the boundaries inside a clustered layer are in t).
          std::vector<double> entry(static_cast<std::size_t>(L), 0);
          for (int g = 0; g < L; ++g) {
            for (int l = starts[static_cast<std::size_t>(g)]; l < starts[static_cast<std::size_t>(g + 1)]; ++l) {
              const LayerCost& c = s.layer_cost(*pt, l, subs[j], logical[j][q], var);
              const double b = s.layer_boundary(*pt, l, subs[j], logical[j][q], var).total_s();
              if (l == starts[static_cast<std::size_t>(g)]) {
                entry[static_cast<std::size_t>(g)] = b;
              } else {
                t[static_cast<std::size_t>(g)] += b;
              }
              t[static_cast<std::size_t>(g)] += c.total_s();
              st[static_cast<std::size_t>(g)] += static_cast<double>(c.param_b + c.grad_b + c.opt_b);
              act[static_cast<std::size_t>(g)] += static_cast<double>(c.act_b);
              work[static_cast<std::size_t>(g)] = std::max(work[static_cast<std::size_t>(g)], static_cast<double>(c.work_b));
              if (c.tied_owner >= 0) {
                tied[static_cast<std::size_t>(g)] += static_cast<double>(2 * c.tied_param_b + c.tied_opt_b);
                for (int h = 0; h < L; ++h) {
                  if (starts[static_cast<std::size_t>(h)] <= c.tied_owner &&
                      c.tied_owner < starts[static_cast<std::size_t>(h + 1)]) {
                    tied_owner[static_cast<std::size_t>(g)] = h;
                  }
                }
              }
            }
          }
          for (int k = 0; k < L; ++k) {
            double tt = 0, ss = 0, aa = 0, ww = 0;
            for (int i = k + 1; i <= L; ++i) {
              tt += t[static_cast<std::size_t>(i - 1)];
              if (i - 1 > k) tt += entry[static_cast<std::size_t>(i - 1)];
              ss += st[static_cast<std::size_t>(i - 1)];
              if (tied_owner[static_cast<std::size_t>(i - 1)] >= 0 &&
                  tied_owner[static_cast<std::size_t>(i - 1)] < k) {
                ss += tied[static_cast<std::size_t>(i - 1)];
              }
              aa += act[static_cast<std::size_t>(i - 1)];
              ww = std::max(ww, work[static_cast<std::size_t>(i - 1)]);
              for (int sfe = 1; sfe <= L; ++sfe) {
                const double in_flight = static_cast<double>(std::min<std::int64_t>(sfe, B));
                if (ss + in_flight * aa + ww > s.memory_limit()) continue;
                const std::size_t idx = prob.index(k, i, static_cast<int>(j), sfe);
                if (tt < prob.table[idx]) {
                  prob.table[idx] = tt;
                  chosen[idx] = static_cast<int>(q) * 2 + var;
                }
              }
            }
          }
          }
        }
      }
      inter_op::InterOpOptions opt;
      opt.epsilon = in.options.epsilon;
      opt.top_k = in.options.top_k;
      const inter_op::InterOpResult res = inter_op::solve_inter_op(prob, opt);
      stats.dp_passes += res.t_max_enumerated;
      stats.t_max_candidates += res.t_max_candidates;
      for (const auto& sol : res.solutions) {
        std::vector<schema::PlanStage> stages;
        std::vector<int> vars;
        const int ns = static_cast<int>(sol.stages.size());
        for (int si = 0; si < ns; ++si) {
          const auto& c = sol.stages[static_cast<std::size_t>(si)];
          const int qv = chosen[prob.index(c.layer_begin, c.layer_end, c.submesh, ns - si)];
          const int q = qv / 2;
          vars.push_back(qv % 2);
          schema::PlanStage st;
          st.layer_begin = starts[static_cast<std::size_t>(c.layer_begin)];
          st.layer_end = starts[static_cast<std::size_t>(c.layer_end)];
          st.submesh_nodes = subs[static_cast<std::size_t>(c.submesh)].nodes;
          st.submesh_gpus_per_node = subs[static_cast<std::size_t>(c.submesh)].gpus_per_node;
          st.logical_rows = logical[static_cast<std::size_t>(c.submesh)][static_cast<std::size_t>(q)].rows;
          st.logical_cols = logical[static_cast<std::size_t>(c.submesh)][static_cast<std::size_t>(q)].cols;
          stages.push_back(st);
        }
        std::vector<std::tuple<schema::Schedule, int>> schedules = {{schema::Schedule::kOneFOneB, 1}};
        if (in.options.try_gpipe && ns > 1) schedules.push_back({schema::Schedule::kGpipe, 1});
        bool uniform = ns > 1;
        for (const auto& st : stages) {
          uniform = uniform && st.submesh_nodes == stages[0].submesh_nodes &&
                    st.submesh_gpus_per_node == stages[0].submesh_gpus_per_node &&
                    st.logical_rows == stages[0].logical_rows && st.logical_cols == stages[0].logical_cols;
        }
        if (in.options.try_interleave && uniform && pt->num_layers >= 2 * ns && B % ns == 0) {
          schedules.push_back({schema::Schedule::kInterleavedOneFOneB, 2});
        }
        for (const auto& [sched, v] : schedules) {
          std::vector<schema::PlanStage> chunks = stages;
          std::vector<int> chunk_vars = vars;
          if (v > 1) {
            const std::vector<int> cs = balanced_partition(layer_weights(*pt), ns * v);
            if (static_cast<int>(cs.size()) != ns * v + 1) continue;
            chunks.clear();
            for (int c = 0; c < ns * v; ++c) {
              schema::PlanStage st = stages[static_cast<std::size_t>(c % ns)];
              st.layer_begin = cs[static_cast<std::size_t>(c)];
              st.layer_end = cs[static_cast<std::size_t>(c + 1)];
              chunks.push_back(st);
            }
            chunk_vars.assign(chunks.size(), vars[0]);
            bool same = true;
            for (int x : vars) same = same && x == vars[0];
            if (!same) continue;
          }
          ALPASIM_ASSIGN_OR_RETURN(schema::Plan plan, make_plan(s, chunks, B, sched, v, rc));
          ALPASIM_ASSIGN_OR_RETURN(Evaluated e, s.evaluate(plan, chunk_vars));
          ++stats.simulated;
          if (better(s, e, point_best)) point_best = std::move(e);
        }
      }
      const double t = point_best.ok && point_best.prediction.fits
                           ? point_best.prediction.iteration_time_s : kInf;
      if (std::getenv("ALPASIM_SEARCH_DEBUG") != nullptr) {
        const auto tp3 = Clock::now();
        auto sec = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
        std::fprintf(stderr, "POINT mbs %lld rc %d: graphs %.2f s, solves %.2f s, dp+sim %.2f s, best %.4f, lower bound %.4f\n",
                     static_cast<long long>(mbs), static_cast<int>(rc), sec(tp0, tp1), sec(tp1, tp2), sec(tp2, tp3), t,
                     s.point_lower_bound_s(*pt, alpa_mesh_sizes(s)));
      }
      if (better(s, point_best, best)) best = std::move(point_best);
      if (std::isfinite(previous) && t > previous) break;
      previous = std::isfinite(t) ? t : previous;
    }
  }
  if (!best.ok) return core::resource_exhausted("the inter-op DP found no plan that fits memory");
  return best;
}

// Equal partitions (layers or FLOPs) over p equal submeshes, intra-op costs per stage.
// With `incumbent` (a plan the caller keeps unless this returns a better one), points and
// candidates that cannot beat it or the best partition so far are skipped unsimulated
// (exact: the returned plan wins against the incumbent exactly when it did without).
core::Result<Evaluated> run_equal(Searcher& s, bool by_flops, int forced_stages = 0,
                                  std::int64_t forced_cols = 0,
                                  const Evaluated* incumbent = nullptr,
                                  const std::set<std::pair<std::int64_t, int>>* only = nullptr) {
  const SearchInput& in = s.input();
  const bool prune = in.options.prune_points && !s.minimize_memory;
  Evaluated best;
  // The fitting plan to beat: the better of the incumbent and the best partition so far.
  auto reference = [&]() -> const Evaluated* {
    const Evaluated* r = nullptr;
    for (const Evaluated* e : {incumbent, static_cast<const Evaluated*>(&best)}) {
      if (e != nullptr && e->ok && e->prediction.fits &&
          (r == nullptr || e->prediction.iteration_time_s < r->prediction.iteration_time_s)) {
        r = e;
      }
    }
    return r;
  };
  for (schema::Recompute rc : in.options.recompute) {
    for (std::int64_t mbs : microbatch_sizes(in, 1)) {
      if (only != nullptr && !only->count({mbs, static_cast<int>(rc)})) continue;
      ALPASIM_ASSIGN_OR_RETURN(Point * pt, s.point(mbs, rc));
      if (prune && reference() != nullptr && point_cannot_win(s, *pt, *reference())) continue;
      const std::int64_t B = in.global_batch_size / mbs;
      for (int p = 1; p <= pt->num_layers; p *= 2) {
        if (forced_stages > 0 && p != forced_stages) continue;
        if (s.num_gpus() % p != 0 || !valid_submesh_size(s.num_gpus() / p, s.nodes(), s.gpn())) continue;
        const SubmeshShape sub = shape_of_size(s.num_gpus() / p, s.gpn());
        std::vector<int> starts;
        if (by_flops) {
          starts = balanced_partition(layer_weights(*pt), p);
        } else {
          for (int i = 0; i <= p; ++i) starts.push_back(i * pt->num_layers / p);
        }
        if (static_cast<int>(starts.size()) != p + 1) continue;
        if (prune && reference() != nullptr &&
            s.partition_lower_bound_s(*pt, starts, sub.size()) > reference()->prediction.iteration_time_s) {
          continue;  // no logical mesh can make this partition fast enough
        }
        for (const auto& mesh : logical_shapes(sub, std::numeric_limits<std::int64_t>::max())) {
          if (forced_cols > 0 && mesh.cols != forced_cols) continue;
          if (forced_cols == 0 && !model_axis_ok(mesh.cols, s.gpn())) continue;
          for (int var = 0; var < (mesh.num_devices() > 1 ? 2 : 1); ++var) {
          std::vector<schema::PlanStage> stages;
          for (int i = 0; i < p; ++i) {
            schema::PlanStage st;
            st.layer_begin = starts[static_cast<std::size_t>(i)];
            st.layer_end = starts[static_cast<std::size_t>(i + 1)];
            st.submesh_nodes = sub.nodes;
            st.submesh_gpus_per_node = sub.gpus_per_node;
            st.logical_rows = mesh.rows;
            st.logical_cols = mesh.cols;
            stages.push_back(st);
          }
          ALPASIM_ASSIGN_OR_RETURN(schema::Plan plan,
                                   make_plan(s, stages, B, schema::Schedule::kOneFOneB, 1, rc));
          const Evaluated* ref = prune ? reference() : nullptr;
          if (ref != nullptr) s.prune_above_s = ref->prediction.iteration_time_s;
          auto e = s.evaluate(plan, std::vector<int>(stages.size(), var));
          s.prune_above_s.reset();
          if (!e.ok()) return e.status();
          if (better(s, e.value(), best)) best = std::move(e).value();
          }
        }
      }
    }
  }
  if (!best.ok) return core::failed_precondition("no equal partition matches the cluster");
  return best;
}

// ---------------------------------------------------------------------------------------
// Megatron-style 3D grid with analytic costs (no intra-op pass): tp splits every layer's
// compute and adds Megatron's per-layer all-reduces; dp replicas sync gradients.

struct GridFilter {
  bool tp1 = false;        // data parallel / inter-op only / ZeRO
  bool pp1 = false;
  bool pp_gt1 = false;
  int zero = 0;
};

core::Result<Evaluated> run_megatron(Searcher& s, const GridFilter& f, std::string* description) {
  const SearchInput& in = s.input();
  const std::int64_t N = s.num_gpus();
  // Every grid point's simulator input and lower bound, in grid order (the tie order).
  struct GridCandidate {
    sim::PipelineProblem problem;
    schema::Plan plan;
    sim::Time bound = 0;
    std::string description;
  };
  std::vector<GridCandidate> cands;
  for (std::int64_t tp = 1; tp <= std::min(N, s.gpn()); tp *= 2) {
    if (N % tp != 0 || (f.tp1 && tp != 1)) continue;
    for (std::int64_t pp = 1; pp <= N / tp; ++pp) {
      if ((N / tp) % pp != 0 || (f.pp1 && pp != 1) || (f.pp_gt1 && pp == 1)) continue;
      const std::int64_t dp = N / tp / pp;
      for (schema::Recompute rc : in.options.recompute) {
        for (std::int64_t mbs : {1, 2, 4, 8}) {
          if (in.global_batch_size % (dp * mbs) != 0) continue;
          const std::int64_t B = in.global_batch_size / (dp * mbs);
          if (in.num_microbatches && *in.num_microbatches != B) continue;
          ALPASIM_ASSIGN_OR_RETURN(Point * pt, s.point(mbs, rc, /*with_layer_graphs=*/false));
          const int L = pt->num_layers;
          if (pp > L) continue;
          for (int v : {1, 2}) {
            if (v > 1 && (pp == 1 || L < pp * v || B % pp != 0)) continue;
            // Layers: the chunks as equal as possible, earlier chunks taking the remainder.
            const int chunks = static_cast<int>(pp) * v;
            std::vector<int> starts;
            for (int c = 0; c <= chunks; ++c) starts.push_back(c * L / chunks);
            // Device layout: rank = stage·dp·tp + replica·tp + t (Megatron's default order).
            std::vector<schema::PlanStage> stages;
            const SubmeshShape sub = shape_of_size(dp * tp, s.gpn());
            if (!valid_submesh_size(dp * tp, s.nodes(), s.gpn()) && dp * tp % s.gpn() != 0) {
              // Partial-node meshes that are not powers of two: still contiguous ids.
            }
            Searcher::Lowering lw;
            lw.data_parallel = static_cast<int>(dp);
            lw.blocking_p2p = true;
            // Megatron-LM's scatter-gather (--scatter-gather-tensors-in-pipeline, on by
            // default): each GPU of a tensor-parallel group sends 1/tp of its replica's
            // activation, and the receiving group all-gathers it over NVLink, as
            // sim/lowering prices it.
            lw.local_all_gather = true;
            lw.all_gather_group = tp;
            lw.grad_sync_mode = f.zero >= 2 ? sim::GradSyncMode::kReduceScatterAllGather
                                            : sim::GradSyncMode::kAllReduce;
            // tp group (inside a node) and dp groups per stage.
            std::vector<std::int64_t> tp_ids;
            for (std::int64_t t = 0; t < tp; ++t) tp_ids.push_back(t);
            ALPASIM_ASSIGN_OR_RETURN(cluster::GroupInfo tp_group, s.cost().group(tp_ids));
            for (int m = 0; m < static_cast<int>(pp); ++m) {
              std::vector<std::int64_t> mesh;
              std::vector<std::vector<std::int64_t>> groups(static_cast<std::size_t>(tp));
              for (std::int64_t r = 0; r < dp; ++r) {
                for (std::int64_t t = 0; t < tp; ++t) {
                  const std::int64_t id = m * dp * tp + r * tp + t;
                  mesh.push_back(id);
                  groups[static_cast<std::size_t>(t)].push_back(id);
                }
              }
              lw.mesh_devices.push_back(mesh);
              lw.mesh_gpus.push_back(static_cast<int>(tp));
              lw.dp_groups.push_back(groups);
            }
            std::optional<cluster::GroupInfo> dp_group;
            if (dp > 1) {
              ALPASIM_ASSIGN_OR_RETURN(std::vector<cluster::GroupInfo> gi,
                                       s.cost().concurrent_groups(lw.dp_groups.front()));
              dp_group = gi.front();
            }
            auto all_reduce = [&](std::int64_t bytes) {
              if (tp == 1 || bytes <= 0) return 0.0;
              return s.cost().collective(cost_model::Collective::kAllReduce, core::bytes(bytes), tp_group).time.value();
            };
            for (int c = 0; c < chunks; ++c) {
              std::vector<LayerCost> layers;
              for (int l = starts[static_cast<std::size_t>(c)]; l < starts[static_cast<std::size_t>(c + 1)]; ++l) {
                const auto ct = s.compute_for(*pt, l, tp);
                const ir::LayerStats& st = pt->stats[static_cast<std::size_t>(l)];
                LayerCost lc;
                // Megatron TP: 2 all-reduces of the layer output in the forward, 2 in the
                // backward per transformer block (SC'21 §2.3); the vocabulary-parallel
                // embedding 1 forward, the head 1 backward; other layers: one per matmul
                // pair, i.e. Σ forward matmul outputs / 2 in each direction.
                double fwd_ar = 0, bwd_ar = 0;
                if (st.kind == "transformer" || st.kind == "moe_transformer") {
                  fwd_ar = 2 * all_reduce(st.boundary_bytes);
                  bwd_ar = fwd_ar;
                } else if (st.kind == "prologue" && l == 0) {
                  fwd_ar = all_reduce(st.boundary_bytes);
                } else if (st.kind == "epilogue") {
                  bwd_ar = all_reduce(pt->stats[static_cast<std::size_t>(l - 1)].boundary_bytes);
                } else if (tp > 1) {
                  for (const ir::Op& op : pt->graph.ops()) {
                    if (op.layer == l && op.phase == ir::Phase::kForward && op.is_matmul()) {
                      fwd_ar += all_reduce(op.out.bytes()) / 2;
                    }
                  }
                  bwd_ar = fwd_ar;
                }
                lc.fwd_comm_s = fwd_ar;
                lc.bwd_comm_s = bwd_ar + (rc != schema::Recompute::kNone ? fwd_ar : 0.0);
                lc.fwd_s = ct.forward.value() + lc.fwd_comm_s;
                lc.bwd_s = ct.backward.value() + bwd_ar;
                lc.rc_s = ct.recompute.value() + (rc != schema::Recompute::kNone ? fwd_ar : 0.0);
                const std::int64_t wb = core::dtype_bytes(in.dtype);
                const std::int64_t params = st.parameters / tp;
                const std::int64_t state = params * ir::optimizer_state_bytes_per_parameter(s.optimizer(), in.dtype);
                lc.param_b = params * wb;
                lc.grad_b = params * wb;
                lc.opt_b = state;
                lc.opt_s = ct.optimizer.value();
                if (f.zero >= 1) { lc.opt_b = state / dp; lc.opt_s /= static_cast<double>(dp); }
                if (f.zero >= 2) lc.grad_b = lc.grad_b / dp;
                if (f.zero >= 3 && dp > 1 && dp_group) {
                  lc.param_b = lc.param_b / dp;
                  const double ag = s.cost().collective(cost_model::Collective::kAllGather,
                                                        core::bytes(params * wb), *dp_group).time.value();
                  lc.fwd_s += ag;
                  lc.fwd_comm_s += ag;
                  lc.bwd_s += ag;
                  lc.bwd_comm_s += ag;
                }
                if (st.kind == "epilogue") {
                  // The head reads the tied word embedding (vocab-parallel: 1/tp per GPU):
                  // a stage without it keeps a copy (problem_of decides), as sim/lowering.
                  for (const ir::Op& op : pt->graph.ops()) {
                    if (op.kind != ir::OpKind::kParameter || op.layer == l) continue;
                    bool read = false;
                    for (ir::OpId u : pt->graph.consumers(op.id)) read = read || pt->graph.op(u).layer == l;
                    if (!read) continue;
                    const std::int64_t elems = op.out.num_elements() / tp;
                    lc.tied_owner = op.layer;
                    lc.tied_param_b += (f.zero >= 3 ? elems / dp : elems) * wb;
                    const std::int64_t tied_state =
                        elems * ir::optimizer_state_bytes_per_parameter(s.optimizer(), in.dtype);
                    lc.tied_opt_b += f.zero >= 1 ? tied_state / dp : tied_state;
                  }
                }
                lc.act_b = st.activation_bytes / tp;
                if (rc == schema::Recompute::kFull) {
                  // Working set while recomputing one layer: its activations without
                  // recomputation, approximated by the recompute FLOPs' share.
                  const double share = st.flops.total_forward > 0
                      ? static_cast<double>(st.flops.total_recompute) / static_cast<double>(st.flops.total_forward) : 0;
                  lc.work_b = static_cast<std::int64_t>(share * static_cast<double>(st.forward_bytes_accessed) / 2.0) / tp;
                }
                lc.boundary_b = st.boundary_bytes;
                lc.fwd_flops = static_cast<double>(st.flops.matmul_forward) / static_cast<double>(tp);
                lc.bwd_flops = static_cast<double>(st.flops.matmul_backward) / static_cast<double>(tp);
                lc.rc_flops = static_cast<double>(st.flops.matmul_recompute) / static_cast<double>(tp);
                layers.push_back(lc);
              }
              lw.chunk_layers.push_back(std::move(layers));
              schema::PlanStage st;
              st.layer_begin = starts[static_cast<std::size_t>(c)];
              st.layer_end = starts[static_cast<std::size_t>(c + 1)];
              st.submesh_nodes = sub.nodes;
              st.submesh_gpus_per_node = sub.gpus_per_node;
              st.logical_rows = dp;
              st.logical_cols = tp;
              st.device_ids = lw.mesh_devices[static_cast<std::size_t>(c % pp)];
              st.weight_update_sharding = f.zero >= 1;
              stages.push_back(st);
            }
            schema::Plan plan = s.base_plan();
            plan.num_microbatches = B;
            plan.schedule = v > 1 ? schema::Schedule::kInterleavedOneFOneB : schema::Schedule::kOneFOneB;
            plan.interleave = v;
            plan.recompute = rc;
            plan.stages = std::move(stages);
            auto pb = s.problem_of(lw, plan);
            if (!pb.ok()) continue;  // an invalid grid point is skipped, as a failed simulation
            auto bound = pipeline_lower_bound(pb.value());
            if (!bound.ok()) continue;
            GridCandidate cand;
            cand.problem = std::move(pb).value();
            cand.plan = std::move(plan);
            cand.bound = bound.value();
            schema::MegatronShape shape;
            shape.tp = tp;
            shape.pp = pp;
            shape.dp = dp;
            shape.mbs = mbs;
            shape.vp = v;
            shape.recompute = rc;
            cand.description = shape.to_string();
            cands.push_back(std::move(cand));
          }
        }
      }
    }
  }
  // Bound-and-prune, exact: the grid points are simulated in increasing order of their
  // lower bound (pipeline_bound.h); one whose bound cannot beat the incumbent is skipped.
  // The winner is the same as simulating all in grid order and keeping the first best:
  // `better` is a strict weak order, and ties go to the lower grid index.
  std::vector<std::size_t> order(cands.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return cands[a].bound < cands[b].bound;
  });
  const bool rescore = f.zero <= 1 && !s.minimize_memory && in.options.rescore_grid;
  // Analytic results by grid index (kept for re-scoring in the analytic order).
  std::vector<std::optional<Evaluated>> analytic(cands.size());
  Evaluated best;
  std::size_t best_index = cands.size();
  for (const std::size_t i : order) {
    GridCandidate& c = cands[i];
    // Only a fitting incumbent prunes (a fitting plan beats every one that does not fit);
    // never in the least-memory ranking.
    if (in.options.prune_grid && !s.minimize_memory && best.ok && best.prediction.fits) {
      const double bound_s = sim::to_seconds(c.bound).value();
      const double best_s = best.prediction.iteration_time_s;
      if (bound_s > best_s || (bound_s == best_s && i > best_index)) {
        ++s.grid_pruned;
        continue;
      }
    }
    auto e = rescore ? s.run_problem(c.problem, c.plan) : s.run_problem(std::move(c.problem), c.plan);
    ++s.grid_simulated;
    if (!e.ok()) continue;
    if (rescore) analytic[i] = e.value();
    if (better(s, e.value(), best) || (i < best_index && !better(s, best, e.value()))) {
      best = std::move(e).value();
      best_index = i;
    }
  }
  if (!best.ok) return core::failed_precondition("no grid point matches the cluster and batch");
  if (description) *description = cands[best_index].description;
  if (!rescore) return best;
  // The grid's analytic costs rank its points; the one evaluator prices them: a point's
  // plan written with Megatron's layouts, as its plan file reads
  // (schema::megatron_operator_shardings), priced like any plan file (Searcher::evaluate).
  // That is what alpa-sim prints and writes. The analytic memory is optimistic (it divides
  // every activation by tp, where Megatron without sequence parallelism replicates a third
  // of them), so the points are re-scored in the analytic order until one fits, at most
  // kRescored of them; the points the bound pruned are simulated first if it comes to them.
  // Plans the format cannot express yet keep the analytic price: ZeRO-2/3, and models
  // other than the builtin gpt.
  constexpr int kRescored = 16;
  auto written = s.with_megatron_layouts(best.plan);
  if (!written.ok()) {
    if (written.status().code() != core::StatusCode::kUnimplemented) return written.status();
    return best;
  }
  ALPASIM_ASSIGN_OR_RETURN(Evaluated first, s.evaluate(*written));
  if (first.prediction.fits) return first;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    if (analytic[i]) continue;
    auto e = s.run_problem(cands[i].problem, cands[i].plan);
    ++s.grid_simulated;
    if (e.ok()) analytic[i] = std::move(e).value();
  }
  std::vector<std::size_t> by_time;
  for (std::size_t i = 0; i < cands.size(); ++i) {
    if (i != best_index && analytic[i] && analytic[i]->prediction.fits) by_time.push_back(i);
  }
  std::stable_sort(by_time.begin(), by_time.end(), [&](std::size_t a, std::size_t b) {
    return better(s, *analytic[a], *analytic[b]);
  });
  for (std::size_t k = 0; k < by_time.size() && k + 1 < static_cast<std::size_t>(kRescored); ++k) {
    ALPASIM_ASSIGN_OR_RETURN(schema::Plan plan, s.with_megatron_layouts(analytic[by_time[k]]->plan));
    ALPASIM_ASSIGN_OR_RETURN(Evaluated e, s.evaluate(plan));
    if (e.prediction.fits) {
      if (description) *description = cands[by_time[k]].description;
      return e;
    }
  }
  return first;  // none fits: the analytic winner, priced by the evaluator (does not fit)
}

core::Result<Evaluated> run_mode(Searcher& s, const std::string& mode, AlpaStats& stats,
                                 Clock::time_point start, std::string* description) {
  if (mode == "alpa") {
    ALPASIM_ASSIGN_OR_RETURN(Evaluated best, run_alpa(s, stats, start));
    // The structured partitions live in the same plan space and reuse the cached costs:
    // seeds the DP's top-K might miss (its stage model ignores cross-stage traffic, the
    // once-per-iteration gradient sync and the schedule).
    // With compare_baselines: at every point, as the equal_layer / equal_operator /
    // intra_op_only baselines do, whatever the time limit, so the searched plan is never
    // slower than a baseline of its own plan space in the comparison (the baselines reuse
    // the cached intra-op costs, so this costs no extra solves). Without: at the points
    // the DP explored. Points and partitions that cannot beat `best` are skipped by their
    // lower bounds (exact).
    const auto* only = s.input().options.compare_baselines ? nullptr : &stats.explored;
    for (const bool by_flops : {false, true}) {
      auto e = run_equal(s, by_flops, 0, 0, &best, only);
      if (e.ok() && better(s, e.value(), best)) {
        stats.lines.push_back(std::string("an equal-") + (by_flops ? "operator" : "layer") +
                              " partition simulated faster than the DP's candidates");
        best = std::move(e).value();
      }
    }
    return best;
  }
  if (mode == "megatron") return run_megatron(s, GridFilter{}, description);
  if (mode == "data_parallel") return run_megatron(s, GridFilter{true, true, false, 0}, description);
  if (mode == "zero2") return run_megatron(s, GridFilter{true, true, false, 2}, description);
  if (mode == "zero3") return run_megatron(s, GridFilter{true, true, false, 3}, description);
  if (mode == "inter_op_only") return run_megatron(s, GridFilter{true, false, true, 0}, description);
  if (mode == "intra_op_only") return run_equal(s, false, 1);
  if (mode == "equal_layer") return run_equal(s, false);
  if (mode == "equal_operator") return run_equal(s, true);
  if (mode == "dp_ep") {
    // Data x expert parallel (DeepSpeed-MoE / GShard style): one stage, logical mesh
    // (N/c, c) with the experts over axis 1. The expert-parallel degree c must divide both
    // the GPU count and the number of experts (48 experts on 32 GPUs: c in {1, 2, 4, 8, 16});
    // a (N, 1) mesh alone leaves no expert layout when N does not divide the experts. The
    // best c is kept (ties: the smaller c, tried first).
    const auto* transformer = std::get_if<ir::TransformerConfig>(&s.input().model.spec);
    const std::int64_t experts = transformer != nullptr ? transformer->num_experts : 0;
    Evaluated best;
    core::Status last = core::failed_precondition("no data x expert mesh matches the cluster");
    for (std::int64_t c = 1; c <= s.num_gpus(); c *= 2) {
      if (s.num_gpus() % c != 0) continue;
      if (c > 1 && (experts <= 0 || experts % c != 0)) continue;
      auto e = run_equal(s, false, 1, c);
      if (!e.ok()) {
        last = e.status();
        continue;
      }
      if (better(s, *e, best)) best = std::move(e).value();
    }
    if (!best.ok) return last;
    return best;
  }
  return core::invalid_argument("search.mode: expected one of alpa, megatron, data_parallel, zero2, "
                                "zero3, inter_op_only, intra_op_only, equal_layer, equal_operator, "
                                "dp_ep, got \"" + mode + "\"");
}

core::Status check_input(const SearchInput& in) {
  if (!in.cost) return core::invalid_argument("search: no cost model");
  if (!is_search_mode(in.mode)) {
    AlpaStats st;
    std::string d;
    return core::invalid_argument("search.mode: expected one of alpa, megatron, data_parallel, "
                                  "zero2, zero3, inter_op_only, intra_op_only, equal_layer, "
                                  "equal_operator, dp_ep, got \"" + in.mode + "\"");
  }
  if (in.global_batch_size <= 0) {
    return core::invalid_argument("training.global_batch_size: expected a positive integer, got " +
                                  std::to_string(in.global_batch_size));
  }
  if (in.num_microbatches && (*in.num_microbatches <= 0 ||
                              in.global_batch_size % *in.num_microbatches != 0)) {
    return core::invalid_argument("training.num_microbatches: expected a divisor of the global batch " +
                                  std::to_string(in.global_batch_size) + ", got " +
                                  std::to_string(*in.num_microbatches));
  }
  return core::Status();
}

void fill_explanation(Searcher& s, const Evaluated& e, SearchResult* r) {
  r->explanation.push_back("chosen: " + describe_plan(e.plan));
  r->intra_op_solves = s.solves();
  r->intra_op_queries = s.queries();
}

}  // namespace

const std::vector<std::string>& search_mode_names() {
  static const std::vector<std::string> names = {
      "alpa", "megatron", "data_parallel", "zero2", "zero3", "inter_op_only",
      "intra_op_only", "equal_layer", "equal_operator", "dp_ep"};
  return names;
}

bool is_search_mode(std::string_view mode) {
  for (const auto& n : search_mode_names()) {
    if (n == mode) return true;
  }
  return false;
}

core::Result<SearchResult> search(const SearchInput& input) {
  ALPASIM_RETURN_IF_ERROR(check_input(input));
  const auto start = Clock::now();
  Searcher s(input);
  AlpaStats stats;
  std::string description;
  auto chosen = run_mode(s, input.mode, stats, start, &description);
  SearchResult result;
  if (chosen.ok() && !chosen.value().prediction.fits) {
    chosen = core::Result<Evaluated>(core::resource_exhausted("no plan fits"));
  }
  if (!chosen.ok() && chosen.status().code() == core::StatusCode::kResourceExhausted) {
    // Smallest memory per device any plan of this mode (or the Megatron grid) needs.
    Searcher u(input);
    u.set_unlimited_memory();
    u.minimize_memory = true;
    AlpaStats st2;
    std::string d2;
    std::int64_t need = std::numeric_limits<std::int64_t>::max();
    for (const std::string& m : {input.mode, std::string("megatron"), std::string("zero3")}) {
      auto e = run_mode(u, m, st2, start, &d2);
      if (e.ok()) {
        // Re-rank by memory: the least-memory plan of that mode.
        need = std::min(need, e.value().prediction.peak_memory_bytes);
      }
    }
    std::string msg = "no plan fits in " + core::format_bytes(static_cast<std::int64_t>(s.memory_limit())) + " per GPU";
    if (!input.options.memory_limit && input.cluster.reserved_memory.value() > 0) {
      msg += " (" + core::format_bytes(input.cluster.gpu.memory.value()) + " less the " +
             core::format_bytes(input.cluster.reserved_memory.value()) +
             " reserved for the runtime, cluster.reserved_memory_gib)";
    }
    if (need != std::numeric_limits<std::int64_t>::max()) {
      msg += "; the smallest plan found needs " + core::format_bytes(need) +
             " (" + std::to_string(need) + " bytes) per GPU";
    }
    return core::resource_exhausted(msg);
  }
  if (!chosen.ok()) return chosen.status();
  Evaluated best = std::move(chosen).value();
  if (input.mode != "megatron" && input.mode != "data_parallel" && input.mode != "zero2" &&
      input.mode != "zero3" && input.mode != "inter_op_only") {
    ALPASIM_ASSIGN_OR_RETURN(Point * pt, s.point(best.plan.global_batch_size / best.plan.num_microbatches,
                                                 best.plan.recompute));
    for (std::size_t i = 0; i < best.plan.stages.size(); ++i) {
      s.fill_shardings(*pt, &best.plan.stages[i], i < best.variants.size() ? best.variants[i] : 0);
    }
    // The emitted plan priced as written: a candidate's multi-GPU stages carry per-layer
    // memory sums, the plan's shardings the executor's exact walk (fill_stage_memory).
    // Times are unchanged (same variants); this makes evaluate_plan(plan) reproduce the
    // prediction byte for byte. A plan whose exact memory no longer fits is reported so.
    ALPASIM_ASSIGN_OR_RETURN(Evaluated exact, s.evaluate(best.plan));
    ALPASIM_CHECK(exact.prediction.iteration_time_s == best.prediction.iteration_time_s)
        << "re-pricing the emitted plan changed its time: " << best.prediction.iteration_time_s
        << " s -> " << exact.prediction.iteration_time_s << " s";
    best.prediction = exact.prediction;
    best.problem = std::move(exact.problem);
  }
  result.plan = best.plan;
  result.prediction = best.prediction;
  auto resolved = sim::resolve_collectives(best.problem);
  result.problem = resolved.ok() ? std::move(resolved).value() : best.problem;
  result.explanation.push_back("mode " + input.mode + (description.empty() ? "" : ": " + description));
  if (input.mode == "alpa") {
    result.explanation.push_back(
        std::to_string(stats.points) + " (microbatch size, recompute) points; DP: " +
        std::to_string(stats.dp_passes) + " t_max passes over " +
        std::to_string(stats.t_max_candidates) + " distinct stage latencies; " +
        std::to_string(stats.simulated) + " candidate plans simulated");
    if (s.points_pruned > 0 || s.candidates_pruned > 0) {
      result.explanation.push_back(
          "skipped by lower bounds: " + std::to_string(s.points_pruned) +
          " (microbatch size, recompute) points, " + std::to_string(s.candidates_pruned) +
          " equal-partition candidates");
    }
    for (const auto& l : stats.lines) result.explanation.push_back(l);
  }
  fill_explanation(s, best, &result);
  result.candidates_simulated = stats.simulated;
  if (input.mode == "alpa" && input.options.compare_baselines) {
    const std::size_t num_baselines = search_mode_names().size() - 1;  // all but "alpa"
    for (const std::string& m : search_mode_names()) {
      if (m == "alpa") continue;
      if (input.options.progress) {
        input.options.progress("baseline " + std::to_string(result.baselines.size() + 1) +
                               " of " + std::to_string(num_baselines) + ": " + m);
      }
      BaselineRow row;
      row.mode = m;
      // dp_ep is the MoE baseline; on a model without experts its only mesh, (N, 1), is a
      // data-parallel plan the other rows already cover, and on 64 GPUs it cost 18 of the
      // 39B search's 75 s (docs/validation.md). Asked for as a mode, it still runs.
      const auto* transformer = std::get_if<ir::TransformerConfig>(&input.model.spec);
      if (m == "dp_ep" && (transformer == nullptr || transformer->num_experts <= 0)) {
        row.description = "not applicable: the model has no experts";
        result.baselines.push_back(std::move(row));
        continue;
      }
      std::string d;
      AlpaStats bs;
      auto e = run_mode(s, m, bs, start, &d);
      if (e.ok()) {
        row.ok = e.value().prediction.fits;
        row.prediction = e.value().prediction;
        row.description = d.empty() ? describe_plan(e.value().plan) : d;
        if (!row.ok) row.description += " (does not fit)";
      } else {
        row.description = e.status().message();
      }
      result.baselines.push_back(std::move(row));
    }
  }
  result.wall_time_s = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

core::Result<SearchResult> evaluate_plan(const SearchInput& input, const schema::Plan& plan) {
  ALPASIM_RETURN_IF_ERROR(check_input(input));
  const auto start = Clock::now();
  Searcher s(input);
  ALPASIM_ASSIGN_OR_RETURN(Evaluated e, s.evaluate(plan));
  SearchResult r;
  r.plan = plan;
  r.prediction = e.prediction;
  auto resolved = sim::resolve_collectives(e.problem);
  r.problem = resolved.ok() ? std::move(resolved).value() : e.problem;
  fill_explanation(s, e, &r);
  r.wall_time_s = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

std::string format_comparison(const SearchResult& result) {
  std::ostringstream os;
  auto row = [&](const std::string& mode, const Prediction& p, bool ok, const std::string& d) {
    os << mode;
    for (std::size_t i = mode.size(); i < 16; ++i) os << ' ';
    if (ok) {
      os << core::format_fixed(p.iteration_time_s, 3) << " s  "
         << core::format_fixed(p.model_tflops_per_gpu, 2) << " TFLOP/s/GPU  "
         << core::format_bytes(p.peak_memory_bytes) << "  ";
    } else {
      os << "-  ";
    }
    os << d << "\n";
  };
  row("searched", result.prediction, true, "");
  for (const auto& b : result.baselines) row(b.mode, b.prediction, b.ok, b.description);
  return os.str();
}

std::string faster_baseline_note(const SearchResult& result) {
  const BaselineRow* fastest = nullptr;
  for (const BaselineRow& b : result.baselines) {
    if (!b.ok || !b.prediction.fits) continue;
    if (b.prediction.iteration_time_s >= result.prediction.iteration_time_s) continue;
    if (fastest == nullptr || b.prediction.iteration_time_s < fastest->prediction.iteration_time_s) {
      fastest = &b;
    }
  }
  if (fastest == nullptr) return "";
  const double gain = 1 - fastest->prediction.iteration_time_s / result.prediction.iteration_time_s;
  return "note: the " + fastest->mode + " baseline (" +
         core::format_fixed(fastest->prediction.iteration_time_s, 3) + " s) is " +
         core::format_fixed(100 * gain, 1) + " % faster than the searched plan (" +
         core::format_fixed(result.prediction.iteration_time_s, 3) +
         " s): the search space does not contain its plan; \"search\": {\"mode\": \"" +
         fastest->mode + "\"} plans it\n";
}

}  // namespace alpasim::planner

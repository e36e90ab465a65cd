#include "planner/intra_op/intra_op_pass.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "core/text.h"
#include "planner/ilp/glpk_solver.h"
#include "planner/intra_op/resharding.h"

namespace alpasim::planner::intra_op {

bool is_cheap(OpKind kind) {
  switch (kind) {
    case OpKind::kElementwise:
    case OpKind::kReduce:
    case OpKind::kSoftmax:
    case OpKind::kLayerNorm:
    case OpKind::kUpdate:
      return true;
    default:
      return false;
  }
}

std::string describe_memory(const IntraOpPlan& plan, std::optional<core::Bytes> limit) {
  const std::string limit_text =
      limit ? core::format_bytes(limit->value()) : std::string("unlimited");
  if (plan.feasibility == Feasibility::kOutOfMemory) {
    const std::int64_t needed = (limit ? limit->value() : 0) + plan.missing.value();
    return "does not fit: the smallest plan needs " + core::format_bytes(needed) +
           " per device, " + core::format_bytes(plan.missing.value()) + " (" +
           std::to_string(plan.missing.value()) + " bytes) more than the limit of " +
           limit_text;
  }
  if (plan.feasibility == Feasibility::kTimedOut) {
    return "no plan found before the deadline (limit " + limit_text + ")";
  }
  return "fits: " + core::format_bytes(plan.memory.value()) + " per device (limit " +
         limit_text + ")";
}

void write_to_stage(const IntraOpPlan& plan, schema::PlanStage* stage) {
  stage->shardings = plan.shardings;
  stage->weight_update_sharding = !plan.weight_update_sharding.empty();
}

IntraOpPass::IntraOpPass() : default_solver_(std::make_unique<ilp::GlpkSolver>()) {}
IntraOpPass::~IntraOpPass() = default;

namespace {

using Clock = std::chrono::steady_clock;

std::string options_key(const LogicalMesh& mesh, const IntraOpOptions& o,
                        const std::string& fingerprint) {
  std::ostringstream os;
  os << mesh.to_string() << '|' << algorithm_name(o.algorithm) << '|'
     << (o.memory_limit ? o.memory_limit->value() : -1) << '|' << o.simplify.drop_dominated
     << o.simplify.fold_single_strategy << o.simplify.merge_cheap_operators << '|'
     << o.weight_update_sharding << '|' << o.max_table_entries << '|' << o.prune_by_bound
     << o.condition_before_ilp << '|'
     << fingerprint << '|';
  return os.str();
}

// All-reduces and reduce-scatters are linear: all-reduce(a) + all-reduce(b) = all-reduce(a
// + b), and the same for reduce-scatter. A sum node (IntraOpNode::sums_operands) that reads,
// as written, operands each of which reduces its partial sums the same way (the same
// collective over the same mesh axes with the same buffer, or is such a sum itself) and is
// read by nothing else, adds the partial sums and reduces once: XLA's AllReduceReassociate
// pass does it for all-reduces, and Megatron's fused QKV GEMM reduces (sequence parallel:
// reduce-scatters) the input gradient of Q, K and V once where the graph's three projections
// reduce three times. The first operand keeps its collective in plan->node_cost_s; the
// others' are taken off. The solver's objective still prices each (an upper bound).
// Cost O(nodes + edges).
void charge_combined_reductions(const IntraOpGraph& g, const std::vector<std::vector<Strategy>>& st,
                                 IntraOpPlan* plan) {
  const std::size_t n = g.nodes.size();
  std::vector<int> readers(n, 0);
  for (const IntraOpNode& node : g.nodes) {
    for (int u : node.operands) ++readers[static_cast<std::size_t>(u)];
  }
  auto chosen = [&](std::size_t v) -> const Strategy& {
    return st[v][static_cast<std::size_t>(plan->choice[v])];
  };
  // The reduction a strategy ends with: (0 none, 1 all-reduce, 2 reduce-scatter), its axes
  // and its buffer.
  using Reduction = std::tuple<int, MeshAxes, std::int64_t>;
  auto reduction = [](const Strategy& s) -> Reduction {
    if (s.all_reduce_axes != 0) return {1, s.all_reduce_axes, s.all_reduce_bytes.value()};
    if (s.reduce_scatter_axes != 0) return {2, s.reduce_scatter_axes, s.reduce_scatter_bytes.value()};
    return {0, 0, 0};
  };
  // Per sum node whose operands' reductions were combined: the node that keeps the one
  // reduction left; -1 otherwise.
  std::vector<int> holder(n, -1);
  for (std::size_t v = 0; v < n; ++v) {
    const IntraOpNode& node = g.nodes[v];
    const Strategy& sv = chosen(v);
    if (!node.sums_operands || node.operands.size() < 2 || std::get<0>(reduction(sv)) != 0 ||
        sv.communication.value() > 0.0) {
      continue;
    }
    std::vector<int> holders;
    Reduction first{0, 0, 0};
    bool combinable = true;
    for (std::size_t k = 0; k < node.operands.size() && combinable; ++k) {
      const auto u = static_cast<std::size_t>(node.operands[k]);
      const int h = holder[u] >= 0 ? holder[u] : static_cast<int>(u);
      const Strategy& sh = chosen(static_cast<std::size_t>(h));
      const Reduction r = reduction(sh);
      combinable = readers[u] == 1 && chosen(u).output == sv.inputs[k] && std::get<0>(r) != 0 &&
                   (holder[u] >= 0 || sh.communication.value() > 0.0) && (k == 0 || r == first);
      if (k == 0) first = r;
      holders.push_back(h);
    }
    if (!combinable) continue;
    for (std::size_t k = 1; k < holders.size(); ++k) {
      const auto h = static_cast<std::size_t>(holders[k]);
      // What is left is the node's compute and its operands' resharding; a difference of
      // rounding only (below a picosecond) is the compute itself, so the trace lists no
      // empty collective and no phase gets a negative communication time.
      const double rest = plan->node_cost_s[h] - chosen(h).communication.value();
      plan->node_cost_s[h] = rest - plan->node_compute_s[h] < 1e-12 ? plan->node_compute_s[h] : rest;
    }
    holder[v] = holders.front();
  }
}

// Alpa §4.2 post-ILP rewrite: a gradient all-reduced over mesh axes A that only feeds an
// optimizer update replicated along A becomes reduce-scatter (gradient shards) + update of
// the shard + all-gather of the new weight. Communication volume is unchanged (ring:
// RS + AG = AR); optimizer states shrink by the group size.
void rewrite_weight_updates(const IntraOpGraph& g, const LogicalMesh& mesh,
                            const CostHooks& hooks, const std::vector<std::vector<Strategy>>& st,
                            IntraOpPlan* plan) {
  std::vector<int> users(g.nodes.size(), 0);
  for (const IntraOpNode& n : g.nodes) {
    for (int o : n.operands) ++users[static_cast<std::size_t>(o)];
  }
  for (std::size_t u = 0; u < g.nodes.size(); ++u) {
    const IntraOpNode& upd = g.nodes[u];
    if (upd.kind != OpKind::kUpdate) continue;
    const auto grad = static_cast<std::size_t>(upd.operands[1]);
    if (users[grad] != 1) continue;  // the gradient is needed whole elsewhere
    const Strategy& gs = st[grad][static_cast<std::size_t>(plan->choice[grad])];
    const Strategy& us = st[u][static_cast<std::size_t>(plan->choice[u])];
    if (gs.all_reduce_axes == 0) continue;
    MeshAxes axes = 0;
    for (int m = 0; m < 2; ++m) {
      const MeshAxes bit = m == 0 ? kAxis0 : kAxis1;
      if ((gs.all_reduce_axes & bit) != 0 && !us.output.uses_mesh_axis(m)) axes |= bit;
    }
    if (axes != gs.all_reduce_axes) continue;
    // The update's layout must leave some axis that the group size divides.
    const std::int64_t group = group_size(mesh, axes);
    bool divisible = false;
    for (int a = 0; a < us.output.rank() && !divisible; ++a) {
      std::int64_t parts = group;
      for (int m : us.output.mesh_axes(a)) parts *= mesh.axis_size(m);
      divisible = upd.shape[static_cast<std::size_t>(a)] % parts == 0;
    }
    if (!divisible) continue;
    WeightUpdateSharding w;
    w.update = upd.name;
    w.gradient = g.nodes[grad].name;
    w.axes = axes;
    w.state_bytes_before = us.memory;
    w.state_bytes_after = core::bytes(us.memory.value() / group);
    w.all_reduce = hooks.collective(Collective::kAllReduce, gs.all_reduce_bytes, axes);
    // The updated weight is all-gathered in its own dtype; same element count as the grad.
    const core::Bytes weight_bytes = core::bytes(
        gs.all_reduce_bytes.value() / g.nodes[grad].element_bytes * upd.element_bytes);
    w.reduce_scatter_plus_all_gather =
        hooks.collective(Collective::kReduceScatter, gs.all_reduce_bytes, axes) +
        hooks.collective(Collective::kAllGather, weight_bytes, axes);
    plan->cost += w.reduce_scatter_plus_all_gather - w.all_reduce;
    plan->node_cost_s[grad] += (w.reduce_scatter_plus_all_gather - w.all_reduce).value();
    plan->memory_after_rewrite -= w.state_bytes_before - w.state_bytes_after;
    plan->weight_update_sharding.push_back(std::move(w));
  }
}

// Node v's strategies restricted to the layout a plan requires of it: those with its
// output spec and (when listed) input specs; of several, the one named as the plan names
// it, if any. An error names the operator when none has the layout.
core::Result<std::vector<Strategy>> required_strategies(const IntraOpGraph& graph, int v,
                                                        const LogicalMesh& mesh,
                                                        std::vector<Strategy> all,
                                                        const schema::OperatorSharding& want) {
  std::vector<Strategy> kept;
  for (Strategy& s : all) {
    if (s.output != want.output) continue;
    // A plan may list specs for operands the pass leaves out of the node (the cross
    // entropy's labels, written by plans from before 2026-11-26): the node's own come first.
    if (!want.inputs.empty() &&
        (want.inputs.size() < s.inputs.size() ||
         !std::equal(s.inputs.begin(), s.inputs.end(), want.inputs.begin()))) {
      continue;
    }
    kept.push_back(std::move(s));
  }
  if (kept.empty()) {
    std::string in;
    for (const auto& spec : want.inputs) in += (in.empty() ? "" : " x ") + spec.to_string();
    return core::invalid_argument(
        "operator " + graph.nodes[static_cast<std::size_t>(v)].name + ": the layout " +
        (in.empty() ? "" : in + " -> ") + want.output.to_string() + " is not among its " +
        std::to_string(all.size()) + " strategies on the " + mesh.to_string() +
        " mesh (docs/plan.md: layouts that split unevenly, or leave a matmul's work "
        "replicated, are not priced)");
  }
  for (Strategy& s : kept) {
    if (s.name == want.strategy) return std::vector<Strategy>{std::move(s)};
  }
  return kept;
}

}  // namespace

core::Result<IntraOpPlan> IntraOpPass::run(const IntraOpGraph& graph, const LogicalMesh& mesh,
                                           const CostHooks& hooks, const IntraOpOptions& options,
                                           const std::string& cost_fingerprint) {
  const auto start = Clock::now();
  if (mesh.rows < 1 || mesh.cols < 1) {
    return core::invalid_argument("logical mesh " + mesh.to_string() +
                                  ": expected positive rows and cols");
  }
  if (!hooks.collective) return core::invalid_argument("CostHooks::collective is not set");
  ALPASIM_RETURN_IF_ERROR(graph.validate());
  if (!options.required.empty() && options.required.size() != graph.nodes.size()) {
    return core::invalid_argument("IntraOpOptions::required has " +
                                  std::to_string(options.required.size()) + " entries for " +
                                  std::to_string(graph.nodes.size()) + " nodes");
  }
  std::string key;
  if (!cost_fingerprint.empty() && options.required.empty()) {
    key = options_key(mesh, options, cost_fingerprint) + graph.structural_key();
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++cache_hits_;
      IntraOpPlan plan = it->second;
      // Same structure, maybe other names: report this graph's names.
      for (std::size_t v = 0; v < plan.shardings.size(); ++v) {
        plan.shardings[v].op = graph.nodes[v].name;
      }
      plan.weight_update_sharding.clear();
      plan.from_cache = true;
      plan.wall_time = core::seconds(std::chrono::duration<double>(Clock::now() - start).count());
      // Recompute the rewrite records with this graph's names (cheap, deterministic).
      if (options.weight_update_sharding && plan.feasibility == Feasibility::kFeasible) {
        std::vector<std::vector<Strategy>> st;
        for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
          st.push_back(enumerate_strategies(graph, static_cast<int>(v), mesh, hooks));
        }
        IntraOpPlan scratch = plan;
        scratch.cost = core::seconds(0.0);
        scratch.memory_after_rewrite = core::bytes(0);
        rewrite_weight_updates(graph, mesh, hooks, st, &scratch);
        plan.weight_update_sharding = std::move(scratch.weight_update_sharding);
      }
      return plan;
    }
  }
  ++solves_;
  IntraOpPlan plan;
  plan.nodes = static_cast<int>(graph.nodes.size());
  std::vector<std::vector<Strategy>> strategies;
  strategies.reserve(graph.nodes.size());
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    std::vector<Strategy> all = enumerate_strategies(graph, static_cast<int>(v), mesh, hooks);
    if (!options.required.empty() && options.required[v]) {
      ALPASIM_ASSIGN_OR_RETURN(all, required_strategies(graph, static_cast<int>(v), mesh,
                                                        std::move(all), *options.required[v]));
    }
    strategies.push_back(std::move(all));
  }
  BuiltProblem built = build_problem(graph, mesh, hooks, std::move(strategies));
  for (const auto& s : built.strategies) plan.strategies += static_cast<std::int64_t>(s.size());
  std::optional<std::int64_t> limit;
  if (options.memory_limit) limit = options.memory_limit->value();
  if (limit && built.problem.min_memory() > *limit) {
    plan.feasibility = Feasibility::kOutOfMemory;
    plan.missing = core::bytes(built.problem.min_memory() - *limit);
    plan.method = "memory bound";
  } else {
    std::vector<std::vector<int>> operands;
    std::vector<bool> cheap;
    for (const IntraOpNode& n : graph.nodes) {
      operands.push_back(n.operands);
      cheap.push_back(is_cheap(n.kind));
    }
    SimplifyOptions simplify_options = options.simplify;
    SimplifiedProblem simple = simplify(built.problem, operands, cheap, simplify_options);
    if (limit && simple.reduced.min_memory() > *limit) {
      // The heuristic merge made every plan too big although one fits: plan exactly.
      simplify_options.merge_cheap_operators = false;
      simple = simplify(built.problem, operands, cheap, simplify_options);
    }
    plan.simplify_stats = simple.stats;
    plan.reduced_nodes = static_cast<int>(simple.reduced.nodes.size());
    SolveOptions so;
    so.algorithm = options.algorithm;
    so.memory_limit_bytes = limit;
    so.time_limit = core::seconds(std::max(
        0.001, options.time_limit.value() -
                   std::chrono::duration<double>(Clock::now() - start).count()));
    so.stop_at_time_limit = options.stop_at_time_limit;
    so.ilp_solver = options.ilp_solver != nullptr ? options.ilp_solver : default_solver_.get();
    so.max_table_entries = options.max_table_entries;
    so.prune_by_bound = options.prune_by_bound;
    so.condition_before_ilp = options.condition_before_ilp;
    ALPASIM_ASSIGN_OR_RETURN(SolveOutcome outcome, solve_problem(simple.reduced, so));
    plan.feasibility = outcome.feasibility;
    plan.method = outcome.method;
    plan.pruned_strategies = outcome.pruned_strategies;
    plan.proven_optimal = outcome.proven_optimal && !options.simplify.merge_cheap_operators;
    plan.missing = core::bytes(outcome.missing_bytes);
    if (outcome.best) {
      plan.choice = simple.expand(outcome.best->choice);
      const double objective = built.problem.objective(plan.choice);
      ALPASIM_CHECK(std::abs(objective - outcome.best->objective) <=
                    1e-9 + 1e-6 * std::abs(objective))
          << "simplification changed the objective: " << objective << " vs "
          << outcome.best->objective;
      plan.cost = core::seconds(objective);
      plan.objective = plan.cost;
      // With the heuristic merge the solver's bound is one of the merged problem only; 0 is
      // always valid (every cost is >= 0).
      plan.lower_bound = core::seconds(
          options.simplify.merge_cheap_operators ? 0.0 : outcome.lower_bound);
      plan.memory = core::bytes(built.problem.memory(plan.choice));
      plan.memory_after_rewrite = plan.memory;
      for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
        const Strategy& s = built.strategies[v][static_cast<std::size_t>(plan.choice[v])];
        plan.shardings.push_back({graph.nodes[v].name, s.name, s.inputs, s.output});
        plan.node_compute_s.push_back(s.compute.value());
      }
      ALPASIM_CHECK(built.problem.cost_constant == 0.0) << "per-node costs would not sum to the cost";
      const CostProblem& cp = built.problem;
      for (std::size_t v = 0; v < cp.nodes.size(); ++v) {
        plan.node_cost_s.push_back(cp.nodes[v].cost[static_cast<std::size_t>(plan.choice[v])]);
      }
      // Each user's resharding of its operands, charged to the user, except that users of
      // one tensor in one pass reading it in the same layout share one copy (charged to the
      // first): the solver's edges price every (operand, user) pair, an upper bound. The
      // weight update's return to the parameter's layout stays per edge.
      std::set<std::tuple<int, int, std::string>> copies;  // (tensor, pass, layout)
      for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
        const IntraOpNode& node = graph.nodes[v];
        const Strategy& sv = built.strategies[v][static_cast<std::size_t>(plan.choice[v])];
        for (std::size_t k = 0; k < node.operands.size(); ++k) {
          const int u = node.operands[k];
          const IntraOpNode& src = graph.nodes[static_cast<std::size_t>(u)];
          const Strategy& su =
              built.strategies[static_cast<std::size_t>(u)][static_cast<std::size_t>(plan.choice[static_cast<std::size_t>(u)])];
          if (node.kind == OpKind::kUpdate && k == 0) {
            plan.node_cost_s[v] +=
                reshard_cost(src.shape, src.element_bytes, sv.output, su.output, mesh, hooks.collective).value();
          }
          if (su.output == sv.inputs[k]) continue;  // read as written: no copy
          if (copies.emplace(u, node.pass, sv.inputs[k].to_string()).second) {
            plan.node_cost_s[v] +=
                reshard_cost(src.shape, src.element_bytes, su.output, sv.inputs[k], mesh, hooks.collective).value();
          }
        }
      }
      charge_combined_reductions(graph, built.strategies, &plan);
      if (options.weight_update_sharding) {
        rewrite_weight_updates(graph, mesh, hooks, built.strategies, &plan);
      }
    }
  }
  plan.wall_time = core::seconds(std::chrono::duration<double>(Clock::now() - start).count());
  if (!key.empty()) cache_.emplace(key, plan);
  return plan;
}

}  // namespace alpasim::planner::intra_op

#include "planner/intra_op/cost_problem.h"

#include <algorithm>
#include <map>

#include "core/check.h"
#include "planner/intra_op/resharding.h"

namespace alpasim::planner::intra_op {

double CostProblem::objective(const std::vector<int>& choice) const {
  double total = cost_constant;
  for (std::size_t v = 0; v < nodes.size(); ++v) {
    total += nodes[v].cost[static_cast<std::size_t>(choice[v])];
  }
  for (const Edge& e : edges) {
    const auto kv = static_cast<std::size_t>(num_strategies(e.v));
    total += e.cost[static_cast<std::size_t>(choice[static_cast<std::size_t>(e.u)]) * kv +
                    static_cast<std::size_t>(choice[static_cast<std::size_t>(e.v)])];
  }
  return total;
}

std::int64_t CostProblem::memory(const std::vector<int>& choice) const {
  std::int64_t total = memory_constant;
  for (std::size_t v = 0; v < nodes.size(); ++v) {
    total += nodes[v].memory[static_cast<std::size_t>(choice[v])];
  }
  return total;
}

std::int64_t CostProblem::min_memory() const {
  std::int64_t total = memory_constant;
  for (const Node& n : nodes) total += *std::min_element(n.memory.begin(), n.memory.end());
  return total;
}

BuiltProblem build_problem(const IntraOpGraph& graph, const LogicalMesh& mesh,
                           const CostHooks& hooks) {
  std::vector<std::vector<Strategy>> strategies;
  strategies.reserve(graph.nodes.size());
  for (std::size_t v = 0; v < graph.nodes.size(); ++v) {
    strategies.push_back(enumerate_strategies(graph, static_cast<int>(v), mesh, hooks));
  }
  return build_problem(graph, mesh, hooks, std::move(strategies));
}

BuiltProblem build_problem(const IntraOpGraph& graph, const LogicalMesh& mesh,
                           const CostHooks& hooks, std::vector<std::vector<Strategy>> strategies) {
  BuiltProblem out;
  const std::size_t n = graph.nodes.size();
  ALPASIM_CHECK(strategies.size() == n) << strategies.size() << " strategy lists for " << n << " nodes";
  out.strategies = std::move(strategies);
  for (std::size_t v = 0; v < n; ++v) {
    ALPASIM_CHECK(!out.strategies[v].empty()) << "node " << graph.nodes[v].name << " has no strategy";
    CostProblem::Node node;
    for (const Strategy& s : out.strategies[v]) {
      node.cost.push_back(s.cost().value());
      node.memory.push_back(s.memory.value());
    }
    out.problem.nodes.push_back(std::move(node));
  }
  // One edge per (operand, user) pair; an operand used twice sums both matrices.
  std::map<std::pair<int, int>, std::size_t> edge_of;
  for (std::size_t v = 0; v < n; ++v) {
    const IntraOpNode& node = graph.nodes[v];
    for (std::size_t k = 0; k < node.operands.size(); ++k) {
      const int u = node.operands[k];
      const IntraOpNode& src = graph.nodes[static_cast<std::size_t>(u)];
      const auto& us = out.strategies[static_cast<std::size_t>(u)];
      const auto& vs = out.strategies[v];
      auto [it, fresh] = edge_of.emplace(std::make_pair(u, static_cast<int>(v)),
                                         out.problem.edges.size());
      if (fresh) {
        out.problem.edges.push_back({u, static_cast<int>(v),
                                     std::vector<double>(us.size() * vs.size(), 0.0)});
      }
      auto& cost = out.problem.edges[it->second].cost;
      // Many strategies share a layout: price each distinct (src, dst) pair once.
      std::vector<const schema::ShardingSpec*> from_specs;
      std::vector<const schema::ShardingSpec*> to_specs;
      auto index_of = [](std::vector<const schema::ShardingSpec*>& specs,
                         const schema::ShardingSpec& s) {
        for (std::size_t i = 0; i < specs.size(); ++i) {
          if (*specs[i] == s) return i;
        }
        specs.push_back(&s);
        return specs.size() - 1;
      };
      std::vector<std::size_t> from_index;
      std::vector<std::size_t> to_index;
      for (const Strategy& s : us) from_index.push_back(index_of(from_specs, s.output));
      for (const Strategy& s : vs) to_index.push_back(index_of(to_specs, s.inputs[k]));
      std::vector<double> priced(from_specs.size() * to_specs.size());
      for (std::size_t a = 0; a < from_specs.size(); ++a) {
        for (std::size_t b = 0; b < to_specs.size(); ++b) {
          priced[a * to_specs.size() + b] =
              reshard_cost(src.shape, src.element_bytes, *from_specs[a], *to_specs[b], mesh,
                           hooks.collective)
                  .value();
        }
      }
      for (std::size_t i = 0; i < us.size(); ++i) {
        for (std::size_t j = 0; j < vs.size(); ++j) {
          cost[i * vs.size() + j] += priced[from_index[i] * to_specs.size() + to_index[j]];
        }
      }
      // The updated weight is the next iteration's weight: bringing it back from the
      // update's layout to the parameter's layout is part of the edge (without this, a
      // replicated weight with a sharded update would look free).
      if (node.kind == OpKind::kUpdate && k == 0) {
        for (std::size_t i = 0; i < us.size(); ++i) {
          for (std::size_t j = 0; j < vs.size(); ++j) {
            cost[i * vs.size() + j] += reshard_cost(src.shape, src.element_bytes, vs[j].output,
                                                    us[i].output, mesh, hooks.collective)
                                           .value();
          }
        }
      }
    }
  }
  return out;
}

std::optional<Assignment> exhaustive_solve(const CostProblem& problem,
                                           std::optional<std::int64_t> memory_limit_bytes) {
  const std::size_t n = problem.nodes.size();
  std::vector<int> choice(n, 0);
  std::optional<Assignment> best;
  while (true) {
    const std::int64_t mem = problem.memory(choice);
    if (!memory_limit_bytes || mem <= *memory_limit_bytes) {
      const double obj = problem.objective(choice);
      if (!best || obj < best->objective) best = Assignment{choice, obj, mem};
    }
    std::size_t v = 0;
    while (v < n) {
      if (++choice[v] < problem.num_strategies(static_cast<int>(v))) break;
      choice[v] = 0;
      ++v;
    }
    if (v == n) break;
  }
  return best;
}

}  // namespace alpasim::planner::intra_op

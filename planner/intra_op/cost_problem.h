#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "planner/intra_op/mesh.h"
#include "planner/intra_op/op_graph.h"
#include "planner/intra_op/strategies.h"

namespace alpasim::planner::intra_op {

/// The optimisation problem of Alpa §4.2 with the graph semantics stripped: choose one
/// strategy per node to minimise sum of node costs + sum of edge (resharding) costs subject
/// to sum of node memories <= limit. Costs are seconds, memories bytes per device.
struct CostProblem {
  struct Node {
    std::vector<double> cost;          ///< seconds per strategy
    std::vector<std::int64_t> memory;  ///< bytes per device per strategy
  };
  struct Edge {
    int u = 0;                  ///< node of the rows
    int v = 0;                  ///< node of the columns, u != v
    std::vector<double> cost;   ///< row-major k_u × k_v, seconds
  };
  std::vector<Node> nodes;
  std::vector<Edge> edges;
  double cost_constant = 0.0;            ///< seconds every solution pays
  std::int64_t memory_constant = 0;      ///< bytes every solution holds

  int num_strategies(int v) const {
    return static_cast<int>(nodes[static_cast<std::size_t>(v)].cost.size());
  }
  /// Objective (seconds) of a full assignment.
  double objective(const std::vector<int>& choice) const;
  /// Memory (bytes per device) of a full assignment.
  std::int64_t memory(const std::vector<int>& choice) const;
  /// Sum over nodes of the smallest memory: no assignment needs less (memory is separable).
  std::int64_t min_memory() const;
};

/// An assignment and its value.
struct Assignment {
  std::vector<int> choice;  ///< strategy index per node
  double objective = 0.0;   ///< seconds
  std::int64_t memory = 0;  ///< bytes per device
};

/// The pass's problem for `graph` on `mesh`: strategies per node and one edge per operand
/// use, priced with reshard_cost() from the operand's output layout to the layout the user
/// strategy requires; the weight -> update edge also prices the way back, from the update's
/// output layout to the weight's (the new weight must be where the next iteration reads it).
struct BuiltProblem {
  std::vector<std::vector<Strategy>> strategies;  ///< per node
  CostProblem problem;
};
BuiltProblem build_problem(const IntraOpGraph& graph, const LogicalMesh& mesh,
                           const CostHooks& hooks);
/// The same over given strategies per node (enumerate_strategies, possibly restricted to
/// the layouts a plan requires); every node needs at least one.
BuiltProblem build_problem(const IntraOpGraph& graph, const LogicalMesh& mesh,
                           const CostHooks& hooks, std::vector<std::vector<Strategy>> strategies);

/// Exhaustive search over every assignment (for tests: product of strategy counts must be
/// small). Ties keep the lexicographically smallest choice. nullopt when none fits.
std::optional<Assignment> exhaustive_solve(const CostProblem& problem,
                                           std::optional<std::int64_t> memory_limit_bytes);

}  // namespace alpasim::planner::intra_op

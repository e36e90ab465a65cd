#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "planner/intra_op/cost_problem.h"

namespace alpasim::planner::intra_op {

/// The smallest of values[0, n), +inf when n is 0, with four independent accumulators: min
/// is exact in any order, and a single accumulator chains every comparison on the one
/// before (the hot loops of eliminate() and the diffusion bound). NaNs are skipped.
inline double minimum(const double* values, std::size_t n) {
  double a0 = INFINITY, a1 = INFINITY, a2 = INFINITY, a3 = INFINITY;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 = std::min(a0, values[i]);
    a1 = std::min(a1, values[i + 1]);
    a2 = std::min(a2, values[i + 2]);
    a3 = std::min(a3, values[i + 3]);
  }
  for (; i < n; ++i) a0 = std::min(a0, values[i]);
  return std::min(std::min(a0, a1), std::min(a2, a3));
}

/// An elimination order for the exact dynamic programme (variable elimination, i.e. the
/// DP over chains, trees and series-parallel graphs generalised to bounded treewidth).
/// Eliminating a node sums all tables that mention it and minimises it out, leaving a table
/// over its remaining neighbours: a chain leaf leaves a vector, a series node (degree 2) an
/// edge matrix, a node of degree d a d-dimensional table. The order is greedy (smallest
/// new table first, ties by node id), and planning fails when some step would need a table
/// of more than `max_table_entries`.
struct EliminationOrder {
  std::vector<int> order;                 ///< every node once
  std::int64_t largest_table = 0;         ///< entries of the largest intermediate table
  int largest_scope = 0;                  ///< neighbours of the widest eliminated node
  /// The DP's operation count: sum over eliminations of the new table's entries times the
  /// eliminated node's strategies (each entry minimises over them).
  std::int64_t work = 0;
};

/// The order, or nullopt when the graph is too wide for `max_table_entries`.
std::optional<EliminationOrder> plan_elimination(const CostProblem& problem,
                                                 std::int64_t max_table_entries);

/// Exact minimum of sum_v (cost_v + lambda · memory_v) + edge costs, by elimination in
/// `order`. lambda is seconds per byte (0: plain cost). Ties keep the smallest index.
/// The returned objective and memory are the true (lambda-free) values of the choice.
Assignment eliminate(const CostProblem& problem, const EliminationOrder& order, double lambda);

/// Result of the Lagrangian treatment of the memory limit.
struct LagrangianResult {
  std::optional<Assignment> best;  ///< best assignment that fits, if any was found
  /// Proven lower bound on the constrained optimum (max over tried lambda of the dual).
  double lower_bound = 0.0;
  bool proven_optimal = false;     ///< best->objective <= lower_bound + tolerance
  int iterations = 0;              ///< eliminations run
};

/// Minimises the objective subject to memory <= `memory_limit_bytes` by relaxing the limit
/// with a multiplier lambda >= 0: lambda = 0 first (optimal if it fits), then a geometric
/// search for a fitting lambda and a bisection between the last misfit and the first fit.
/// Each solution that fits is feasible; max over lambda of min(cost + lambda(mem - limit))
/// is a lower bound, so a zero gap proves optimality. A remaining duality gap is reported,
/// not hidden (the ILP closes it).
LagrangianResult lagrangian_solve(const CostProblem& problem, const EliminationOrder& order,
                                  std::int64_t memory_limit_bytes, int max_iterations = 60);

}  // namespace alpasim::planner::intra_op

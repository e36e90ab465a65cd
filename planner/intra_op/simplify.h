#pragma once

#include <cstdint>
#include <vector>

#include "planner/intra_op/cost_problem.h"

namespace alpasim::planner::intra_op {

/// Which graph reductions to apply before solving.
struct SimplifyOptions {
  /// Exact: drop strategy i of a node when another strategy j is no worse in node cost,
  /// memory and every incident resharding cost (no optimum needs i).
  bool drop_dominated = true;
  /// Exact: a node left with one strategy is folded into its neighbours' node costs.
  bool fold_single_strategy = true;
  /// HEURISTIC (Alpa §4.2 graph simplification): a cheap operator (elementwise, layout,
  /// reduce, softmax, layer-norm, update) is merged into its deepest operand (BFS depth):
  /// for each strategy of the operand it takes its best strategy given that operand alone.
  /// Can lose optimality when the merged node's other edges would prefer another choice.
  bool merge_cheap_operators = false;
};

/// Counts of what simplify() did.
struct SimplifyStats {
  int dominated_strategies = 0;  ///< strategies dropped by dominance
  int folded_nodes = 0;          ///< single-strategy nodes folded away
  int merged_nodes = 0;          ///< cheap operators merged into an operand (heuristic)
};

/// A reduced problem and how to map its solutions back.
struct SimplifiedProblem {
  CostProblem reduced;
  /// For each original node: the reduced node that decides it (-1: fixed).
  std::vector<int> owner;
  /// For each original node: original strategy per strategy of its owner (size 1 if fixed).
  std::vector<std::vector<int>> table;
  SimplifyStats stats;
  /// Original choice of every node for a choice of the reduced nodes.
  std::vector<int> expand(const std::vector<int>& reduced_choice) const;
};

/// Applies the reductions. `operands[v]` lists the operand nodes of v (for merging and BFS
/// depth), `cheap[v]` marks mergeable operators; both may be empty when merging is off.
/// Every solution of the reduced problem expands to one of the original problem with
/// objective = reduced objective (constants included) and the same memory.
SimplifiedProblem simplify(const CostProblem& problem, const std::vector<std::vector<int>>& operands,
                           const std::vector<bool>& cheap, const SimplifyOptions& options);

}  // namespace alpasim::planner::intra_op

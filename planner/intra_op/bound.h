#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "planner/intra_op/cost_problem.h"

namespace alpasim::planner::intra_op {

/// A lower bound on a CostProblem from a reparametrisation (min-sum diffusion, Kovalevsky &
/// Koval; the LP relaxation's dual): costs are moved between nodes and edges without
/// changing any assignment's objective, and then sum of every node's and every edge's
/// minimum bounds every assignment from below. It also bounds every assignment that uses a
/// given strategy: bound - min(node) + node(strategy).
struct Reparametrisation {
  std::vector<std::vector<double>> node;  ///< reparametrised node costs
  double lower_bound = 0.0;               ///< seconds, constants included
  /// Lower bound of any assignment choosing strategy i at node v.
  double bound_with(int v, int i) const;
  std::vector<double> node_min;           ///< min of node[v]
};

/// Min-sum diffusion that can be resumed: run(a) then run(b) leaves exactly the state of
/// run(a + b), so a caller can ask for more sweeps only when the bound it has is too weak.
/// O(sum of edge sizes) per sweep, no allocation inside a sweep. `problem` must outlive it.
class Diffusion {
 public:
  explicit Diffusion(const CostProblem& problem);
  /// Runs `sweeps` more rounds over all nodes.
  void run(int sweeps);
  int sweeps_done() const { return sweeps_done_; }
  /// The bound of the current state.
  Reparametrisation bound() const;

 private:
  const CostProblem& p_;
  std::vector<std::vector<double>> node_;  // reparametrised node costs
  std::vector<std::vector<double>> edge_;  // reparametrised edge costs, row-major as the problem's
  // An edge seen from one of its nodes: the edge, whether the node is its u (its rows),
  // and the edge's row and column counts.
  struct Incidence {
    std::size_t edge;
    bool is_u;
    std::size_t ku, kw;
  };
  std::vector<std::vector<Incidence>> inc_;  // per node
  std::vector<double> total_;  // scratch: one node's total, then its share
  std::vector<double> mins_;   // scratch: per incident edge, its minimum per strategy of the node
  int sweeps_done_ = 0;
};

/// Runs `sweeps` rounds of min-sum diffusion over all nodes (O(sweeps · sum of edge sizes)).
Reparametrisation diffuse(const CostProblem& problem, int sweeps);

/// Strategies that survive bound-based pruning: those whose bound_with() does not exceed
/// `upper_bound` (the objective of a known assignment, plus a rounding tolerance). Any
/// assignment with a pruned strategy costs more than the known one, so an optimum (with or
/// without a memory limit, when the known assignment fits it) survives. Exact.
struct Pruned {
  CostProblem problem;                 ///< the problem on the kept strategies
  std::vector<std::vector<int>> kept;  ///< per node: original strategy per kept index
  std::int64_t removed = 0;            ///< strategies pruned
  /// Original choice for a choice of the pruned problem.
  std::vector<int> expand(const std::vector<int>& choice) const;
};
Pruned prune(const CostProblem& problem, const Reparametrisation& r, double upper_bound);
/// The problem on the strategies marked in `keep` (per node, per strategy; at least one per
/// node).
Pruned prune_to(const CostProblem& problem, const std::vector<std::vector<bool>>& keep);

/// Keeps the `m` strategies of each node with the smallest reparametrised cost (ties by
/// index) and solves that restricted problem exactly by elimination when its tables stay
/// below `max_table_entries`: a good assignment (an upper bound), not an optimum.
std::optional<Assignment> restricted_solve(const CostProblem& problem, const Reparametrisation& r,
                                           int m, std::int64_t max_table_entries);

}  // namespace alpasim::planner::intra_op

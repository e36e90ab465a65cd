#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/status.h"
#include "planner/adapters/ir_adapter.h"

namespace alpasim::planner::inter_op {

using adapters::SubmeshShape;

/// Alpa §5.2's submesh shapes for a cluster of `nodes` × `gpus_per_node`: (1, 1), (1, 2),
/// (1, 4), ... (powers of two below gpus_per_node), (1, gpus_per_node), then (2, M) ...
/// (nodes, M). These can always cover the cluster exactly (Theorem 1).
std::vector<SubmeshShape> submesh_shapes(std::int64_t nodes, std::int64_t gpus_per_node);

/// The stage cost table of Algorithm 1. time(begin, end, submesh, stages_from_end) is the
/// per-microbatch latency t_intra of layers [begin, end) on submesh `submesh` with the best
/// logical mesh whose memory fits when `stages_from_end` stages (this one included) follow,
/// i.e. with min(stages_from_end, B) microbatches in flight under 1F1B; +inf when nothing
/// fits. Filled by the caller.
struct InterOpProblem {
  int num_layers = 0;          ///< L
  std::int64_t num_devices = 0;  ///< N·M, all must be used
  std::int64_t num_microbatches = 1;  ///< B
  int max_stages = 0;          ///< S <= L
  std::vector<SubmeshShape> submeshes;
  std::vector<double> table;   ///< [begin][end][submesh][stages_from_end], see index()

  static constexpr double kInfeasible = std::numeric_limits<double>::infinity();
  /// Allocates the table (all infeasible).
  void resize();
  std::size_t index(int begin, int end, int submesh, int stages_from_end) const;
  double time(int begin, int end, int submesh, int stages_from_end) const {
    return table[index(begin, end, submesh, stages_from_end)];
  }
  void set(int begin, int end, int submesh, int stages_from_end, double t) {
    table[index(begin, end, submesh, stages_from_end)] = t;
  }
};

/// One stage of a solution, in pipeline order.
struct StageChoice {
  int layer_begin = 0;
  int layer_end = 0;
  int submesh = 0;  ///< index into InterOpProblem::submeshes
  double time_s = 0;
  friend bool operator==(const StageChoice&, const StageChoice&) = default;
};

/// A pipeline: T = Σ t_i + (B - 1) · max t_i (Alpa Eq. 2).
struct InterOpSolution {
  double total_s = InterOpProblem::kInfeasible;
  double sum_s = 0;
  double max_stage_s = 0;
  std::vector<StageChoice> stages;
};

struct InterOpOptions {
  /// Alpa's ε: skip a t_max within a relative ε of the last one enumerated (0: exact).
  double epsilon = 0.0;
  /// Stop once B · t_max >= the best T found (exact: any new solution at t_max has
  /// T >= B · t_max).
  bool prune = true;
  int top_k = 1;  ///< distinct solutions kept, best first
};

struct InterOpResult {
  std::vector<InterOpSolution> solutions;  ///< best first; empty: nothing fits
  int t_max_enumerated = 0;  ///< DP passes run
  int t_max_candidates = 0;  ///< distinct finite stage times
};

/// Algorithm 1 of Alpa §5.2: for every t_max in increasing order, the DP
/// F(s, k, d) = min over (i, submesh) of t(k..i, submesh, s) + F(s-1, i+1, d - size) with
/// stage times capped at t_max, over exactly num_devices devices; T*(t_max) =
/// min_s F(s, 0, N·M) + (B-1)·t_max. Deterministic (ties: first found in the fixed order).
InterOpResult solve_inter_op(const InterOpProblem& problem, const InterOpOptions& options);

/// Exhaustive enumeration of every contiguous partition and submesh assignment covering
/// exactly num_devices (for tests; exponential).
InterOpSolution brute_force_inter_op(const InterOpProblem& problem);

/// Where a stage's submesh sits: its first node and first local GPU.
struct Placement {
  std::int64_t first_node = 0;
  std::int64_t first_local = 0;
};

/// Places stage submeshes on a nodes × gpus_per_node cluster: multi-node and whole-node
/// submeshes first on consecutive nodes in pipeline order (neighbouring stages on
/// neighbouring nodes), then the partial-node submeshes, largest first, each at the first
/// aligned free slot (buddy allocation: exact for power-of-two sizes, Theorem 1). Errors
/// (kInvalidArgument): sizes do not sum to the cluster or cannot be packed without overlap.
core::Result<std::vector<Placement>> assign_devices(const std::vector<SubmeshShape>& stages,
                                                    std::int64_t nodes,
                                                    std::int64_t gpus_per_node);

}  // namespace alpasim::planner::inter_op

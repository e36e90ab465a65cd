#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "core/units.h"
#include "planner/ilp/ilp_model.h"
#include "planner/intra_op/cost_problem.h"
#include "planner/intra_op/dp_solver.h"

namespace alpasim::planner::intra_op {

/// Which exact method solves a CostProblem.
/// kAuto and kDp first try the DP; a graph too wide for its tables is bounded (min-sum
/// diffusion), strategies that cannot be in an optimum are pruned (bound.h), and the DP
/// retries on what is left.
enum class Algorithm {
  kAuto,  ///< DP (+ pruning, + Lagrangian); the ILP where the DP cannot prove optimality
  kDp,    ///< DP (+ pruning, + Lagrangian) only; may end with a reported duality gap
  kIlp,   ///< the ILP only (the exact reference), warm-started by a greedy assignment
};
/// "auto", "dp", "ilp".
const char* algorithm_name(Algorithm a);

/// Options of solve_problem().
struct SolveOptions {
  Algorithm algorithm = Algorithm::kAuto;
  /// Per-device memory limit on CostProblem::memory() (none: unconstrained).
  std::optional<std::int64_t> memory_limit_bytes;
  /// Wall-clock limit of the whole solve; the ILP gets what the DP left.
  core::Seconds time_limit = core::seconds(60.0);
  /// true: a hard deadline. The bound's extra sweeps and cutset conditioning stop at
  /// time_limit too (the ILP then gets almost no time), so the solve ends near it, perhaps
  /// unproven. false (default): they are bounded by counts only (diffusion_max_sweeps,
  /// condition_work_budget), so which method finishes does not depend on the machine.
  bool stop_at_time_limit = false;
  /// MILP backend for kIlp and the kAuto fallback (not owned); nullptr: no ILP available.
  ilp::IlpSolver* ilp_solver = nullptr;
  /// Largest intermediate DP table (entries) before the DP gives up on a graph.
  std::int64_t max_table_entries = std::int64_t{1} << 22;
  /// Hand the ILP the best known assignment as its starting incumbent.
  bool ilp_warm_start = true;
  /// Rounds of min-sum diffusion for the lower bound that prunes strategies (exactly) when a
  /// graph is too wide for the DP.
  int diffusion_sweeps = 100;
  /// Without a memory limit, while the problem left by pruning is still too wide for the
  /// DP, the diffusion goes on (4x the sweeps each time) up to this many sweeps: a tighter
  /// bound prunes more, and the DP then proves what the ILP would (GPT blocks with weight
  /// gradients and full recomputation: 2-5 s in GLPK, 0.1-0.4 s this way).
  int diffusion_max_sweeps = 1600;
  /// Lambda values tried when pruning a memory-limited problem (each costs a diffusion).
  int lagrangian_prune_steps = 8;
  /// Bound-based pruning (exact): kIlp prunes before formulating; kAuto/kDp prune when a graph
  /// is too wide for the DP. Off gives the plain DP / plain ILP.
  bool prune_by_bound = true;
  /// Without a memory limit, a graph whose DP table would exceed this many entries is
  /// bounded and pruned first (exact, as for too-wide graphs): near-tight bounds on
  /// transformer layers shrink a multi-million-entry table to a few thousand entries.
  std::int64_t prune_tables_above = std::int64_t{1} << 18;
  /// kAuto without a memory limit, before the ILP: cutset conditioning (exact). One node's
  /// strategy is fixed per branch, which narrows the DP's tables; a branch whose bound
  /// exceeds the best assignment so far is skipped, the others are bounded, pruned and solved
  /// by the DP. Falls back to the ILP when a branch is still too wide.
  bool condition_before_ilp = true;
  /// Nodes fixed at most along one chain of branches (1: one node, as Alpa-style cutset
  /// conditioning; 2: a branch still too wide after pruning fixes a second node).
  int condition_depth = 2;
  /// DP operations (EliminationOrder::work) after which conditioning stops opening branches
  /// and the ILP takes over. A count, not a clock, so the method chosen (and any
  /// time-limited answer) does not depend on the machine. 2^28 is about 0.7 s on one core
  /// of this project's 2-core CI machine (2.6 ns per operation measured); the GPT blocks
  /// that two-level conditioning solves in 0.1-0.2 s take about 6·10^6.
  std::int64_t condition_work_budget = std::int64_t{1} << 28;
};

/// How a solve ended: a value, since an out-of-memory stage is a normal answer during
/// search (house rule 5); errors are reserved for bad input and backend failures.
enum class Feasibility {
  kFeasible,     ///< `best` holds an assignment within the memory limit
  kOutOfMemory,  ///< no assignment fits: see missing_bytes
  kTimedOut,     ///< the deadline passed before any fitting assignment was found
};

/// The answer of solve_problem().
struct SolveOutcome {
  Feasibility feasibility = Feasibility::kFeasible;
  std::optional<Assignment> best;
  bool proven_optimal = false;
  double lower_bound = 0.0;        ///< seconds; equals best->objective when proven
  std::int64_t missing_bytes = 0;  ///< kOutOfMemory: min memory of any assignment - limit
  std::string method;              ///< "dp", "dp+lagrangian", "ilp", "dp+lagrangian+ilp", ...
  int dp_iterations = 0;           ///< eliminations run
  std::int64_t pruned_strategies = 0;  ///< removed by the bound (method "bound+...")
  std::optional<ilp::IlpStatus> ilp_status;
  core::Seconds wall_time = core::seconds(0.0);
};

/// Minimises `problem` under options.memory_limit_bytes. Errors: kFailedPrecondition when
/// kDp meets a graph too wide for max_table_entries or an ILP is needed without a solver,
/// and the backend's own errors.
core::Result<SolveOutcome> solve_problem(const CostProblem& problem, const SolveOptions& options);

}  // namespace alpasim::planner::intra_op

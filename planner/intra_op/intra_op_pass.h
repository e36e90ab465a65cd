#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "planner/ilp/ilp_model.h"
#include "planner/intra_op/mesh.h"
#include "planner/intra_op/op_graph.h"
#include "planner/intra_op/simplify.h"
#include "planner/intra_op/solve.h"
#include "planner/intra_op/strategies.h"
#include "schema/plan.h"

namespace alpasim::planner::intra_op {

/// Options of the intra-op pass.
struct IntraOpOptions {
  Algorithm algorithm = Algorithm::kAuto;
  /// Per-device memory budget for the stage (none: unconstrained).
  std::optional<core::Bytes> memory_limit;
  /// Hard wall-clock limit of the solve.
  core::Seconds time_limit = core::seconds(60.0);
  /// SolveOptions::stop_at_time_limit: every phase of the solve heeds time_limit (a hard
  /// deadline; the answer may then be unproven). Off: only the ILP does.
  bool stop_at_time_limit = false;
  SimplifyOptions simplify;
  /// Post-ILP ZeRO-like rewrite (Alpa §4.2): all-reduce of a gradient -> reduce-scatter +
  /// all-gather around a sharded optimizer update.
  bool weight_update_sharding = true;
  /// MILP backend (not owned). nullptr: the pass uses its own GlpkSolver.
  ilp::IlpSolver* ilp_solver = nullptr;
  std::int64_t max_table_entries = std::int64_t{1} << 22;
  /// Bound-based pruning before the ILP (exact; SolveOptions::prune_by_bound).
  bool prune_by_bound = true;
  /// Cutset conditioning before the ILP (exact; SolveOptions::condition_before_ilp).
  bool condition_before_ilp = true;
  /// Empty: the pass optimises every node. Otherwise one entry per graph node: the layout
  /// a plan file gives the operator (its output spec and, when listed, its input specs),
  /// which the node must take, so the pass prices that plan instead of choosing one
  /// (Searcher::evaluate of a plan written by hand or by another tool); nodes left nullopt
  /// (inputs, weights, other layers' operators) are still optimised. A layout that is not
  /// among the node's strategies on the mesh is an error naming the operator. Such a run
  /// is never cached.
  std::vector<std::optional<schema::OperatorSharding>> required;
};

/// One application of the weight-update-sharding rewrite.
struct WeightUpdateSharding {
  std::string update;     ///< update operator name
  std::string gradient;   ///< operator whose all-reduce became reduce-scatter + all-gather
  MeshAxes axes = 0;      ///< mesh axes the optimizer states are now split over
  core::Bytes state_bytes_before = core::bytes(0);  ///< per device
  core::Bytes state_bytes_after = core::bytes(0);   ///< per device
  core::Seconds all_reduce = core::seconds(0.0);    ///< replaced collective
  core::Seconds reduce_scatter_plus_all_gather = core::seconds(0.0);  ///< its replacement
};

/// The answer to "cost, memory and plan of this stage on this logical mesh".
struct IntraOpPlan {
  Feasibility feasibility = Feasibility::kFeasible;
  /// kOutOfMemory: bytes per device the smallest-memory plan exceeds the limit by.
  core::Bytes missing = core::bytes(0);
  /// Communication + resharding (+ compute when CostHooks::device_flops_per_s > 0), after
  /// the weight-update rewrite.
  core::Seconds cost = core::seconds(0.0);
  /// The solver's objective (the cost before the weight-update rewrite) and a proven lower
  /// bound on its optimum (equal when proven_optimal).
  core::Seconds objective = core::seconds(0.0);
  core::Seconds lower_bound = core::seconds(0.0);
  bool proven_optimal = false;
  /// Per-device memory the solver budgeted, and after the weight-update rewrite.
  core::Bytes memory = core::bytes(0);
  core::Bytes memory_after_rewrite = core::bytes(0);
  std::vector<int> choice;                               ///< strategy index per node
  std::vector<schema::OperatorSharding> shardings;       ///< per node, for plan.json
  /// Per node, seconds: its strategy's cost plus the resharding of its operands into the
  /// layouts it reads (the weight -> update edge both ways), after the weight-update
  /// rewrite, with a copy that several users of one tensor read in one pass
  /// (IntraOpNode::pass) charged once, to the first, and all-reduces of partial sums that
  /// are only added together charged once, to the first operand of the sum (IntraOpNode::
  /// sums_operands); they sum to `cost` less those shared copies and combined all-reduces
  /// (`cost` prices each, as the solver's objective does). Lets a caller
  /// charge each operator's communication to its phase (forward, backward, recompute,
  /// optimizer).
  std::vector<double> node_cost_s;
  /// Per node, seconds: the compute part of its strategy's cost (CostHooks), <= node_cost_s.
  std::vector<double> node_compute_s;
  std::vector<WeightUpdateSharding> weight_update_sharding;
  // Statistics.
  int nodes = 0;                ///< operators in the graph
  int reduced_nodes = 0;        ///< nodes left after simplification
  std::int64_t strategies = 0;  ///< strategies before simplification
  SimplifyStats simplify_stats;
  std::string method;           ///< how it was solved (SolveOutcome::method)
  std::int64_t pruned_strategies = 0;  ///< strategies removed by the bound (exact)
  bool from_cache = false;
  core::Seconds wall_time = core::seconds(0.0);
};

/// The intra-op pass of Alpa §4 with a result cache. One instance may serve many queries
/// (the inter-op DP asks for every stage × mesh); identical queries cost one solve.
class IntraOpPass {
 public:
  IntraOpPass();
  ~IntraOpPass();

  /// Plans `graph` on `mesh`. `cost_fingerprint` identifies the cost model behind `hooks`
  /// (e.g. the profile id and mesh bandwidths); results are cached under the graph's
  /// structural hash, the mesh, the options and this fingerprint, and an empty fingerprint
  /// disables the cache. Errors: invalid graphs, backend failures.
  core::Result<IntraOpPlan> run(const IntraOpGraph& graph, const LogicalMesh& mesh,
                                const CostHooks& hooks, const IntraOpOptions& options,
                                const std::string& cost_fingerprint = "");

  /// Queries answered from the cache / solved.
  int cache_hits() const { return cache_hits_; }
  int solves() const { return solves_; }

 private:
  std::unique_ptr<ilp::IlpSolver> default_solver_;
  std::map<std::string, IntraOpPlan> cache_;
  int cache_hits_ = 0;
  int solves_ = 0;
};

/// One line for a user: "fits: 1.50 GiB per device (limit 2.00 GiB)" or "does not fit: the
/// smallest plan needs 3.25 GiB per device, 1.25 GiB (1342177280 bytes) more than the
/// limit of 2.00 GiB".
std::string describe_memory(const IntraOpPlan& plan, std::optional<core::Bytes> limit);

/// Copies a feasible plan into a plan.json stage: one OperatorSharding per operator and
/// the weight-update-sharding flag (true when the rewrite applied to any weight). Leaves the
/// stage's layer range, submesh and device ids to the caller (the inter-op pass).
void write_to_stage(const IntraOpPlan& plan, schema::PlanStage* stage);

/// True for the operators simplify() may merge into an operand (elementwise, layout,
/// reduce, softmax, layer-norm, update).
bool is_cheap(OpKind kind);

}  // namespace alpasim::planner::intra_op

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace alpasim::planner::ilp {

/// Kind of a decision variable.
enum class VarKind { kContinuous, kBinary };

/// One column of a mixed-integer linear program: bounds, objective coefficient and kind.
struct IlpVar {
  double lower = 0.0;      ///< finite lower bound
  double upper = 1.0;      ///< finite upper bound, >= lower
  double objective = 0.0;  ///< coefficient in the minimised objective
  VarKind kind = VarKind::kContinuous;
};

/// One row: lower <= sum(coefs[i] * x[vars[i]]) <= upper. Variable indices in a row are
/// distinct (GLPK aborts on duplicates; validate() rejects them).
struct IlpRow {
  std::vector<int> vars;
  std::vector<double> coefs;
  double lower = 0.0;  ///< may be -infinity
  double upper = 0.0;  ///< may be +infinity; lower == upper is an equality
};

/// A solver-neutral MILP "minimise c·x + constant subject to rows and bounds". The intra-op
/// pass builds it; an IlpSolver (GLPK, or a fake in tests) solves it.
struct IlpModel {
  std::vector<IlpVar> vars;
  std::vector<IlpRow> rows;
  double objective_constant = 0.0;

  /// Adds a variable and returns its index.
  int add_var(IlpVar v);
  /// Adds a row and returns its index.
  int add_row(IlpRow r);
  /// Checks everything a solver could abort on: finite coefficients and bounds, lower <=
  /// upper, variable indices in range and distinct within a row, matching vector sizes.
  /// The message names the first offending row or column, e.g. "row 3: variable 7 twice".
  core::Status validate() const;
};

/// Limits of one solve.
struct IlpOptions {
  /// Hard wall-clock limit for the whole solve, including building the solver's model.
  core::Seconds time_limit = core::seconds(60.0);
  /// A feasible assignment of all variables to start from (warm start); ignored when empty.
  std::vector<double> warm_start;
  /// Relative MIP gap at which the search stops and reports kOptimal (0: prove optimality).
  double relative_gap = 0.0;
};

/// How a solve ended.
enum class IlpStatus {
  kOptimal,         ///< proven optimal (within IlpOptions::relative_gap)
  kFeasible,        ///< stopped at the time limit with an incumbent that is not proven optimal
  kInfeasible,      ///< proven to have no solution
  kNoSolutionFound  ///< stopped at the time limit without any incumbent
};

/// Name for logs and reports: "optimal", "feasible", "infeasible", "no solution found".
const char* ilp_status_name(IlpStatus status);

/// The answer of an IlpSolver. values is empty unless status is kOptimal or kFeasible.
struct IlpSolution {
  IlpStatus status = IlpStatus::kNoSolutionFound;
  std::vector<double> values;
  double objective = 0.0;  ///< c·x + constant of `values`
  /// Best proven lower bound on the optimum (the objective itself when kOptimal).
  double bound = 0.0;
  core::Seconds wall_time = core::seconds(0.0);
};

/// A MILP backend. Implementations must return within IlpOptions::time_limit (plus the time
/// of one solver iteration), never abort on a model that passes IlpModel::validate(), and
/// report solver failures as a Status.
class IlpSolver {
 public:
  virtual ~IlpSolver() = default;
  /// Solves `model`; an error Status means the backend failed, not that the model is
  /// infeasible (that is IlpStatus::kInfeasible).
  virtual core::Result<IlpSolution> solve(const IlpModel& model, const IlpOptions& options) = 0;
  /// Backend name for reports, e.g. "glpk 5.0".
  virtual std::string name() const = 0;
};

}  // namespace alpasim::planner::ilp

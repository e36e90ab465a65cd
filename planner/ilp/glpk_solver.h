#pragma once

#include <string>

#include "planner/ilp/ilp_model.h"

namespace alpasim::planner::ilp {

/// IlpSolver backed by GLPK (glp_simplex for the root relaxation, then glp_intopt branch and
/// cut). The model is validated first, GLPK's own error hook is caught (GLPK would otherwise
/// abort the process), terminal output is off, and the wall-clock limit is enforced twice:
/// as GLPK's tm_lim and by a callback that terminates the search once the deadline passed.
/// A warm start is handed to GLPK as a heuristic incumbent (glp_ios_heur_sol) and returned
/// as a kFeasible answer when the deadline hits before GLPK finds anything better.
/// Not thread-safe across threads sharing a GLPK environment; one solve at a time per thread.
class GlpkSolver final : public IlpSolver {
 public:
  core::Result<IlpSolution> solve(const IlpModel& model, const IlpOptions& options) override;
  std::string name() const override;
};

}  // namespace alpasim::planner::ilp

#include "planner/ilp/ilp_model.h"

#include <cmath>
#include <string>

namespace alpasim::planner::ilp {

int IlpModel::add_var(IlpVar v) {
  vars.push_back(v);
  return static_cast<int>(vars.size()) - 1;
}

int IlpModel::add_row(IlpRow r) {
  rows.push_back(std::move(r));
  return static_cast<int>(rows.size()) - 1;
}

core::Status IlpModel::validate() const {
  if (!std::isfinite(objective_constant)) {
    return core::invalid_argument("objective constant is not finite");
  }
  for (std::size_t j = 0; j < vars.size(); ++j) {
    const IlpVar& v = vars[j];
    const std::string where = "variable " + std::to_string(j) + ": ";
    if (!std::isfinite(v.lower) || !std::isfinite(v.upper)) {
      return core::invalid_argument(where + "bounds must be finite");
    }
    if (v.lower > v.upper) return core::invalid_argument(where + "lower bound above upper bound");
    if (!std::isfinite(v.objective)) {
      return core::invalid_argument(where + "objective coefficient is not finite");
    }
  }
  std::vector<int> seen_in_row(vars.size(), -1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const IlpRow& r = rows[i];
    const std::string where = "row " + std::to_string(i) + ": ";
    if (r.vars.size() != r.coefs.size()) {
      return core::invalid_argument(where + "variables and coefficients differ in number");
    }
    if (std::isnan(r.lower) || std::isnan(r.upper) || r.lower > r.upper ||
        r.lower == INFINITY || r.upper == -INFINITY) {
      return core::invalid_argument(where + "invalid bounds");
    }
    for (std::size_t k = 0; k < r.vars.size(); ++k) {
      const int v = r.vars[k];
      if (v < 0 || static_cast<std::size_t>(v) >= vars.size()) {
        return core::invalid_argument(where + "variable " + std::to_string(v) + " out of range");
      }
      if (seen_in_row[static_cast<std::size_t>(v)] == static_cast<int>(i)) {
        return core::invalid_argument(where + "variable " + std::to_string(v) + " twice");
      }
      seen_in_row[static_cast<std::size_t>(v)] = static_cast<int>(i);
      if (!std::isfinite(r.coefs[k])) {
        return core::invalid_argument(where + "coefficient of variable " + std::to_string(v) +
                                      " is not finite");
      }
    }
  }
  return core::ok_status();
}

const char* ilp_status_name(IlpStatus status) {
  switch (status) {
    case IlpStatus::kOptimal: return "optimal";
    case IlpStatus::kFeasible: return "feasible";
    case IlpStatus::kInfeasible: return "infeasible";
    case IlpStatus::kNoSolutionFound: return "no solution found";
  }
  return "unknown";
}

}  // namespace alpasim::planner::ilp

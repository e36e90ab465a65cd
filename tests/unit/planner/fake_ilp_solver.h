#pragma once

#include <string>
#include <vector>

#include "planner/ilp/ilp_model.h"

namespace alpasim::planner::ilp::testing {

/// An IlpSolver that records the models it is given and answers with a scripted status,
/// echoing the warm start as its solution when it has one (house rule 3: fakes for external
/// effects). Lets tests drive the pass through deadline and failure paths without GLPK.
class FakeIlpSolver final : public IlpSolver {
 public:
  explicit FakeIlpSolver(IlpStatus answer) : answer_(answer) {}

  core::Result<IlpSolution> solve(const IlpModel& model, const IlpOptions& options) override {
    models.push_back(model);
    warm_starts.push_back(options.warm_start);
    IlpSolution s;
    s.status = answer_;
    if ((answer_ == IlpStatus::kFeasible || answer_ == IlpStatus::kOptimal) &&
        !options.warm_start.empty()) {
      s.values = options.warm_start;
      s.objective = model.objective_constant;
      for (std::size_t j = 0; j < model.vars.size(); ++j) {
        s.objective += model.vars[j].objective * s.values[j];
      }
    }
    return s;
  }
  std::string name() const override { return "fake"; }

  std::vector<IlpModel> models;                 ///< every model solved, in order
  std::vector<std::vector<double>> warm_starts;  ///< the warm start of each call

 private:
  IlpStatus answer_;
};

}  // namespace alpasim::planner::ilp::testing

#include "planner/ilp/ilp_model.h"

#include <doctest/doctest.h>

#include <cmath>

#include "planner/ilp/glpk_solver.h"

namespace alpasim::planner::ilp {
namespace {

TEST_CASE("validate names the first bad row or column") {
  IlpModel m;
  m.add_var({0.0, 1.0, 1.0, VarKind::kBinary});
  m.add_var({0.0, 1.0, 2.0, VarKind::kContinuous});
  CHECK(m.validate().ok());
  m.add_row({{0, 1, 0}, {1.0, 1.0, 1.0}, 1.0, 1.0});
  CHECK(m.validate().message() == "row 0: variable 0 twice");
  m.rows[0] = {{0, 5}, {1.0, 1.0}, 1.0, 1.0};
  CHECK(m.validate().message() == "row 0: variable 5 out of range");
  m.rows[0] = {{0, 1}, {1.0, NAN}, 1.0, 1.0};
  CHECK(m.validate().message() == "row 0: coefficient of variable 1 is not finite");
  m.rows[0] = {{0, 1}, {1.0, 1.0}, 2.0, 1.0};
  CHECK(m.validate().message() == "row 0: invalid bounds");
  m.rows.clear();
  m.vars[1].upper = INFINITY;
  CHECK(m.validate().message() == "variable 1: bounds must be finite");
}

TEST_CASE("GLPK refuses an invalid model with a Status instead of aborting") {
  IlpModel m;
  m.add_var({0.0, 1.0, 1.0, VarKind::kBinary});
  m.add_row({{0, 0}, {1.0, 1.0}, 1.0, 1.0});
  GlpkSolver solver;
  auto r = solver.solve(m, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "ILP model rejected before GLPK: row 0: variable 0 twice");
}

TEST_CASE("GLPK solves a small knapsack exactly") {
  // max 5a + 4b + 3c s.t. 2a + 3b + c <= 5, binary. {a,b}: weight 5, value 9; {a,c}: 3, 8;
  // {b,c}: 4, 7; {a,b,c}: weight 6, too heavy. Optimum {a,b}: objective -9 (minimising -value).
  IlpModel m;
  m.add_var({0.0, 1.0, -5.0, VarKind::kBinary});
  m.add_var({0.0, 1.0, -4.0, VarKind::kBinary});
  m.add_var({0.0, 1.0, -3.0, VarKind::kBinary});
  m.add_row({{0, 1, 2}, {2.0, 3.0, 1.0}, -INFINITY, 5.0});
  GlpkSolver solver;
  IlpOptions o;
  o.warm_start = {0.0, 0.0, 1.0};  // a feasible but poor start (-3)
  auto r = solver.solve(m, o);
  REQUIRE(r.ok());
  CHECK(r->status == IlpStatus::kOptimal);
  CHECK(r->objective == doctest::Approx(-9.0));
  CHECK(r->values[0] == doctest::Approx(1.0));
  CHECK(r->values[1] == doctest::Approx(1.0));
  CHECK(r->values[2] == doctest::Approx(0.0));
}

TEST_CASE("GLPK reports an infeasible model as a status") {
  IlpModel m;
  m.add_var({0.0, 1.0, 1.0, VarKind::kBinary});
  m.add_row({{0}, {1.0}, 2.0, 3.0});
  GlpkSolver solver;
  auto r = solver.solve(m, {});
  REQUIRE(r.ok());
  CHECK(r->status == IlpStatus::kInfeasible);
  CHECK(std::string(ilp_status_name(r->status)) == "infeasible");
}

}  // namespace
}  // namespace alpasim::planner::ilp

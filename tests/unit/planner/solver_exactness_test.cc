// Exactness of the DP, the ILP and the graph reductions against exhaustive search.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "planner/ilp/glpk_solver.h"
#include "planner/intra_op/cost_problem.h"
#include "planner/intra_op/dp_solver.h"
#include "planner/intra_op/ilp_formulation.h"
#include "planner/intra_op/intra_op_pass.h"
#include "planner/intra_op/resharding.h"
#include "planner/intra_op/simplify.h"
#include "planner/intra_op/solve.h"
#include "planner/intra_op/synthetic_graphs.h"
#include "tests/unit/planner/fake_ilp_solver.h"

namespace alpasim::planner::intra_op {
namespace {

// Objectives are sums of a few dozen doubles: equal up to rounding.
bool same(double a, double b) { return std::abs(a - b) <= 1e-12 + 1e-9 * std::abs(b); }

CostHooks hooks_for(const LogicalMesh& mesh) {
  AlphaBetaCollectives ab;
  ab.mesh = mesh;
  ab.bandwidth = {core::gbyte_per_s(10.0), core::gbyte_per_s(100.0)};
  ab.latency = {core::microseconds(2.0), core::microseconds(1.0)};
  return {ab, 1e9, {}};  // a slow device so replicated compute matters in the objective
}

double product_of_strategy_counts(const CostProblem& p) {
  double n = 1.0;
  for (std::size_t v = 0; v < p.nodes.size(); ++v) n *= p.num_strategies(static_cast<int>(v));
  return n;
}

TEST_CASE("200 random small graphs: DP, ILP and the pass equal exhaustive search") {
  const LogicalMesh meshes[] = {{1, 2}, {2, 1}, {2, 2}};
  ilp::GlpkSolver glpk;
  int graphs = 0;
  int constrained = 0;
  for (std::uint64_t seed = 1; graphs < 200; ++seed) {
    ALPASIM_CHECK(seed < 5000) << "generator produced too few small graphs";
    const LogicalMesh mesh = meshes[seed % 3];
    const IntraOpGraph g = random_small_graph(seed, 3 + static_cast<int>(seed % 4));
    REQUIRE(g.validate().ok());
    const CostHooks hooks = hooks_for(mesh);
    const BuiltProblem built = build_problem(g, mesh, hooks);
    if (product_of_strategy_counts(built.problem) > 2e5) continue;  // keep exhaustive fast
    ++graphs;
    CAPTURE(seed);
    const auto truth = exhaustive_solve(built.problem, std::nullopt);
    REQUIRE(truth.has_value());

    SolveOptions dp;
    dp.algorithm = Algorithm::kDp;
    auto by_dp = solve_problem(built.problem, dp);
    REQUIRE(by_dp.ok());
    REQUIRE(by_dp->best.has_value());
    CHECK(by_dp->proven_optimal);
    CHECK(same(by_dp->best->objective, truth->objective));

    SolveOptions ilp;
    ilp.algorithm = Algorithm::kIlp;
    ilp.ilp_solver = &glpk;
    auto by_ilp = solve_problem(built.problem, ilp);
    REQUIRE(by_ilp.ok());
    REQUIRE(by_ilp->best.has_value());
    CHECK(by_ilp->ilp_status == ilp::IlpStatus::kOptimal);
    CHECK(same(by_ilp->best->objective, truth->objective));

    // The whole pass: exact reductions, solve, expansion back to every operator.
    IntraOpPass pass;
    auto plan = pass.run(g, mesh, hooks, {});
    REQUIRE(plan.ok());
    CHECK(same(plan->cost.value() -
                   [&] {
                     double d = 0.0;  // the weight-update rewrite's own cost change
                     for (const auto& w : plan->weight_update_sharding) {
                       d += (w.reduce_scatter_plus_all_gather - w.all_reduce).value();
                     }
                     return d;
                   }(),
               truth->objective));

    // A memory limit halfway between the smallest footprint and the unconstrained optimum's
    // footprint binds whenever the two differ.
    const std::int64_t lo = built.problem.min_memory();
    if (truth->memory > lo) {
      ++constrained;
      const std::int64_t limit = lo + (truth->memory - lo) / 2;
      const auto bound = exhaustive_solve(built.problem, limit);
      REQUIRE(bound.has_value());
      SolveOptions autom;
      autom.memory_limit_bytes = limit;
      autom.ilp_solver = &glpk;
      auto by_auto = solve_problem(built.problem, autom);
      REQUIRE(by_auto.ok());
      REQUIRE(by_auto->best.has_value());
      CHECK(by_auto->proven_optimal);
      CHECK(by_auto->best->memory <= limit);
      CHECK(same(by_auto->best->objective, bound->objective));
      ilp.memory_limit_bytes = limit;
      auto by_ilp_mem = solve_problem(built.problem, ilp);
      REQUIRE(by_ilp_mem.ok());
      REQUIRE(by_ilp_mem->best.has_value());
      CHECK(by_ilp_mem->best->memory <= limit);
      CHECK(same(by_ilp_mem->best->objective, bound->objective));
    }
  }
  CHECK(graphs == 200);
  CHECK(constrained > 50);  // the memory-limited comparison ran on a good share of them
}

// Random dense problems (not series-parallel: treewidth up to 6) with random costs.
CostProblem random_problem(std::mt19937_64& rng, int n, int k) {
  auto uniform = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  CostProblem p;
  for (int v = 0; v < n; ++v) {
    CostProblem::Node node;
    for (int i = 0; i < k; ++i) {
      node.cost.push_back(std::floor(uniform() * 10.0));
      node.memory.push_back(static_cast<std::int64_t>(uniform() * 100.0));
    }
    p.nodes.push_back(std::move(node));
  }
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) {
      if (uniform() < 0.5) continue;
      CostProblem::Edge e{u, v, {}};
      for (int i = 0; i < k * k; ++i) e.cost.push_back(std::floor(uniform() * 10.0));
      p.edges.push_back(std::move(e));
    }
  }
  return p;
}

TEST_CASE("DP (any treewidth), ILP and reductions on random dense problems equal exhaustive") {
  std::mt19937_64 rng(42);
  ilp::GlpkSolver glpk;
  for (int t = 0; t < 60; ++t) {
    CAPTURE(t);
    const CostProblem p = random_problem(rng, 7, 3);
    const auto truth = exhaustive_solve(p, std::nullopt);
    const auto order = plan_elimination(p, 1 << 20);
    REQUIRE(order.has_value());
    const Assignment a = eliminate(p, *order, 0.0);
    CHECK(same(a.objective, truth->objective));
    // Exact reductions keep the optimum.
    const SimplifiedProblem s = simplify(p, {}, {}, {});
    const auto reduced_truth = exhaustive_solve(s.reduced, std::nullopt);
    CHECK(same(reduced_truth->objective, truth->objective));
    CHECK(same(p.objective(s.expand(reduced_truth->choice)), truth->objective));
    // Memory-limited: Lagrangian DP is feasible and its bound is valid; auto and ILP exact.
    const std::int64_t limit = p.min_memory() + (truth->memory - p.min_memory()) / 2;
    const auto bound = exhaustive_solve(p, limit);
    REQUIRE(bound.has_value());
    const LagrangianResult lr = lagrangian_solve(p, *order, limit);
    REQUIRE(lr.best.has_value());
    CHECK(lr.best->memory <= limit);
    CHECK(lr.lower_bound <= bound->objective + 1e-9);
    CHECK(lr.best->objective >= bound->objective - 1e-9);
    SolveOptions o;
    o.memory_limit_bytes = limit;
    o.ilp_solver = &glpk;
    for (Algorithm alg : {Algorithm::kAuto, Algorithm::kIlp}) {
      o.algorithm = alg;
      auto r = solve_problem(p, o);
      REQUIRE(r.ok());
      CHECK(r->proven_optimal);
      CHECK(same(r->best->objective, bound->objective));
    }
    // Tables of at most 9 entries: the graph is too wide, so the bound prunes (exactly) and
    // the DP or the ILP finishes; with and without the memory limit.
    o.algorithm = Algorithm::kAuto;
    o.max_table_entries = 9;
    auto narrow = solve_problem(p, o);
    REQUIRE(narrow.ok());
    CHECK(narrow->proven_optimal);
    CHECK(same(narrow->best->objective, bound->objective));
    o.memory_limit_bytes.reset();
    auto narrow_free = solve_problem(p, o);
    REQUIRE(narrow_free.ok());
    CHECK(narrow_free->proven_optimal);
    CHECK(same(narrow_free->best->objective, truth->objective));
  }
}

TEST_CASE("too wide for the DP: kDp says so, kAuto falls back to the ILP") {
  // A frustrated triangle: two strategies per node, each edge costs 1 when both ends agree.
  // Some edge always agrees (optimum 1), but the LP relaxation and hence the diffusion
  // bound is 0, so the bound neither proves nor prunes anything.
  CostProblem p;
  for (int v = 0; v < 3; ++v) p.nodes.push_back({{0.0, 0.0}, {0, 0}});
  for (auto [u, v] : {std::pair{0, 1}, std::pair{1, 2}, std::pair{0, 2}}) {
    p.edges.push_back({u, v, {1.0, 0.0, 0.0, 1.0}});
  }
  SolveOptions o;
  o.algorithm = Algorithm::kDp;
  o.max_table_entries = 1;
  auto r = solve_problem(p, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "the DP needs a table of more than 1 entries for this graph; use the ILP");
  // A solver that hits its deadline without an incumbent of its own: the warm start
  // (greedy) comes back, marked as not proven optimal.
  ilp::testing::FakeIlpSolver fake(ilp::IlpStatus::kNoSolutionFound);
  o.algorithm = Algorithm::kAuto;
  o.ilp_solver = &fake;
  // Cutset conditioning first: fixing node 0 leaves a chain 1 - 2 whose branches the DP
  // solves (branch (0 = a): edges 0-1 and 0-2 cost 1 when 1 or 2 equal a, edge 1-2 when
  // they agree; min over the branches = 1), proven without the ILP.
  auto c = solve_problem(p, o);
  REQUIRE(c.ok());
  REQUIRE(c->best.has_value());
  CHECK(c->best->objective == 1.0);
  CHECK(c->proven_optimal);
  CHECK(c->method == "bound+condition+dp");
  CHECK(fake.models.empty());
  // Without conditioning the ILP runs.
  o.condition_before_ilp = false;
  auto f = solve_problem(p, o);
  REQUIRE(f.ok());
  REQUIRE(f->best.has_value());
  CHECK(f->best->objective == 1.0);
  CHECK_FALSE(f->proven_optimal);
  CHECK(f->method == "bound+ilp");  // pruned nothing, then the ILP
  REQUIRE(fake.models.size() == 1);
  CHECK(fake.warm_starts[0].size() == fake.models[0].vars.size());
  CHECK(fake.models[0].validate().ok());
}

TEST_CASE("cutset conditioning (no ILP) equals exhaustive search on too-wide problems") {
  // Tables of at most 3 entries: every dense 7-node problem is too wide for the DP, so
  // kAuto bounds, prunes and then conditions on one node (branch tables up to 12 entries).
  // No ILP solver is given: a problem conditioning cannot finish fails with "needs the
  // ILP"; every one it finishes is the exhaustive optimum.
  std::mt19937_64 rng(7);
  int conditioned = 0;
  for (int t = 0; t < 60; ++t) {
    CAPTURE(t);
    const CostProblem p = random_problem(rng, 7, 3);
    const auto truth = exhaustive_solve(p, std::nullopt);
    SolveOptions o;
    o.max_table_entries = 3;
    auto r = solve_problem(p, o);
    if (!r.ok()) {
      CHECK(r.status().message() == "this problem needs the ILP, but no ILP solver was given");
      continue;
    }
    CHECK(r->proven_optimal);
    CHECK(same(r->best->objective, truth->objective));
    CHECK(same(p.objective(r->best->choice), truth->objective));
    if (r->method.find("condition") != std::string::npos) ++conditioned;
  }
  CHECK(conditioned > 0);
}

TEST_CASE("two-level conditioning solves problems one level cannot, its work budget hands them to the ILP") {
  // Tables of at most 2 entries on dense 8-node problems: after one fixed node many branches
  // are still too wide, so depth 1 needs the ILP (none given); depth 2 fixes a second node
  // in those branches and must still give the exhaustive optimum.
  std::mt19937_64 rng(11);
  int only_depth_two = 0;
  for (int t = 0; t < 60; ++t) {
    CAPTURE(t);
    const CostProblem p = random_problem(rng, 8, 3);
    const auto truth = exhaustive_solve(p, std::nullopt);
    SolveOptions one;
    one.max_table_entries = 2;
    one.condition_depth = 1;
    SolveOptions two = one;
    two.condition_depth = 2;
    auto r1 = solve_problem(p, one);
    auto r2 = solve_problem(p, two);
    if (r2.ok()) {
      CHECK(r2->proven_optimal);
      CHECK(same(r2->best->objective, truth->objective));
      CHECK(same(p.objective(r2->best->choice), truth->objective));
      if (!r1.ok()) ++only_depth_two;
    }
    if (r1.ok()) {  // whatever one level finishes, two levels finish as well
      CHECK(r2.ok());
    }
    // No work allowed: conditioning opens no branch, and without an ILP solver that is
    // the documented error (never a wrong or unproven answer).
    SolveOptions none = two;
    none.condition_work_budget = -1;
    auto r0 = solve_problem(p, none);
    if (!r0.ok()) {
      CHECK(r0.status().message() == "this problem needs the ILP, but no ILP solver was given");
    } else {
      CHECK(r0->method.find("condition") == std::string::npos);
      CHECK(same(r0->best->objective, truth->objective));
    }
  }
  CHECK(only_depth_two > 0);
}

TEST_CASE("the ILP shares edge variables between strategies with equal rows, and stays exact") {
  // Each node's strategies come in pairs that are equal on every edge (two layouts an edge
  // cannot tell apart) but differ in their own cost and memory.
  std::mt19937_64 rng(5);
  ilp::GlpkSolver glpk;
  for (int t = 0; t < 30; ++t) {
    CAPTURE(t);
    CostProblem p = random_problem(rng, 5, 2);
    for (auto& node : p.nodes) {
      node.cost = {node.cost[0], node.cost[0] + 1.0, node.cost[1], node.cost[1] + 2.0};
      node.memory = {node.memory[0] + 50, node.memory[0], node.memory[1] + 30, node.memory[1]};
    }
    std::size_t grouped_entries = 0;
    for (auto& e : p.edges) {
      std::vector<double> wide(16);
      for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) wide[static_cast<std::size_t>(i * 4 + j)] = e.cost[static_cast<std::size_t>((i / 2) * 2 + j / 2)];
      }
      e.cost = wide;
      grouped_entries += 4;
    }
    const IlpFormulation f = formulate_ilp(p, std::nullopt);
    std::size_t edge_columns = 0;
    for (const auto& ev : f.edge_vars) {
      CHECK(ev.row_group.size() == 4);
      edge_columns += (*std::max_element(ev.row_group.begin(), ev.row_group.end()) + 1) *
                      ev.num_col_groups();
    }
    CHECK(edge_columns <= grouped_entries);  // at most 2 x 2 per edge, never 4 x 4
    CHECK(f.model.vars.size() == 5 * 4 + edge_columns);
    for (const std::optional<std::int64_t> limit :
         {std::optional<std::int64_t>{}, std::optional<std::int64_t>{p.min_memory() + 60}}) {
      const auto truth = exhaustive_solve(p, limit);
      REQUIRE(truth.has_value());
      SolveOptions o;
      o.algorithm = Algorithm::kIlp;
      o.prune_by_bound = false;
      o.ilp_solver = &glpk;
      o.memory_limit_bytes = limit;
      auto r = solve_problem(p, o);
      REQUIRE(r.ok());
      CHECK(r->ilp_status == ilp::IlpStatus::kOptimal);
      CHECK(same(r->best->objective, truth->objective));
      // The warm start encodes a full assignment in the grouped columns.
      const auto x = f.values_of(truth->choice);
      CHECK(f.choice_of(x) == truth->choice);
    }
  }
}

TEST_CASE("an impossible memory limit is a value with the missing bytes") {
  std::mt19937_64 rng(3);
  const CostProblem p = random_problem(rng, 5, 3);
  SolveOptions o;
  o.memory_limit_bytes = p.min_memory() - 17;
  auto r = solve_problem(p, o);
  REQUIRE(r.ok());
  CHECK(r->feasibility == Feasibility::kOutOfMemory);
  CHECK(r->missing_bytes == 17);
  CHECK_FALSE(r->best.has_value());
}

}  // namespace
}  // namespace alpasim::planner::intra_op

namespace alpasim::planner::intra_op {
namespace {

TEST_CASE("GLPK at a deadline it cannot meet returns the warm start, not nothing") {
  // A GPT layer on 2x2 as a plain ILP takes GLPK seconds; 1 ms is far too little. Whatever
  // GLPK manages, the answer must carry an assignment no worse than the warm start.
  GptShape gpt;
  gpt.batch = 4;
  gpt.seq = 64;
  gpt.hidden = 64;
  gpt.heads = 4;
  gpt.ffn = 256;
  const LogicalMesh mesh{2, 2};
  const BuiltProblem built = build_problem(gpt_graph(gpt), mesh, hooks_for(mesh));
  ilp::GlpkSolver glpk;
  SolveOptions o;
  o.algorithm = Algorithm::kIlp;
  o.prune_by_bound = false;
  o.ilp_solver = &glpk;
  o.time_limit = core::milliseconds(1.0);
  auto r = solve_problem(built.problem, o);
  REQUIRE(r.ok());
  REQUIRE(r->best.has_value());
  REQUIRE(r->ilp_status.has_value());
  if (*r->ilp_status != ilp::IlpStatus::kOptimal) CHECK_FALSE(r->proven_optimal);
  // Every answer is a valid assignment of the original problem.
  CHECK(r->best->choice.size() == built.problem.nodes.size());
  CHECK(same(r->best->objective, built.problem.objective(r->best->choice)));
}

TEST_CASE("every chosen layout fits its tensor and matches its operands' shapes") {
  const LogicalMesh meshes[] = {{1, 2}, {2, 1}, {2, 2}};
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    const LogicalMesh mesh = meshes[seed % 3];
    const IntraOpGraph g = random_small_graph(seed, 4 + static_cast<int>(seed % 5));
    IntraOpPass pass;
    auto plan = pass.run(g, mesh, hooks_for(mesh), {});
    REQUIRE(plan.ok());
    REQUIRE(plan->shardings.size() == g.nodes.size());
    for (std::size_t v = 0; v < g.nodes.size(); ++v) {
      const auto& s = plan->shardings[v];
      CHECK(s.op == g.nodes[v].name);
      CHECK(spec_fits(g.nodes[v].shape, s.output, mesh));
      REQUIRE(s.inputs.size() == g.nodes[v].operands.size());
      for (std::size_t k = 0; k < s.inputs.size(); ++k) {
        const auto& operand = g.nodes[static_cast<std::size_t>(g.nodes[v].operands[k])];
        CHECK(spec_fits(operand.shape, s.inputs[k], mesh));
      }
    }
  }
}

}  // namespace
}  // namespace alpasim::planner::intra_op

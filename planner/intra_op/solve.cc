#include "planner/intra_op/solve.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "planner/intra_op/ilp_formulation.h"

namespace alpasim::planner::intra_op {

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kDp: return "dp";
    case Algorithm::kIlp: return "ilp";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A fitting start for the ILP when the DP cannot run: greedy in node order (node cost plus
// edges to nodes already chosen); if that does not fit, the smallest-memory strategy of
// every node (which fits whenever anything does: memory is a sum over nodes).
Assignment greedy(const CostProblem& p, std::optional<std::int64_t> limit) {
  const std::size_t n = p.nodes.size();
  std::vector<std::vector<std::pair<int, std::size_t>>> in_edges(n);  // (other, edge index)
  for (std::size_t k = 0; k < p.edges.size(); ++k) {
    const auto& e = p.edges[k];
    in_edges[static_cast<std::size_t>(std::max(e.u, e.v))].emplace_back(std::min(e.u, e.v), k);
  }
  std::vector<int> choice(n, 0);
  for (std::size_t v = 0; v < n; ++v) {
    double best = INFINITY;
    for (int i = 0; i < p.num_strategies(static_cast<int>(v)); ++i) {
      double c = p.nodes[v].cost[static_cast<std::size_t>(i)];
      for (const auto& [w, k] : in_edges[v]) {
        const auto& e = p.edges[k];
        const auto kv = static_cast<std::size_t>(p.num_strategies(e.v));
        const int cw = choice[static_cast<std::size_t>(w)];
        c += e.u == w ? e.cost[static_cast<std::size_t>(cw) * kv + static_cast<std::size_t>(i)]
                      : e.cost[static_cast<std::size_t>(i) * kv + static_cast<std::size_t>(cw)];
      }
      if (c < best) {
        best = c;
        choice[v] = i;
      }
    }
  }
  if (limit && p.memory(choice) > *limit) {
    for (std::size_t v = 0; v < n; ++v) {
      const auto& node = p.nodes[v];
      int arg = 0;
      for (std::size_t i = 1; i < node.memory.size(); ++i) {
        const auto a = static_cast<std::size_t>(arg);
        if (node.memory[i] < node.memory[a] ||
            (node.memory[i] == node.memory[a] && node.cost[i] < node.cost[a])) {
          arg = static_cast<int>(i);
        }
      }
      choice[v] = arg;
    }
  }
  return {choice, p.objective(choice), p.memory(choice)};
}

}  // namespace

core::Result<SolveOutcome> solve_problem(const CostProblem& problem, const SolveOptions& options) {
  const auto start = Clock::now();
  SolveOutcome out;
  const auto& limit = options.memory_limit_bytes;
  auto finish = [&]() -> core::Result<SolveOutcome> {
    out.wall_time = core::seconds(seconds_since(start));
    return out;
  };
  if (limit && problem.min_memory() > *limit) {
    out.feasibility = Feasibility::kOutOfMemory;
    out.missing_bytes = problem.min_memory() - *limit;
    out.method = "memory bound";
    return finish();
  }
  std::optional<Assignment> incumbent;
  if (options.algorithm != Algorithm::kIlp) {
    const auto order = plan_elimination(problem, options.max_table_entries);
    if (order) {
      if (!limit) {
        out.best = eliminate(problem, *order, 0.0);
        out.dp_iterations = 1;
        out.proven_optimal = true;
        out.lower_bound = out.best->objective;
        out.method = "dp";
        return finish();
      }
      LagrangianResult lr = lagrangian_solve(problem, *order, *limit);
      out.dp_iterations = lr.iterations;
      out.method = lr.iterations == 1 ? "dp" : "dp+lagrangian";
      out.lower_bound = lr.lower_bound;
      if (lr.proven_optimal || options.algorithm == Algorithm::kDp) {
        out.best = lr.best;
        out.proven_optimal = lr.proven_optimal;
        if (!out.best) out.feasibility = Feasibility::kTimedOut;
        return finish();
      }
      incumbent = lr.best;
    } else if (options.algorithm == Algorithm::kDp) {
      return core::failed_precondition(
          "the DP needs a table of more than " + std::to_string(options.max_table_entries) +
          " entries for this graph; use the ILP");
    }
  }
  if (options.ilp_solver == nullptr) {
    return core::failed_precondition("this problem needs the ILP, but no ILP solver was given");
  }
  if (!incumbent) incumbent = greedy(problem, limit);
  out.method += out.method.empty() ? "ilp" : "+ilp";
  IlpFormulation f = formulate_ilp(problem, limit);
  ilp::IlpOptions ilp_options;
  ilp_options.time_limit =
      core::seconds(std::max(0.001, options.time_limit.value() - seconds_since(start)));
  if (options.ilp_warm_start) ilp_options.warm_start = f.values_of(incumbent->choice);
  ALPASIM_ASSIGN_OR_RETURN(ilp::IlpSolution sol, options.ilp_solver->solve(f.model, ilp_options));
  out.ilp_status = sol.status;
  if (sol.status == ilp::IlpStatus::kInfeasible) {
    return core::internal_error("the ILP says no assignment fits, but the memory bound says one does");
  }
  out.best = incumbent;
  if (!sol.values.empty()) {
    std::vector<int> choice = f.choice_of(sol.values);
    Assignment a{choice, problem.objective(choice), problem.memory(choice)};
    // Re-check in exact bytes: the solver's tolerances are not.
    if ((!limit || a.memory <= *limit) && a.objective <= out.best->objective) out.best = a;
  }
  out.proven_optimal = sol.status == ilp::IlpStatus::kOptimal;
  if (out.proven_optimal) {
    out.lower_bound = out.best->objective;
  } else if (std::isfinite(sol.bound)) {
    out.lower_bound = std::max(out.lower_bound, sol.bound / f.objective_scale);
  }
  return finish();
}

}  // namespace alpasim::planner::intra_op

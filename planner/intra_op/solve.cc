#include "planner/intra_op/solve.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "planner/intra_op/bound.h"
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

// Seconds per DP operation (EliminationOrder::work) measured on one core of this project's
// 2-core CI machine (SolveOptions::condition_work_budget): only to decide whether a DP can
// end before a hard deadline, erring towards stopping early on faster machines.
constexpr double kSecondsPerDpOperation = 2.6e-9;

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

namespace {

// What one solve_problem call shares across its recursion.
struct SolveContext {
  Clock::time_point start;
  // DP operations (EliminationOrder::work) done so far. Conditioning stops branching once
  // this passes SolveOptions::condition_work_budget: a count, not a clock, so whether a
  // problem falls back to the ILP is the same on every machine.
  std::int64_t dp_work = 0;
  int condition_level = 0;  // conditioning calls open on the stack (0: top-level problem)
};

// Declared here, defined after prune_and_solve: the two recurse into each other once.
core::Result<SolveOutcome> solve_impl(const CostProblem& problem, const SolveOptions& options,
                                      SolveContext& ctx, std::optional<Assignment> incumbent,
                                      int prune_rounds);

core::Result<SolveOutcome> prune_and_solve(const CostProblem& problem,
                                           const SolveOptions& options, SolveContext& ctx,
                                           std::optional<Assignment> incumbent, int prune_rounds) {
  const auto& limit = options.memory_limit_bytes;
  // Too wide for the DP: bound the problem (min-sum diffusion), take the best of a few
  // narrow restricted DPs and the greedy as the upper bound, prune every strategy whose
  // bound exceeds it (exact), and solve what is left.
  Diffusion diffusion(problem);
  diffusion.run(options.diffusion_sweeps);
  Reparametrisation r = diffusion.bound();
  Assignment ub = incumbent ? *incumbent : greedy(problem, limit);
  auto improve_upper_bound = [&]() {
    if (!limit) {
      // The m best strategies per node are a prefix of one order, so the restricted problem
      // of m = 4 holds those of m = 1..3 and its optimum is the best of them: solve it
      // alone, or the widest that the DP can take.
      for (int m = 4; m >= 1; --m) {
        auto a = restricted_solve(problem, r, m, options.max_table_entries);
        if (!a) continue;
        if (a->objective < ub.objective) ub = *a;
        break;
      }
      return;
    }
    // Under a memory limit a narrower restriction may fit where a wider optimum does not.
    for (int m = 1; m <= 4; ++m) {
      auto a = restricted_solve(problem, r, m, options.max_table_entries);
      if (a && a->memory <= *limit && a->objective < ub.objective) ub = *a;
    }
  };
  improve_upper_bound();
  Pruned pr = prune(problem, r, ub.objective);
  // Still too wide for the DP: a bound from more sweeps (the same diffusion, resumed) prunes
  // more. Exact either way; it only decides which exact method finishes.
  while (!limit && diffusion.sweeps_done() < options.diffusion_max_sweeps &&
         !(options.stop_at_time_limit && seconds_since(ctx.start) > options.time_limit.value()) &&
         !plan_elimination(pr.problem, options.max_table_entries)) {
    const int more = std::min(std::max(1, 3 * diffusion.sweeps_done()),
                              options.diffusion_max_sweeps - diffusion.sweeps_done());
    // Under a hard deadline in steps of 100 sweeps (the same state: run(a) + run(b) is
    // run(a + b)), stopping at the limit.
    const int step = options.stop_at_time_limit ? 100 : more;
    for (int done = 0; done < more; done += step) {
      if (options.stop_at_time_limit && seconds_since(ctx.start) > options.time_limit.value()) break;
      diffusion.run(std::min(step, more - done));
    }
    r = diffusion.bound();
    improve_upper_bound();
    pr = prune(problem, r, ub.objective);
  }
  double lagrangian_bound = r.lower_bound;  // valid for the limited problem too (lambda = 0)
  if (limit && ub.memory > 0) {
    // Memory-limited: the unconstrained bound is weak when the limit binds. For lambda >= 0
    // every fitting assignment x has cost(x) >= cost(x) + lambda (mem(x) - limit), so the
    // bound of the problem with costs + lambda·memory, minus lambda·limit, prunes too. A
    // bisection on lambda (restricted DPs as the oracle) finds better fitting assignments
    // and a multiplier where that bound is strong; each tried lambda prunes (intersection).
    const CostProblem base = problem;
    auto with_lambda = [&](double lambda) {
      CostProblem q = base;
      for (auto& n : q.nodes) {
        for (std::size_t i = 0; i < n.cost.size(); ++i) {
          n.cost[i] += lambda * static_cast<double>(n.memory[i]);
        }
      }
      return q;
    };
    std::vector<std::vector<bool>> keep(problem.nodes.size());
    for (std::size_t v = 0; v < keep.size(); ++v) {
      keep[v].assign(static_cast<std::size_t>(problem.num_strategies(static_cast<int>(v))), false);
      for (int i : pr.kept[v]) keep[v][static_cast<std::size_t>(i)] = true;
    }
    // Seconds per byte: the unconstrained bound's gap spread over the bytes to shed.
    double lo = 0.0;
    double hi = std::max(1e-18, (ub.objective - r.lower_bound) /
                                    static_cast<double>(std::max<std::int64_t>(1, ub.memory)));
    std::vector<std::pair<double, Reparametrisation>> tried;
    for (int it = 0; it < options.lagrangian_prune_steps; ++it) {
      // Half the deadline at most for the bound: the DP or the ILP needs the rest.
      if (seconds_since(ctx.start) > 0.5 * options.time_limit.value()) break;
      const double lambda = lo == 0.0 && it == 0 ? hi : (lo + hi) / 2.0;
      const CostProblem q = with_lambda(lambda);
      // A third of the sweeps: these bounds search for multipliers and fitting plans; the
      // final pruning round on the smaller problem converges further.
      Reparametrisation rq = diffuse(q, std::max(1, options.diffusion_sweeps / 3));
      bool fits = false;
      for (int m = 1; m <= 4; ++m) {
        auto a = restricted_solve(q, rq, m, options.max_table_entries);
        if (!a) continue;
        const std::int64_t mem = problem.memory(a->choice);
        if (mem <= *limit) {
          fits = true;
          const double cost = problem.objective(a->choice);
          if (cost < ub.objective) ub = Assignment{a->choice, cost, mem};
        }
      }
      tried.emplace_back(lambda, std::move(rq));
      if (fits) {
        hi = lambda;
      } else {
        lo = lambda;
        if (it == 0) hi *= 16.0;
      }
    }
    for (const auto& [lambda, rq] : tried) {
      lagrangian_bound = std::max(lagrangian_bound, rq.lower_bound - lambda * static_cast<double>(*limit));
    }
    const double cap = ub.objective + 1e-12 + 1e-9 * std::abs(ub.objective);
    for (const auto& [lambda, rq] : tried) {
      const double shift = lambda * static_cast<double>(*limit);
      for (std::size_t v = 0; v < keep.size(); ++v) {
        for (std::size_t i = 0; i < keep[v].size(); ++i) {
          if (keep[v][i] && rq.bound_with(static_cast<int>(v), static_cast<int>(i)) - shift > cap) {
            keep[v][i] = false;
          }
        }
      }
    }
    // The final upper bound may prune more under the plain bound as well.
    for (std::size_t v = 0; v < keep.size(); ++v) {
      for (std::size_t i = 0; i < keep[v].size(); ++i) {
        if (keep[v][i] && r.bound_with(static_cast<int>(v), static_cast<int>(i)) > cap) {
          keep[v][i] = false;
        }
      }
      // The upper-bound assignment always survives (its own bound is at most its cost).
      keep[v][static_cast<std::size_t>(ub.choice[v])] = true;
    }
    pr = prune_to(problem, keep);
  } else {
    // The upper-bound assignment's own bound is at most its cost; keep it even if rounding
    // in the diffusion says otherwise.
    bool missing = false;
    for (std::size_t v = 0; v < ub.choice.size() && !missing; ++v) {
      const auto& kept = pr.kept[v];
      missing = std::find(kept.begin(), kept.end(), ub.choice[v]) == kept.end();
    }
    if (missing) {
      std::vector<std::vector<bool>> keep(problem.nodes.size());
      for (std::size_t v = 0; v < keep.size(); ++v) {
        keep[v].assign(static_cast<std::size_t>(problem.num_strategies(static_cast<int>(v))),
                       false);
        for (int i : pr.kept[v]) keep[v][static_cast<std::size_t>(i)] = true;
        keep[v][static_cast<std::size_t>(ub.choice[v])] = true;
      }
      pr = prune_to(problem, keep);
    }
  }
  std::vector<int> ub_in_pruned(ub.choice.size(), 0);
  for (std::size_t v = 0; v < ub.choice.size(); ++v) {
    const auto& kept = pr.kept[v];
    const auto it = std::find(kept.begin(), kept.end(), ub.choice[v]);
    ALPASIM_CHECK(it != kept.end()) << "pruning removed the upper-bound assignment";
    ub_in_pruned[v] = static_cast<int>(it - kept.begin());
  }
  std::optional<Assignment> start_point =
      Assignment{ub_in_pruned, pr.problem.objective(ub_in_pruned),
                 pr.problem.memory(ub_in_pruned)};
  ALPASIM_ASSIGN_OR_RETURN(SolveOutcome inner,
                           solve_impl(pr.problem, options, ctx, start_point,
                                      pr.removed > 0 ? prune_rounds - 1 : 0));
  if (inner.best) {
    inner.best->choice = pr.expand(inner.best->choice);
    inner.best->objective = problem.objective(inner.best->choice);
    inner.best->memory = problem.memory(inner.best->choice);
  }
  inner.lower_bound = std::max(inner.lower_bound, lagrangian_bound);
  if (inner.best && !inner.proven_optimal &&
      inner.best->objective <= inner.lower_bound + 1e-12 + 1e-9 * std::abs(inner.lower_bound)) {
    inner.proven_optimal = true;  // the bound met the incumbent
  }
  inner.pruned_strategies = pr.removed;
  if (inner.method.rfind("bound+", 0) != 0) inner.method = "bound+" + inner.method;
  inner.wall_time = core::seconds(seconds_since(ctx.start));
  return inner;
}

// Cutset conditioning on one node (exact, unconstrained memory only): the optimum is the
// best of the branches "node x uses strategy i"; fixing x removes it from every DP table.
// x is the node whose fixing leaves the smallest largest table. Branches are solved with
// the DP (bound, prune, eliminate); a branch whose lower bound exceeds the best assignment
// found so far cannot hold a better one and is skipped. A branch still too wide after
// pruning conditions on a second node while options.condition_depth allows. nullopt: some
// branch is too wide even so, or the work budget ran out (the caller uses the ILP).
std::optional<SolveOutcome> condition_and_solve(const CostProblem& problem,
                                                const SolveOptions& options,
                                                SolveContext& ctx, Assignment best) {
  const std::size_t n = problem.nodes.size();
  std::vector<std::vector<bool>> all(n);
  for (std::size_t v = 0; v < n; ++v) {
    all[v].assign(static_cast<std::size_t>(problem.num_strategies(static_cast<int>(v))), true);
  }
  int x = -1;
  std::int64_t x_table = 0;
  for (std::size_t v = 0; v < n; ++v) {
    if (all[v].size() < 2) continue;
    std::vector<std::vector<bool>> keep = all;
    keep[v].assign(all[v].size(), false);
    keep[v][0] = true;
    const auto order = plan_elimination(prune_to(problem, keep).problem,
                                        std::numeric_limits<std::int64_t>::max() / 4);
    if (order && (x < 0 || order->largest_table < x_table)) {
      x = static_cast<int>(v);
      x_table = order->largest_table;
    }
  }
  // Each branch must get within reach of the DP by pruning, or by fixing one more node
  // when depth is left (each fixed node narrows the tables by about its strategy count).
  const std::int64_t reach =
      64 * options.max_table_entries * (options.condition_depth > 1 ? 64 : 1);
  if (x < 0 || x_table > reach) return std::nullopt;
  SolveOptions branch_options = options;
  branch_options.algorithm = Algorithm::kDp;
  // Branch tables may be 4x the usual limit (2^24 entries by default: ~200 MB with the
  // argmins), still far cheaper than the ILP they replace.
  branch_options.max_table_entries = 4 * options.max_table_entries;
  branch_options.condition_depth = options.condition_depth - 1;
  branch_options.condition_before_ilp = branch_options.condition_depth > 0;
  const double tolerance = 1e-12 + 1e-9 * std::abs(best.objective);
  const auto xs = static_cast<std::size_t>(x);
  for (std::size_t i = 0; i < all[xs].size(); ++i) {
    std::vector<std::vector<bool>> keep = all;
    keep[xs].assign(all[xs].size(), false);
    keep[xs][i] = true;
    const Pruned branch = prune_to(problem, keep);
    const Reparametrisation r = diffuse(branch.problem, options.diffusion_sweeps);
    if (r.lower_bound > best.objective + tolerance) continue;
    if (ctx.dp_work > options.condition_work_budget) return std::nullopt;
    if (options.stop_at_time_limit && seconds_since(ctx.start) > options.time_limit.value()) {
      return std::nullopt;
    }
    ++ctx.condition_level;
    auto out = solve_impl(branch.problem, branch_options, ctx, std::nullopt, 3);
    --ctx.condition_level;
    if (!out.ok() || !out.value().best || !out.value().proven_optimal) return std::nullopt;
    std::vector<int> choice = branch.expand(out.value().best->choice);
    const double objective = problem.objective(choice);
    if (objective < best.objective) best = Assignment{choice, objective, problem.memory(choice)};
  }
  SolveOutcome out;
  out.best = best;
  out.proven_optimal = true;
  out.lower_bound = best.objective;
  out.method = "condition+dp";
  out.wall_time = core::seconds(seconds_since(ctx.start));
  return out;
}

// The DP / ILP logic on one problem. `incumbent`: a known fitting assignment (may be empty).
core::Result<SolveOutcome> solve_impl(const CostProblem& problem, const SolveOptions& options,
                                      SolveContext& ctx, std::optional<Assignment> incumbent,
                                      int prune_rounds) {
  const bool allow_prune = prune_rounds > 0;
  SolveOutcome out;
  const auto& limit = options.memory_limit_bytes;
  auto finish = [&]() -> core::Result<SolveOutcome> {
    out.wall_time = core::seconds(seconds_since(ctx.start));
    return out;
  };
  if (limit && problem.min_memory() > *limit) {
    out.feasibility = Feasibility::kOutOfMemory;
    out.missing_bytes = problem.min_memory() - *limit;
    out.method = "memory bound";
    return finish();
  }
  if (options.algorithm != Algorithm::kIlp) {
    const auto order = plan_elimination(problem, options.max_table_entries);
    if (order && !limit && allow_prune && options.prune_by_bound &&
        order->largest_table > options.prune_tables_above) {
      return prune_and_solve(problem, options, ctx, incumbent, prune_rounds);
    }
    if (order) {
      // Under a hard deadline a DP that cannot end before it does not start (one
      // elimination cannot be interrupted): the answer is the best known, unproven.
      if (options.stop_at_time_limit &&
          seconds_since(ctx.start) + kSecondsPerDpOperation * static_cast<double>(order->work) >
              options.time_limit.value()) {
        out.method = "deadline";
        if (incumbent) out.best = incumbent;
        if (!out.best) out.feasibility = Feasibility::kTimedOut;
        return finish();
      }
      if (!limit) {
        ctx.dp_work += order->work;
        out.best = eliminate(problem, *order, 0.0);
        out.dp_iterations = 1;
        out.proven_optimal = true;
        out.lower_bound = out.best->objective;
        out.method = "dp";
        return finish();
      }
      LagrangianResult lr = lagrangian_solve(problem, *order, *limit);
      ctx.dp_work += lr.iterations * order->work;
      out.dp_iterations = lr.iterations;
      out.method = lr.iterations == 1 ? "dp" : "dp+lagrangian";
      out.lower_bound = lr.lower_bound;
      if (incumbent && (!lr.best || incumbent->objective < lr.best->objective)) {
        lr.best = incumbent;
        lr.proven_optimal = lr.best->objective <= lr.lower_bound + 1e-12 +
                                                      1e-9 * std::abs(lr.best->objective);
      }
      if (lr.proven_optimal || options.algorithm == Algorithm::kDp) {
        out.best = lr.best;
        out.proven_optimal = lr.proven_optimal;
        if (!out.best) out.feasibility = Feasibility::kTimedOut;
        return finish();
      }
      incumbent = lr.best;
    } else if (allow_prune && options.prune_by_bound) {
      return prune_and_solve(problem, options, ctx, incumbent, prune_rounds);
    } else if (options.algorithm == Algorithm::kDp) {
      // Inside a conditioning branch (kDp there only forbids the ILP): fix one more node.
      if (!limit && ctx.condition_level > 0 && options.condition_before_ilp &&
          options.condition_depth > 0) {
        auto conditioned = condition_and_solve(problem, options, ctx,
                                               incumbent ? *incumbent : greedy(problem, limit));
        if (conditioned) return *conditioned;
      }
      return core::failed_precondition(
          "the DP needs a table of more than " + std::to_string(options.max_table_entries) +
          " entries for this graph; use the ILP");
    }
  }
  if (!limit && options.algorithm == Algorithm::kAuto && options.condition_before_ilp) {
    auto conditioned = condition_and_solve(problem, options, ctx,
                                           incumbent ? *incumbent : greedy(problem, limit));
    if (conditioned) return *conditioned;
  }
  if (options.ilp_solver == nullptr) {
    return core::failed_precondition("this problem needs the ILP, but no ILP solver was given");
  }
  if (options.algorithm == Algorithm::kIlp && allow_prune && options.prune_by_bound) {
    return prune_and_solve(problem, options, ctx, incumbent, prune_rounds);
  }
  if (!incumbent) incumbent = greedy(problem, limit);
  if (options.stop_at_time_limit && seconds_since(ctx.start) > options.time_limit.value()) {
    // Hard deadline already passed: the best known assignment, unproven, without the ILP.
    out.method += out.method.empty() ? "deadline" : "+deadline";
    out.best = incumbent;
    out.proven_optimal = false;
    return finish();
  }
  out.method += out.method.empty() ? "ilp" : "+ilp";
  IlpFormulation f = formulate_ilp(problem, limit);
  ilp::IlpOptions ilp_options;
  ilp_options.time_limit =
      core::seconds(std::max(0.001, options.time_limit.value() - seconds_since(ctx.start)));
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

}  // namespace

core::Result<SolveOutcome> solve_problem(const CostProblem& problem, const SolveOptions& options) {
  // Up to three rounds of bound-and-prune: each pruned problem has a tighter bound.
  SolveContext ctx{Clock::now()};
  return solve_impl(problem, options, ctx, std::nullopt, 3);
}

}  // namespace alpasim::planner::intra_op

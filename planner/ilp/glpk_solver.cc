// The only file of alpa-sim that includes glpk.h (cmake/AlpasimLayers.cmake enforces it).
#include "planner/ilp/glpk_solver.h"

#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csetjmp>
#include <vector>

namespace alpasim::planner::ilp {
namespace {

using Clock = std::chrono::steady_clock;

struct CallbackState {
  Clock::time_point deadline;
  const std::vector<double>* warm_start = nullptr;  // 1-based copy for GLPK (size n + 1)
  bool warm_start_given = false;
  double best_bound = -INFINITY;
  bool deadline_hit = false;
};

void callback(glp_tree* tree, void* info) {
  auto* state = static_cast<CallbackState*>(info);
  const int best = glp_ios_best_node(tree);
  if (best != 0) state->best_bound = glp_ios_node_bound(tree, best);
  if (glp_ios_reason(tree) == GLP_IHEUR && state->warm_start != nullptr &&
      !state->warm_start_given) {
    state->warm_start_given = true;
    glp_ios_heur_sol(tree, state->warm_start->data());
  }
  // Our own deadline check: GLPK's tm_lim is only consulted between some of its steps.
  if (Clock::now() >= state->deadline) {
    state->deadline_hit = true;
    glp_ios_terminate(tree);
  }
}

void error_hook(void* info) { std::longjmp(*static_cast<std::jmp_buf*>(info), 1); }

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 1, 1'000'000'000LL));
}

enum class Outcome { kOk, kGlpkError };

// Plain C-style frame for setjmp: only trivially destructible locals live between the
// setjmp and a possible longjmp out of GLPK.
Outcome run_glpk(const IlpModel& model, const IlpOptions& options, CallbackState* state,
                 IlpSolution* out) {
  static thread_local std::jmp_buf env;
  glp_prob* lp = nullptr;
  if (setjmp(env) != 0) {
    glp_free_env();  // GLPK's documented recovery: the environment is unusable after an error
    return Outcome::kGlpkError;
  }
  glp_error_hook(error_hook, &env);
  glp_term_out(GLP_OFF);
  lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  const int n = static_cast<int>(model.vars.size());
  const int m = static_cast<int>(model.rows.size());
  bool has_integer = false;
  if (n > 0) glp_add_cols(lp, n);
  for (int j = 0; j < n; ++j) {
    const IlpVar& v = model.vars[static_cast<std::size_t>(j)];
    if (v.kind == VarKind::kBinary) {
      glp_set_col_kind(lp, j + 1, GLP_IV);
      has_integer = true;
    }
    glp_set_col_bnds(lp, j + 1, v.lower == v.upper ? GLP_FX : GLP_DB, v.lower, v.upper);
    glp_set_obj_coef(lp, j + 1, v.objective);
  }
  glp_set_obj_coef(lp, 0, model.objective_constant);
  if (m > 0) glp_add_rows(lp, m);
  std::vector<int> idx;
  std::vector<double> val;
  for (int i = 0; i < m; ++i) {
    const IlpRow& r = model.rows[static_cast<std::size_t>(i)];
    const bool lo = std::isfinite(r.lower);
    const bool hi = std::isfinite(r.upper);
    int type = GLP_FR;
    if (lo && hi) type = r.lower == r.upper ? GLP_FX : GLP_DB;
    else if (lo) type = GLP_LO;
    else if (hi) type = GLP_UP;
    glp_set_row_bnds(lp, i + 1, type, lo ? r.lower : 0.0, hi ? r.upper : 0.0);
    idx.assign(1, 0);
    val.assign(1, 0.0);
    for (std::size_t k = 0; k < r.vars.size(); ++k) {
      idx.push_back(r.vars[k] + 1);
      val.push_back(r.coefs[k]);
    }
    glp_set_mat_row(lp, i + 1, static_cast<int>(r.vars.size()), idx.data(), val.data());
  }

  glp_smcp smcp;
  glp_init_smcp(&smcp);
  smcp.msg_lev = GLP_MSG_OFF;
  smcp.presolve = GLP_OFF;  // heur_sol needs the original columns; see glp_intopt below
  // Dual simplex (primal if it fails): on the intra-op ILPs' relaxations (one-hot rows and
  // edge marginals, 30-50k columns) it takes 1.2-2x less time than the primal, same optimum.
  smcp.meth = GLP_DUALP;
  smcp.tm_lim = remaining_ms(state->deadline);
  const int lp_rc = glp_simplex(lp, &smcp);
  const int lp_status = glp_get_status(lp);
  bool solved_mip = false;
  if (lp_rc == 0 && lp_status == GLP_OPT && has_integer) {
    glp_iocp iocp;
    glp_init_iocp(&iocp);
    iocp.msg_lev = GLP_MSG_OFF;
    iocp.presolve = GLP_OFF;
    iocp.tm_lim = remaining_ms(state->deadline);
    iocp.mip_gap = options.relative_gap;
    iocp.cb_func = callback;
    iocp.cb_info = state;
    glp_intopt(lp, &iocp);
    solved_mip = true;
  }

  out->values.clear();
  if (!has_integer && lp_rc == 0 && lp_status == GLP_OPT) {
    out->status = IlpStatus::kOptimal;
    out->objective = glp_get_obj_val(lp);
    out->bound = out->objective;
    for (int j = 0; j < n; ++j) out->values.push_back(glp_get_col_prim(lp, j + 1));
  } else if (lp_rc == 0 && (lp_status == GLP_NOFEAS || lp_status == GLP_INFEAS)) {
    out->status = IlpStatus::kInfeasible;
  } else if (solved_mip) {
    const int mip_status = glp_mip_status(lp);
    if (mip_status == GLP_OPT || mip_status == GLP_FEAS) {
      const bool proven = mip_status == GLP_OPT && !state->deadline_hit;
      out->status = proven ? IlpStatus::kOptimal : IlpStatus::kFeasible;
      out->objective = glp_mip_obj_val(lp);
      out->bound = proven ? out->objective : state->best_bound;
      for (int j = 0; j < n; ++j) out->values.push_back(glp_mip_col_val(lp, j + 1));
    } else if (mip_status == GLP_NOFEAS) {
      out->status = IlpStatus::kInfeasible;
    } else {
      out->status = IlpStatus::kNoSolutionFound;
      out->bound = state->best_bound;
    }
  } else {
    out->status = IlpStatus::kNoSolutionFound;  // the root LP ran out of time
  }
  glp_delete_prob(lp);
  glp_error_hook(nullptr, nullptr);
  return Outcome::kOk;
}

}  // namespace

core::Result<IlpSolution> GlpkSolver::solve(const IlpModel& model, const IlpOptions& options) {
  const auto start = Clock::now();
  ALPASIM_RETURN_IF_ERROR_CTX(model.validate(), "ILP model rejected before GLPK");
  if (!options.warm_start.empty() && options.warm_start.size() != model.vars.size()) {
    return core::invalid_argument("warm start has " + std::to_string(options.warm_start.size()) +
                                  " values for " + std::to_string(model.vars.size()) +
                                  " variables");
  }
  CallbackState state;
  state.deadline = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(options.time_limit.value()));
  std::vector<double> warm_1based;
  if (!options.warm_start.empty()) {
    warm_1based.push_back(0.0);
    warm_1based.insert(warm_1based.end(), options.warm_start.begin(), options.warm_start.end());
    state.warm_start = &warm_1based;
  }
  IlpSolution solution;
  if (run_glpk(model, options, &state, &solution) == Outcome::kGlpkError) {
    return core::internal_error("GLPK reported an internal error (see its message above)");
  }
  // The warm start is a valid incumbent: fall back to it when GLPK has nothing better.
  if (!options.warm_start.empty() && solution.status == IlpStatus::kNoSolutionFound) {
    double obj = model.objective_constant;
    for (std::size_t j = 0; j < model.vars.size(); ++j) {
      obj += model.vars[j].objective * options.warm_start[j];
    }
    solution.status = IlpStatus::kFeasible;
    solution.values = options.warm_start;
    solution.objective = obj;
  }
  solution.wall_time = core::Seconds(std::chrono::duration<double>(Clock::now() - start).count());
  return solution;
}

std::string GlpkSolver::name() const { return std::string("glpk ") + glp_version(); }

}  // namespace alpasim::planner::ilp

#include "planner/intra_op/ilp_formulation.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace alpasim::planner::intra_op {

IlpFormulation formulate_ilp(const CostProblem& problem,
                             std::optional<std::int64_t> memory_limit_bytes) {
  IlpFormulation f;
  const std::size_t n = problem.nodes.size();
  std::vector<std::vector<double>> unary(n);
  for (std::size_t v = 0; v < n; ++v) unary[v] = problem.nodes[v].cost;
  // Reduced edge matrices (row minima to u, then column minima to v).
  std::vector<std::vector<double>> reduced(problem.edges.size());
  for (std::size_t k = 0; k < problem.edges.size(); ++k) {
    const auto& e = problem.edges[k];
    const auto ku = static_cast<std::size_t>(problem.num_strategies(e.u));
    const auto kv = static_cast<std::size_t>(problem.num_strategies(e.v));
    std::vector<double> r = e.cost;
    for (std::size_t i = 0; i < ku; ++i) {
      const double m = *std::min_element(r.begin() + static_cast<std::ptrdiff_t>(i * kv),
                                         r.begin() + static_cast<std::ptrdiff_t>((i + 1) * kv));
      unary[static_cast<std::size_t>(e.u)][i] += m;
      for (std::size_t j = 0; j < kv; ++j) r[i * kv + j] -= m;
    }
    for (std::size_t j = 0; j < kv; ++j) {
      double m = r[j];
      for (std::size_t i = 1; i < ku; ++i) m = std::min(m, r[i * kv + j]);
      unary[static_cast<std::size_t>(e.v)][j] += m;
      for (std::size_t i = 0; i < ku; ++i) r[i * kv + j] -= m;
    }
    reduced[k] = std::move(r);
  }
  f.model.objective_constant = problem.cost_constant;
  f.node_vars.resize(n);
  for (std::size_t v = 0; v < n; ++v) {
    ilp::IlpRow one_hot;
    one_hot.lower = one_hot.upper = 1.0;
    for (std::size_t i = 0; i < unary[v].size(); ++i) {
      const int col = f.model.add_var({0.0, 1.0, unary[v][i], ilp::VarKind::kBinary});
      f.node_vars[v].push_back(col);
      one_hot.vars.push_back(col);
      one_hot.coefs.push_back(1.0);
    }
    f.model.add_row(std::move(one_hot));
  }
  for (std::size_t k = 0; k < problem.edges.size(); ++k) {
    const auto& e = problem.edges[k];
    const auto& r = reduced[k];
    if (std::all_of(r.begin(), r.end(), [](double x) { return x == 0.0; })) continue;
    const auto ku = static_cast<std::size_t>(problem.num_strategies(e.u));
    const auto kv = static_cast<std::size_t>(problem.num_strategies(e.v));
    // Strategies of u whose rows of R are equal differ only in what this edge does not see
    // (say, a matmul's strategies writing the same output layout); one e variable per
    // (row group, column group) is exact, and far smaller: e[a][b] = (sum of s[u] over
    // group a) · (sum of s[v] over group b) at every integer s.
    IlpFormulation::EdgeVars ev{e.u, e.v, static_cast<int>(f.model.vars.size()), {}, {}};
    std::map<std::vector<double>, int> row_ids;
    for (std::size_t i = 0; i < ku; ++i) {
      std::vector<double> row(r.begin() + static_cast<std::ptrdiff_t>(i * kv),
                              r.begin() + static_cast<std::ptrdiff_t>((i + 1) * kv));
      ev.row_group.push_back(row_ids.emplace(std::move(row), static_cast<int>(row_ids.size()))
                                 .first->second);
    }
    std::map<std::vector<double>, int> col_ids;
    for (std::size_t j = 0; j < kv; ++j) {
      std::vector<double> col(ku);
      for (std::size_t i = 0; i < ku; ++i) col[i] = r[i * kv + j];
      ev.col_group.push_back(col_ids.emplace(std::move(col), static_cast<int>(col_ids.size()))
                                 .first->second);
    }
    const std::size_t gu = row_ids.size();
    const std::size_t gv = col_ids.size();
    std::vector<double> grouped(gu * gv, 0.0);
    for (std::size_t i = 0; i < ku; ++i) {
      for (std::size_t j = 0; j < kv; ++j) {
        grouped[static_cast<std::size_t>(ev.row_group[i]) * gv +
                static_cast<std::size_t>(ev.col_group[j])] = r[i * kv + j];
      }
    }
    for (std::size_t g = 0; g < gu * gv; ++g) {
      f.model.add_var({0.0, 1.0, grouped[g], ilp::VarKind::kContinuous});
    }
    const auto& su = f.node_vars[static_cast<std::size_t>(e.u)];
    const auto& sv = f.node_vars[static_cast<std::size_t>(e.v)];
    for (std::size_t a = 0; a < gu; ++a) {  // sum_b e[a][b] = sum_{i in a} s[u][i]
      ilp::IlpRow row;
      for (std::size_t b = 0; b < gv; ++b) {
        row.vars.push_back(ev.first + static_cast<int>(a * gv + b));
        row.coefs.push_back(1.0);
      }
      for (std::size_t i = 0; i < ku; ++i) {
        if (static_cast<std::size_t>(ev.row_group[i]) != a) continue;
        row.vars.push_back(su[i]);
        row.coefs.push_back(-1.0);
      }
      f.model.add_row(std::move(row));
    }
    for (std::size_t b = 0; b < gv; ++b) {  // sum_a e[a][b] = sum_{j in b} s[v][j]
      ilp::IlpRow row;
      for (std::size_t a = 0; a < gu; ++a) {
        row.vars.push_back(ev.first + static_cast<int>(a * gv + b));
        row.coefs.push_back(1.0);
      }
      for (std::size_t j = 0; j < kv; ++j) {
        if (static_cast<std::size_t>(ev.col_group[j]) != b) continue;
        row.vars.push_back(sv[j]);
        row.coefs.push_back(-1.0);
      }
      f.model.add_row(std::move(row));
    }
    f.edge_vars.push_back(ev);
  }
  double largest = std::abs(f.model.objective_constant);
  for (const auto& v : f.model.vars) largest = std::max(largest, std::abs(v.objective));
  if (largest > 0.0) {
    f.objective_scale = 1000.0 / largest;
    f.model.objective_constant *= f.objective_scale;
    for (auto& v : f.model.vars) v.objective *= f.objective_scale;
  }
  if (memory_limit_bytes) {
    ilp::IlpRow row;
    row.lower = -INFINITY;
    // Scaled by the right-hand side so coefficients stay near 1 (GLPK's feasibility
    // tolerances are absolute); callers re-check the exact byte count of any answer.
    const double rhs = static_cast<double>(*memory_limit_bytes - problem.memory_constant);
    const double scale = std::max(1.0, std::abs(rhs));
    row.upper = rhs / scale;
    for (std::size_t v = 0; v < n; ++v) {
      for (std::size_t i = 0; i < f.node_vars[v].size(); ++i) {
        const double m = static_cast<double>(problem.nodes[v].memory[i]) / scale;
        if (m == 0.0) continue;
        row.vars.push_back(f.node_vars[v][i]);
        row.coefs.push_back(m);
      }
    }
    f.model.add_row(std::move(row));
  }
  return f;
}

std::vector<double> IlpFormulation::values_of(const std::vector<int>& choice) const {
  std::vector<double> x(model.vars.size(), 0.0);
  for (std::size_t v = 0; v < node_vars.size(); ++v) {
    x[static_cast<std::size_t>(node_vars[v][static_cast<std::size_t>(choice[v])])] = 1.0;
  }
  for (const EdgeVars& ev : edge_vars) {
    const auto a = static_cast<std::size_t>(
        ev.row_group[static_cast<std::size_t>(choice[static_cast<std::size_t>(ev.u)])]);
    const auto b = static_cast<std::size_t>(
        ev.col_group[static_cast<std::size_t>(choice[static_cast<std::size_t>(ev.v)])]);
    x[static_cast<std::size_t>(ev.first) + a * ev.num_col_groups() + b] = 1.0;
  }
  return x;
}

std::vector<int> IlpFormulation::choice_of(const std::vector<double>& values) const {
  std::vector<int> choice(node_vars.size(), 0);
  for (std::size_t v = 0; v < node_vars.size(); ++v) {
    double best = -1.0;
    for (std::size_t i = 0; i < node_vars[v].size(); ++i) {
      const double x = values[static_cast<std::size_t>(node_vars[v][i])];
      if (x > best + 1e-9) {
        best = x;
        choice[v] = static_cast<int>(i);
      }
    }
  }
  return choice;
}

}  // namespace alpasim::planner::intra_op

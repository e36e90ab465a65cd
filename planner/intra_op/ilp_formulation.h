#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "planner/ilp/ilp_model.h"
#include "planner/intra_op/cost_problem.h"

namespace alpasim::planner::intra_op {

/// The ILP of Alpa §4.2 for a CostProblem, and how to read its solutions.
/// - s[v][i] binary, sum_i s[v][i] = 1 (one-hot choice per node);
/// - per edge (u, v) with matrix R: e[i][j] continuous in [0, 1] with
///   sum_j e[i][j] = s[u][i] and sum_i e[i][j] = s[v][j], which forces e = s_u s_v^T at every
///   integer s (so e need not be integer: the "linearised edge variables"). Strategies with
///   equal rows (columns) of R share one row (column) of e, and its marginal is the sum of
///   their s: exact, and a GPT block's ILP shrinks several-fold;
/// - objective sum c·s + sum R·e; optional row sum mem·s <= limit.
/// Before that, each R gives its row minima to u's costs and then its column minima to v's
/// costs (exact at one-hot s); an edge left all zero needs no e variables at all.
struct IlpFormulation {
  ilp::IlpModel model;
  std::vector<std::vector<int>> node_vars;  ///< column of s[v][i]
  struct EdgeVars {
    int u = 0;
    int v = 0;
    int first = 0;  ///< column of e[0][0]; e[a][b] at first + a·(column groups) + b
    std::vector<int> row_group;  ///< u's strategy -> its row group a (first seen first)
    std::vector<int> col_group;  ///< v's strategy -> its column group b
    std::size_t num_col_groups() const {
      return col_group.empty() ? 0 : static_cast<std::size_t>(
          *std::max_element(col_group.begin(), col_group.end()) + 1);
    }
  };
  std::vector<EdgeVars> edge_vars;
  /// Model objective = seconds × objective_scale: costs of microseconds would otherwise sit
  /// inside GLPK's absolute tolerances (the largest coefficient is scaled to 1000).
  double objective_scale = 1.0;

  /// Column values of a full assignment (for a warm start).
  std::vector<double> values_of(const std::vector<int>& choice) const;
  /// The choice encoded in a solution's column values (largest s per node).
  std::vector<int> choice_of(const std::vector<double>& values) const;
};

/// Builds the formulation; `memory_limit_bytes` (if any) is the limit on problem.memory().
IlpFormulation formulate_ilp(const CostProblem& problem,
                             std::optional<std::int64_t> memory_limit_bytes);

}  // namespace alpasim::planner::intra_op

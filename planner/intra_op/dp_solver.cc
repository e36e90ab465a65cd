#include "planner/intra_op/dp_solver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <set>
#include <tuple>

#include "core/check.h"

namespace alpasim::planner::intra_op {

namespace {
// Product of domain sizes, saturating well above any table limit.
std::int64_t table_entries(const std::set<int>& scope, const std::vector<std::int64_t>& d,
                           int except) {
  std::int64_t n = 1;
  for (int u : scope) {
    if (u == except) continue;
    n *= d[static_cast<std::size_t>(u)];
    if (n > (std::int64_t{1} << 40)) return std::int64_t{1} << 40;
  }
  return n;
}
}  // namespace

std::optional<EliminationOrder> plan_elimination(const CostProblem& problem,
                                                 std::int64_t max_table_entries) {
  const std::size_t n = problem.nodes.size();
  std::vector<std::int64_t> d(n);
  for (std::size_t v = 0; v < n; ++v) d[v] = problem.num_strategies(static_cast<int>(v));
  std::vector<std::set<int>> adj(n);
  for (const auto& e : problem.edges) {
    adj[static_cast<std::size_t>(e.u)].insert(e.v);
    adj[static_cast<std::size_t>(e.v)].insert(e.u);
  }
  // (table entries, degree, node, version): smallest first.
  using Entry = std::tuple<std::int64_t, std::size_t, int, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  std::vector<int> version(n, 0);
  std::vector<bool> done(n, false);
  for (std::size_t v = 0; v < n; ++v) {
    queue.emplace(table_entries(adj[v], d, -1), adj[v].size(), static_cast<int>(v), 0);
  }
  EliminationOrder out;
  while (!queue.empty()) {
    const auto [entries, degree, v, ver] = queue.top();
    queue.pop();
    const auto vi = static_cast<std::size_t>(v);
    if (done[vi] || ver != version[vi]) continue;
    if (entries > max_table_entries) return std::nullopt;
    done[vi] = true;
    out.order.push_back(v);
    out.largest_table = std::max(out.largest_table, entries);
    out.work += entries * d[vi];
    out.largest_scope = std::max(out.largest_scope, static_cast<int>(degree));
    const std::vector<int> nbrs(adj[vi].begin(), adj[vi].end());
    for (int a : nbrs) {
      auto& s = adj[static_cast<std::size_t>(a)];
      s.erase(v);
      for (int b : nbrs) {
        if (b != a) s.insert(b);
      }
    }
    adj[vi].clear();
    for (int a : nbrs) {
      const auto ai = static_cast<std::size_t>(a);
      ++version[ai];
      queue.emplace(table_entries(adj[ai], d, -1), adj[ai].size(), a, version[ai]);
    }
  }
  ALPASIM_CHECK(out.order.size() == n) << "elimination order misses nodes";
  return out;
}

namespace {
struct Factor {
  std::vector<int> scope;
  std::vector<std::size_t> stride;  // row-major over scope
  std::vector<double> table;
  bool alive = true;
};

struct Step {
  int var = 0;
  std::vector<int> scope;
  std::vector<std::size_t> stride;
  std::vector<int> argmin;
};

std::vector<std::size_t> row_major(const std::vector<int>& scope,
                                   const std::vector<std::int64_t>& d) {
  std::vector<std::size_t> stride(scope.size());
  std::size_t s = 1;
  for (std::size_t t = scope.size(); t-- > 0;) {
    stride[t] = s;
    s *= static_cast<std::size_t>(d[static_cast<std::size_t>(scope[t])]);
  }
  return stride;
}
}  // namespace

Assignment eliminate(const CostProblem& problem, const EliminationOrder& order, double lambda) {
  const std::size_t n = problem.nodes.size();
  std::vector<std::int64_t> d(n);
  std::vector<std::vector<double>> unary(n);
  for (std::size_t v = 0; v < n; ++v) {
    const auto& node = problem.nodes[v];
    d[v] = static_cast<std::int64_t>(node.cost.size());
    unary[v].resize(node.cost.size());
    for (std::size_t i = 0; i < node.cost.size(); ++i) {
      unary[v][i] = node.cost[i] + lambda * static_cast<double>(node.memory[i]);
    }
  }
  std::vector<Factor> factors;
  std::vector<std::vector<int>> factors_of(n);
  auto add_factor = [&](Factor f) {
    const int id = static_cast<int>(factors.size());
    for (int u : f.scope) factors_of[static_cast<std::size_t>(u)].push_back(id);
    factors.push_back(std::move(f));
  };
  for (const auto& e : problem.edges) {
    Factor f;
    f.scope = {e.u, e.v};
    f.stride = row_major(f.scope, d);
    f.table = e.cost;
    add_factor(std::move(f));
  }
  std::vector<Step> steps;
  steps.reserve(n);
  double constant = 0.0;
  for (int v : order.order) {
    const auto vi = static_cast<std::size_t>(v);
    std::vector<int> live;
    std::set<int> scope_set;
    for (int f : factors_of[vi]) {
      if (!factors[static_cast<std::size_t>(f)].alive) continue;
      live.push_back(f);
      for (int u : factors[static_cast<std::size_t>(f)].scope) {
        if (u != v) scope_set.insert(u);
      }
    }
    Step step;
    step.var = v;
    step.scope.assign(scope_set.begin(), scope_set.end());
    step.stride = row_major(step.scope, d);
    const std::size_t ns = step.scope.size();
    std::vector<std::size_t> ds(ns);
    std::size_t total = 1;
    for (std::size_t t = 0; t < ns; ++t) {
      ds[t] = static_cast<std::size_t>(d[static_cast<std::size_t>(step.scope[t])]);
      total *= ds[t];
    }
    // Per live factor: stride of v and of every scope position.
    const std::size_t nf = live.size();
    std::vector<std::size_t> sv(nf, 0);
    std::vector<std::size_t> sscope(nf * ns, 0);
    std::vector<const double*> tab(nf);
    for (std::size_t f = 0; f < nf; ++f) {
      const Factor& fac = factors[static_cast<std::size_t>(live[f])];
      tab[f] = fac.table.data();
      for (std::size_t p = 0; p < fac.scope.size(); ++p) {
        if (fac.scope[p] == v) {
          sv[f] = fac.stride[p];
        } else {
          const auto t = static_cast<std::size_t>(
              std::lower_bound(step.scope.begin(), step.scope.end(), fac.scope[p]) -
              step.scope.begin());
          sscope[f * ns + t] = fac.stride[p];
        }
      }
    }
    std::vector<double> result(total);
    step.argmin.resize(total);
    std::vector<std::size_t> digit(ns, 0);
    std::vector<std::size_t> off(nf, 0);
    const std::vector<double>& un = unary[vi];
    const std::size_t dv = un.size();
    // Per scope point: val[x] = unary + each factor in order (the same sums, added in the
    // same order, as one accumulation per x), factor by factor so that each pass is a
    // strided (often contiguous) sweep over x; then the first strict minimum.
    std::vector<double> val(dv);
    for (std::size_t idx = 0; idx < total; ++idx) {
      std::copy(un.begin(), un.end(), val.begin());
      for (std::size_t f = 0; f < nf; ++f) {
        const double* column = tab[f] + off[f];
        const std::size_t stride = sv[f];
        if (stride == 1) {
          for (std::size_t x = 0; x < dv; ++x) val[x] += column[x];
        } else {
          for (std::size_t x = 0; x < dv; ++x) val[x] += column[x * stride];
        }
      }
      // The minimum, then its first position: the first strict minimum of a scan, without
      // one compare chain (all +inf or NaN: 0, as the scan).
      const double best = minimum(val.data(), dv);
      int arg = 0;
      double chosen = best;  // +inf when nothing is below it, as the scan
      if (best < std::numeric_limits<double>::infinity()) {
        while (val[static_cast<std::size_t>(arg)] != best) ++arg;
        chosen = val[static_cast<std::size_t>(arg)];  // the scan's value, its zero's sign too
      }
      result[idx] = chosen;
      step.argmin[idx] = arg;
      for (std::size_t t = ns; t-- > 0;) {
        ++digit[t];
        for (std::size_t f = 0; f < nf; ++f) off[f] += sscope[f * ns + t];
        if (digit[t] < ds[t]) break;
        for (std::size_t f = 0; f < nf; ++f) off[f] -= ds[t] * sscope[f * ns + t];
        digit[t] = 0;
      }
    }
    for (int f : live) {
      factors[static_cast<std::size_t>(f)].alive = false;
      factors[static_cast<std::size_t>(f)].table.clear();
    }
    if (ns == 0) {
      constant += result[0];
    } else if (ns == 1) {
      auto& target = unary[static_cast<std::size_t>(step.scope[0])];
      for (std::size_t x = 0; x < total; ++x) target[x] += result[x];
    } else {
      Factor f;
      f.scope = step.scope;
      f.stride = step.stride;
      f.table = std::move(result);
      add_factor(std::move(f));
    }
    steps.push_back(std::move(step));
  }
  Assignment out;
  out.choice.assign(n, 0);
  for (std::size_t s = steps.size(); s-- > 0;) {
    const Step& step = steps[s];
    std::size_t idx = 0;
    for (std::size_t t = 0; t < step.scope.size(); ++t) {
      idx += static_cast<std::size_t>(out.choice[static_cast<std::size_t>(step.scope[t])]) *
             step.stride[t];
    }
    out.choice[static_cast<std::size_t>(step.var)] = step.argmin[idx];
  }
  out.objective = problem.objective(out.choice);
  out.memory = problem.memory(out.choice);
  return out;
}

LagrangianResult lagrangian_solve(const CostProblem& problem, const EliminationOrder& order,
                                  std::int64_t memory_limit_bytes, int max_iterations) {
  LagrangianResult out;
  out.lower_bound = -std::numeric_limits<double>::infinity();
  const double limit = static_cast<double>(memory_limit_bytes);
  auto tolerance = [](double x) { return 1e-12 + 1e-9 * std::abs(x); };
  auto try_lambda = [&](double lambda) {
    Assignment a = eliminate(problem, order, lambda);
    ++out.iterations;
    // a minimises cost + lambda·mem, so this dual value bounds every fitting assignment.
    const double dual = a.objective + lambda * (static_cast<double>(a.memory) - limit);
    out.lower_bound = std::max(out.lower_bound, dual);
    const bool fits = a.memory <= memory_limit_bytes;
    if (fits && (!out.best || a.objective < out.best->objective)) out.best = a;
    return fits;
  };
  auto closed = [&] {
    return out.best && out.best->objective <= out.lower_bound + tolerance(out.best->objective);
  };
  if (problem.min_memory() > memory_limit_bytes) return out;  // nothing fits
  if (try_lambda(0.0) || closed()) {
    out.proven_optimal = closed();
    return out;
  }
  // Geometric search for a multiplier that fits (seconds per byte; 1e-20 is far below any
  // cost difference worth a byte, 1e6 far above).
  double lo = 0.0;
  double hi = 1e-20;
  while (out.iterations < max_iterations && !try_lambda(hi)) {
    lo = hi;
    hi *= 16.0;
    if (hi > 1e6) break;
  }
  while (out.iterations < max_iterations && !closed()) {
    const double mid = lo > 0.0 ? std::sqrt(lo * hi) : hi / 16.0;
    if (mid <= lo || mid >= hi) break;
    if (try_lambda(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
    if (hi - lo <= 1e-9 * hi) break;
  }
  out.proven_optimal = closed();
  return out;
}

}  // namespace alpasim::planner::intra_op

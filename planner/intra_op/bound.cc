#include "planner/intra_op/bound.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "planner/intra_op/dp_solver.h"

namespace alpasim::planner::intra_op {

double Reparametrisation::bound_with(int v, int i) const {
  const auto vi = static_cast<std::size_t>(v);
  return lower_bound - node_min[vi] + node[vi][static_cast<std::size_t>(i)];
}

Reparametrisation diffuse(const CostProblem& p, int sweeps) {
  const std::size_t n = p.nodes.size();
  Reparametrisation r;
  r.node.resize(n);
  for (std::size_t v = 0; v < n; ++v) r.node[v] = p.nodes[v].cost;
  std::vector<std::vector<double>> edge(p.edges.size());
  // Incident edges of each node with orientation (true: the node is the edge's u).
  std::vector<std::vector<std::pair<std::size_t, bool>>> inc(n);
  for (std::size_t k = 0; k < p.edges.size(); ++k) {
    edge[k] = p.edges[k].cost;
    inc[static_cast<std::size_t>(p.edges[k].u)].emplace_back(k, true);
    inc[static_cast<std::size_t>(p.edges[k].v)].emplace_back(k, false);
  }
  std::vector<double> m;
  std::vector<double> total;
  for (int s = 0; s < sweeps; ++s) {
    for (std::size_t v = 0; v < n; ++v) {
      if (inc[v].empty()) continue;
      const std::size_t kv = r.node[v].size();
      total = r.node[v];
      std::vector<std::vector<double>> mins(inc[v].size());
      for (std::size_t t = 0; t < inc[v].size(); ++t) {
        const auto [k, is_u] = inc[v][t];
        const auto& e = p.edges[k];
        const auto ku = static_cast<std::size_t>(p.num_strategies(e.u));
        const auto kw = static_cast<std::size_t>(p.num_strategies(e.v));
        m.assign(kv, INFINITY);
        for (std::size_t i = 0; i < ku; ++i) {
          for (std::size_t j = 0; j < kw; ++j) {
            const double c = edge[k][i * kw + j];
            double& slot = is_u ? m[i] : m[j];
            slot = std::min(slot, c);
          }
        }
        for (std::size_t x = 0; x < kv; ++x) total[x] += m[x];
        mins[t] = m;
      }
      // Spread the node's total evenly over itself and its edges (diffusion step).
      const double share = 1.0 / static_cast<double>(inc[v].size() + 1);
      for (std::size_t t = 0; t < inc[v].size(); ++t) {
        const auto [k, is_u] = inc[v][t];
        const auto& e = p.edges[k];
        const auto ku = static_cast<std::size_t>(p.num_strategies(e.u));
        const auto kw = static_cast<std::size_t>(p.num_strategies(e.v));
        for (std::size_t i = 0; i < ku; ++i) {
          for (std::size_t j = 0; j < kw; ++j) {
            const std::size_t x = is_u ? i : j;
            edge[k][i * kw + j] += total[x] * share - mins[t][x];
          }
        }
      }
      for (std::size_t x = 0; x < kv; ++x) r.node[v][x] = total[x] * share;
    }
  }
  // Final push of edge minima into the nodes (keeps the bound valid and tightens it).
  r.lower_bound = p.cost_constant;
  for (std::size_t k = 0; k < p.edges.size(); ++k) {
    r.lower_bound += *std::min_element(edge[k].begin(), edge[k].end());
  }
  r.node_min.resize(n);
  for (std::size_t v = 0; v < n; ++v) {
    r.node_min[v] = *std::min_element(r.node[v].begin(), r.node[v].end());
    r.lower_bound += r.node_min[v];
  }
  return r;
}

std::vector<int> Pruned::expand(const std::vector<int>& choice) const {
  std::vector<int> out(choice.size());
  for (std::size_t v = 0; v < choice.size(); ++v) {
    out[v] = kept[v][static_cast<std::size_t>(choice[v])];
  }
  return out;
}

namespace {
CostProblem restrict_to(const CostProblem& p, const std::vector<std::vector<int>>& kept) {
  CostProblem out;
  out.cost_constant = p.cost_constant;
  out.memory_constant = p.memory_constant;
  for (std::size_t v = 0; v < p.nodes.size(); ++v) {
    CostProblem::Node node;
    for (int i : kept[v]) {
      node.cost.push_back(p.nodes[v].cost[static_cast<std::size_t>(i)]);
      node.memory.push_back(p.nodes[v].memory[static_cast<std::size_t>(i)]);
    }
    out.nodes.push_back(std::move(node));
  }
  for (const auto& e : p.edges) {
    const auto kw = static_cast<std::size_t>(p.num_strategies(e.v));
    CostProblem::Edge ne{e.u, e.v, {}};
    for (int i : kept[static_cast<std::size_t>(e.u)]) {
      for (int j : kept[static_cast<std::size_t>(e.v)]) {
        ne.cost.push_back(e.cost[static_cast<std::size_t>(i) * kw + static_cast<std::size_t>(j)]);
      }
    }
    out.edges.push_back(std::move(ne));
  }
  return out;
}
}  // namespace

Pruned prune(const CostProblem& p, const Reparametrisation& r, double upper_bound) {
  Pruned out;
  const double limit = upper_bound + 1e-12 + 1e-9 * std::abs(upper_bound);
  out.kept.resize(p.nodes.size());
  for (std::size_t v = 0; v < p.nodes.size(); ++v) {
    for (int i = 0; i < p.num_strategies(static_cast<int>(v)); ++i) {
      if (r.bound_with(static_cast<int>(v), i) <= limit) {
        out.kept[v].push_back(i);
      } else {
        ++out.removed;
      }
    }
    if (out.kept[v].empty()) {  // only by rounding; keep the node's best to stay well-formed
      const auto& c = r.node[v];
      out.kept[v].push_back(
          static_cast<int>(std::min_element(c.begin(), c.end()) - c.begin()));
    }
  }
  out.problem = restrict_to(p, out.kept);
  return out;
}

Pruned prune_to(const CostProblem& p, const std::vector<std::vector<bool>>& keep) {
  Pruned out;
  out.kept.resize(p.nodes.size());
  for (std::size_t v = 0; v < p.nodes.size(); ++v) {
    for (std::size_t i = 0; i < keep[v].size(); ++i) {
      if (keep[v][i]) {
        out.kept[v].push_back(static_cast<int>(i));
      } else {
        ++out.removed;
      }
    }
    ALPASIM_CHECK(!out.kept[v].empty()) << "node " << v << " would lose every strategy";
  }
  out.problem = restrict_to(p, out.kept);
  return out;
}

std::optional<Assignment> restricted_solve(const CostProblem& p, const Reparametrisation& r,
                                           int m, std::int64_t max_table_entries) {
  std::vector<std::vector<int>> kept(p.nodes.size());
  for (std::size_t v = 0; v < p.nodes.size(); ++v) {
    std::vector<int> idx(r.node[v].size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
      return r.node[v][static_cast<std::size_t>(a)] < r.node[v][static_cast<std::size_t>(b)];
    });
    idx.resize(std::min<std::size_t>(idx.size(), static_cast<std::size_t>(m)));
    std::sort(idx.begin(), idx.end());
    kept[v] = std::move(idx);
  }
  const CostProblem small = restrict_to(p, kept);
  const auto order = plan_elimination(small, max_table_entries);
  if (!order) return std::nullopt;
  const Assignment a = eliminate(small, *order, 0.0);
  std::vector<int> choice(a.choice.size());
  for (std::size_t v = 0; v < choice.size(); ++v) {
    choice[v] = kept[v][static_cast<std::size_t>(a.choice[v])];
  }
  return Assignment{choice, p.objective(choice), p.memory(choice)};
}

}  // namespace alpasim::planner::intra_op

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

Diffusion::Diffusion(const CostProblem& p) : p_(p) {
  const std::size_t n = p.nodes.size();
  node_.resize(n);
  for (std::size_t v = 0; v < n; ++v) node_[v] = p.nodes[v].cost;
  edge_.resize(p.edges.size());
  inc_.resize(n);
  std::size_t widest = 0;
  for (std::size_t k = 0; k < p.edges.size(); ++k) {
    edge_[k] = p.edges[k].cost;
    const auto ku = static_cast<std::size_t>(p.num_strategies(p.edges[k].u));
    const auto kw = static_cast<std::size_t>(p.num_strategies(p.edges[k].v));
    inc_[static_cast<std::size_t>(p.edges[k].u)].push_back({k, true, ku, kw});
    inc_[static_cast<std::size_t>(p.edges[k].v)].push_back({k, false, ku, kw});
  }
  for (std::size_t v = 0; v < n; ++v) widest = std::max(widest, inc_[v].size() * node_[v].size());
  mins_.resize(widest);
}

void Diffusion::run(int sweeps) {
  const std::size_t n = node_.size();
  for (int s = 0; s < sweeps; ++s) {
    for (std::size_t v = 0; v < n; ++v) {
      const auto& inc = inc_[v];
      if (inc.empty()) continue;
      const std::size_t kv = node_[v].size();
      total_.assign(node_[v].begin(), node_[v].end());
      for (std::size_t t = 0; t < inc.size(); ++t) {
        const auto [k, is_u, ku, kw] = inc[t];
        double* m = mins_.data() + t * kv;
        std::fill(m, m + kv, INFINITY);
        const double* c = edge_[k].data();
        if (is_u) {
          for (std::size_t i = 0; i < ku; ++i) m[i] = minimum(c + i * kw, kw);  // row minima
        } else {
          for (std::size_t i = 0; i < ku; ++i) {
            for (std::size_t j = 0; j < kw; ++j) m[j] = std::min(m[j], c[i * kw + j]);
          }
        }
        for (std::size_t x = 0; x < kv; ++x) total_[x] += m[x];
      }
      // Spread the node's total evenly over itself and its edges (diffusion step).
      const double share = 1.0 / static_cast<double>(inc.size() + 1);
      for (std::size_t x = 0; x < kv; ++x) total_[x] *= share;
      for (std::size_t t = 0; t < inc.size(); ++t) {
        const auto [k, is_u, ku, kw] = inc[t];
        double* m = mins_.data() + t * kv;
        for (std::size_t x = 0; x < kv; ++x) m[x] = total_[x] - m[x];  // the edge's change
        double* c = edge_[k].data();
        if (is_u) {
          for (std::size_t i = 0; i < ku; ++i) {
            for (std::size_t j = 0; j < kw; ++j) c[i * kw + j] += m[i];
          }
        } else {
          for (std::size_t i = 0; i < ku; ++i) {
            for (std::size_t j = 0; j < kw; ++j) c[i * kw + j] += m[j];
          }
        }
      }
      node_[v].assign(total_.begin(), total_.end());
    }
  }
  sweeps_done_ += sweeps;
}

Reparametrisation Diffusion::bound() const {
  const std::size_t n = node_.size();
  Reparametrisation r;
  r.node = node_;
  // Final push of edge minima into the nodes (keeps the bound valid and tightens it).
  r.lower_bound = p_.cost_constant;
  for (const auto& e : edge_) r.lower_bound += *std::min_element(e.begin(), e.end());
  r.node_min.resize(n);
  for (std::size_t v = 0; v < n; ++v) {
    r.node_min[v] = *std::min_element(r.node[v].begin(), r.node[v].end());
    r.lower_bound += r.node_min[v];
  }
  return r;
}

Reparametrisation diffuse(const CostProblem& p, int sweeps) {
  Diffusion d(p);
  d.run(sweeps);
  return d.bound();
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

#include "planner/intra_op/simplify.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "core/check.h"

namespace alpasim::planner::intra_op {

std::vector<int> SimplifiedProblem::expand(const std::vector<int>& reduced_choice) const {
  std::vector<int> out(owner.size());
  for (std::size_t v = 0; v < owner.size(); ++v) {
    const int o = owner[v];
    out[v] = table[v][o < 0 ? 0
                            : static_cast<std::size_t>(
                                  reduced_choice[static_cast<std::size_t>(o)])];
  }
  return out;
}

namespace {

// A mutable copy of the problem. Work node v starts as original node v; edges are kept once
// per unordered pair with rows of the smaller id.
class Work {
 public:
  explicit Work(const CostProblem& p) : n_(p.nodes.size()) {
    cost_.resize(n_);
    mem_.resize(n_);
    alive_.assign(n_, true);
    node_of_.resize(n_);
    table_.resize(n_);
    members_.resize(n_);
    adj_.resize(n_);
    for (std::size_t v = 0; v < n_; ++v) {
      cost_[v] = p.nodes[v].cost;
      mem_[v] = p.nodes[v].memory;
      node_of_[v] = static_cast<int>(v);
      members_[v] = {static_cast<int>(v)};
      for (int i = 0; i < static_cast<int>(cost_[v].size()); ++i) table_[v].push_back(i);
    }
    cost_constant_ = p.cost_constant;
    memory_constant_ = p.memory_constant;
    for (const auto& e : p.edges) {
      const std::size_t ku = cost_[static_cast<std::size_t>(e.u)].size();
      const std::size_t kv = cost_[static_cast<std::size_t>(e.v)].size();
      Matrix m{ku, kv, e.cost};
      add_edge(e.u, e.v, std::move(m));
    }
  }

  struct Matrix {
    std::size_t rows = 0;
    std::size_t cols = 0;
    std::vector<double> a;
    double at(std::size_t i, std::size_t j) const { return a[i * cols + j]; }
  };

  std::size_t k(int v) const { return cost_[static_cast<std::size_t>(v)].size(); }

  // Matrix oriented with v's strategies as rows.
  Matrix oriented(int v, int w) const {
    const auto key = std::minmax(v, w);
    const Matrix& m = edges_.at(key);
    if (v < w) return m;
    Matrix t{m.cols, m.rows, std::vector<double>(m.a.size())};
    for (std::size_t i = 0; i < m.rows; ++i) {
      for (std::size_t j = 0; j < m.cols; ++j) t.a[j * m.rows + i] = m.a[i * m.cols + j];
    }
    return t;
  }

  void add_edge(int u, int v, Matrix m) {
    ALPASIM_CHECK(u != v) << "self edge on node " << u;
    if (u > v) {
      Matrix t{m.cols, m.rows, std::vector<double>(m.a.size())};
      for (std::size_t i = 0; i < m.rows; ++i) {
        for (std::size_t j = 0; j < m.cols; ++j) t.a[j * m.rows + i] = m.a[i * m.cols + j];
      }
      m = std::move(t);
      std::swap(u, v);
    }
    auto [it, fresh] = edges_.emplace(std::make_pair(u, v), m);
    if (!fresh) {
      for (std::size_t i = 0; i < m.a.size(); ++i) it->second.a[i] += m.a[i];
    }
    adj_[static_cast<std::size_t>(u)].insert(v);
    adj_[static_cast<std::size_t>(v)].insert(u);
  }

  void remove_edge(int u, int v) {
    edges_.erase(std::minmax(u, v));
    adj_[static_cast<std::size_t>(u)].erase(v);
    adj_[static_cast<std::size_t>(v)].erase(u);
  }

  // Keeps strategies `keep` (ascending) of node v.
  void keep_strategies(int v, const std::vector<std::size_t>& keep) {
    const auto vi = static_cast<std::size_t>(v);
    std::vector<double> c;
    std::vector<std::int64_t> m;
    for (std::size_t i : keep) {
      c.push_back(cost_[vi][i]);
      m.push_back(mem_[vi][i]);
    }
    cost_[vi] = std::move(c);
    mem_[vi] = std::move(m);
    for (int w : members_[vi]) {
      std::vector<int> t;
      for (std::size_t i : keep) t.push_back(table_[static_cast<std::size_t>(w)][i]);
      table_[static_cast<std::size_t>(w)] = std::move(t);
    }
    for (int w : adj_[vi]) {
      Matrix& mat = edges_.at(std::minmax(v, w));
      Matrix out;
      if (v < w) {
        out = {keep.size(), mat.cols, {}};
        for (std::size_t i : keep) {
          for (std::size_t j = 0; j < mat.cols; ++j) out.a.push_back(mat.at(i, j));
        }
      } else {
        out = {mat.rows, keep.size(), {}};
        for (std::size_t i = 0; i < mat.rows; ++i) {
          for (std::size_t j : keep) out.a.push_back(mat.at(i, j));
        }
      }
      mat = std::move(out);
    }
  }

  // True when strategy j of v is no worse than i everywhere.
  bool dominates(int v, std::size_t j, std::size_t i) const {
    const auto vi = static_cast<std::size_t>(v);
    if (cost_[vi][j] > cost_[vi][i] || mem_[vi][j] > mem_[vi][i]) return false;
    for (int w : adj_[vi]) {
      const Matrix& m = edges_.at(std::minmax(v, w));
      if (v < w) {
        for (std::size_t c = 0; c < m.cols; ++c) {
          if (m.at(j, c) > m.at(i, c)) return false;
        }
      } else {
        for (std::size_t r = 0; r < m.rows; ++r) {
          if (m.at(r, j) > m.at(r, i)) return false;
        }
      }
    }
    return true;
  }

  // Drops dominated strategies of v; returns how many.
  int drop_dominated(int v) {
    const std::size_t kv = k(v);
    if (kv <= 1) return 0;
    std::vector<bool> dropped(kv, false);
    for (std::size_t i = 0; i < kv; ++i) {
      for (std::size_t j = 0; j < kv && !dropped[i]; ++j) {
        if (j == i || dropped[j]) continue;
        // Equal strategies: the lower index survives.
        if (dominates(v, j, i) && (j < i || !dominates(v, i, j))) dropped[i] = true;
      }
    }
    std::vector<std::size_t> keep;
    for (std::size_t i = 0; i < kv; ++i) {
      if (!dropped[i]) keep.push_back(i);
    }
    if (keep.size() == kv) return 0;
    keep_strategies(v, keep);
    return static_cast<int>(kv - keep.size());
  }

  // Folds a single-strategy node into its neighbours.
  void fold(int v) {
    const auto vi = static_cast<std::size_t>(v);
    ALPASIM_CHECK(k(v) == 1) << "fold of node " << v;
    cost_constant_ += cost_[vi][0];
    memory_constant_ += mem_[vi][0];
    const std::vector<int> nbrs(adj_[vi].begin(), adj_[vi].end());
    for (int w : nbrs) {
      const Matrix m = oriented(v, w);
      for (std::size_t c = 0; c < m.cols; ++c) cost_[static_cast<std::size_t>(w)][c] += m.at(0, c);
      remove_edge(v, w);
    }
    for (int w : members_[vi]) node_of_[static_cast<std::size_t>(w)] = -1;
    alive_[vi] = false;
  }

  // Heuristic merge of c into p (Alpa §4.2): c follows p.
  void merge_into(int c, int p) {
    const auto ci = static_cast<std::size_t>(c);
    const auto pi = static_cast<std::size_t>(p);
    const Matrix pc = oriented(p, c);
    std::vector<std::size_t> best(k(p));
    for (std::size_t i = 0; i < k(p); ++i) {
      std::size_t arg = 0;
      double val = cost_[ci][0] + pc.at(i, 0);
      for (std::size_t j = 1; j < k(c); ++j) {
        const double x = cost_[ci][j] + pc.at(i, j);
        if (x < val) {
          val = x;
          arg = j;
        }
      }
      best[i] = arg;
      cost_[pi][i] += val;
      mem_[pi][i] += mem_[ci][arg];
    }
    remove_edge(p, c);
    const std::vector<int> nbrs(adj_[ci].begin(), adj_[ci].end());
    for (int w : nbrs) {
      const Matrix cw = oriented(c, w);
      Matrix pw{k(p), cw.cols, {}};
      for (std::size_t i = 0; i < k(p); ++i) {
        for (std::size_t l = 0; l < cw.cols; ++l) pw.a.push_back(cw.at(best[i], l));
      }
      remove_edge(c, w);
      add_edge(p, w, std::move(pw));
    }
    for (int w : members_[ci]) {
      std::vector<int> t;
      for (std::size_t i = 0; i < k(p); ++i) t.push_back(table_[static_cast<std::size_t>(w)][best[i]]);
      table_[static_cast<std::size_t>(w)] = std::move(t);
      node_of_[static_cast<std::size_t>(w)] = p;
      members_[pi].push_back(w);
    }
    members_[ci].clear();
    alive_[ci] = false;
  }

  SimplifiedProblem finish(SimplifyStats stats) const {
    SimplifiedProblem out;
    out.stats = stats;
    std::vector<int> compact(n_, -1);
    for (std::size_t v = 0; v < n_; ++v) {
      if (!alive_[v]) continue;
      compact[v] = static_cast<int>(out.reduced.nodes.size());
      out.reduced.nodes.push_back({cost_[v], mem_[v]});
    }
    for (const auto& [key, m] : edges_) {
      out.reduced.edges.push_back(
          {compact[static_cast<std::size_t>(key.first)],
           compact[static_cast<std::size_t>(key.second)], m.a});
    }
    out.reduced.cost_constant = cost_constant_;
    out.reduced.memory_constant = memory_constant_;
    out.owner.resize(n_);
    out.table = table_;
    for (std::size_t v = 0; v < n_; ++v) {
      const int o = node_of_[v];
      out.owner[v] = o < 0 ? -1 : compact[static_cast<std::size_t>(o)];
    }
    return out;
  }

  bool alive(int v) const { return alive_[static_cast<std::size_t>(v)]; }
  int node_of(int v) const { return node_of_[static_cast<std::size_t>(v)]; }
  const std::set<int>& adj(int v) const { return adj_[static_cast<std::size_t>(v)]; }
  std::size_t size() const { return n_; }

 private:
  std::size_t n_;
  std::vector<std::vector<double>> cost_;
  std::vector<std::vector<std::int64_t>> mem_;
  std::vector<bool> alive_;
  std::vector<int> node_of_;               // original node -> work node (-1: fixed)
  std::vector<std::vector<int>> table_;    // original node -> original strategy per owner strategy
  std::vector<std::vector<int>> members_;  // work node -> original nodes it decides
  std::vector<std::set<int>> adj_;
  std::map<std::pair<int, int>, Matrix> edges_;
  double cost_constant_ = 0.0;
  std::int64_t memory_constant_ = 0;
};

}  // namespace

SimplifiedProblem simplify(const CostProblem& problem,
                           const std::vector<std::vector<int>>& operands,
                           const std::vector<bool>& cheap, const SimplifyOptions& options) {
  Work w(problem);
  SimplifyStats stats;
  const int n = static_cast<int>(w.size());
  if (options.merge_cheap_operators) {
    ALPASIM_CHECK(operands.size() == w.size() && cheap.size() == w.size())
        << "merging needs operands and cheap flags for every node";
    // BFS depth from the sources (the longest operand chain), Alpa §4.2.
    std::vector<int> depth(w.size(), 0);
    for (std::size_t v = 0; v < w.size(); ++v) {
      for (int o : operands[v]) depth[v] = std::max(depth[v], depth[static_cast<std::size_t>(o)] + 1);
    }
    for (int c = 0; c < n; ++c) {
      if (!cheap[static_cast<std::size_t>(c)] || !w.alive(c)) continue;
      int target = -1;
      int target_depth = -1;
      for (int o : operands[static_cast<std::size_t>(c)]) {
        const int p = w.node_of(o);
        if (p < 0 || p == c || !w.alive(p)) continue;
        if (depth[static_cast<std::size_t>(o)] > target_depth) {
          target = p;
          target_depth = depth[static_cast<std::size_t>(o)];
        }
      }
      if (target < 0) continue;
      w.merge_into(c, target);
      ++stats.merged_nodes;
    }
  }
  if (options.drop_dominated || options.fold_single_strategy) {
    std::deque<int> queue;
    std::vector<bool> queued(w.size(), true);
    for (int v = 0; v < n; ++v) queue.push_back(v);
    while (!queue.empty()) {
      const int v = queue.front();
      queue.pop_front();
      queued[static_cast<std::size_t>(v)] = false;
      if (!w.alive(v)) continue;
      const std::vector<int> nbrs(w.adj(v).begin(), w.adj(v).end());
      bool changed = false;
      if (options.drop_dominated) {
        const int dropped = w.drop_dominated(v);
        stats.dominated_strategies += dropped;
        changed = dropped > 0;
      }
      if (options.fold_single_strategy && w.k(v) == 1) {
        w.fold(v);
        ++stats.folded_nodes;
        changed = true;
      }
      if (!changed) continue;
      // Neighbours' dominance relations may have changed.
      for (int u : nbrs) {
        if (!queued[static_cast<std::size_t>(u)] && w.alive(u)) {
          queued[static_cast<std::size_t>(u)] = true;
          queue.push_back(u);
        }
      }
    }
  }
  return w.finish(stats);
}

}  // namespace alpasim::planner::intra_op

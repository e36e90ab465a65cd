#include "planner/inter_op/inter_op_dp.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/check.h"

namespace alpasim::planner::inter_op {

std::vector<SubmeshShape> submesh_shapes(std::int64_t nodes, std::int64_t gpus_per_node) {
  std::vector<SubmeshShape> out;
  for (std::int64_t m = 1; m < gpus_per_node; m *= 2) out.push_back({1, m});
  out.push_back({1, gpus_per_node});
  for (std::int64_t n = 2; n <= nodes; ++n) out.push_back({n, gpus_per_node});
  return out;
}

void InterOpProblem::resize() {
  table.assign(static_cast<std::size_t>(num_layers) * static_cast<std::size_t>(num_layers + 1) *
                   submeshes.size() * static_cast<std::size_t>(max_stages + 1),
               kInfeasible);
}

std::size_t InterOpProblem::index(int begin, int end, int submesh, int stages_from_end) const {
  const std::size_t s = static_cast<std::size_t>(max_stages + 1);
  const std::size_t j = submeshes.size();
  return ((static_cast<std::size_t>(begin) * static_cast<std::size_t>(num_layers + 1) +
           static_cast<std::size_t>(end)) * j + static_cast<std::size_t>(submesh)) * s +
         static_cast<std::size_t>(stages_from_end);
}

namespace {

// One DP pass for a fixed t_max. Returns the best solution (total_s inf when none).
struct Dp {
  const InterOpProblem& p;
  std::int64_t unit = 1;  // device granularity: gcd of submesh sizes
  int L = 0, S = 0, D = 0, J = 0;
  std::vector<double> f;     // [s][k][d]
  std::vector<int> choice;   // encoded (i, j) of the first stage
  std::vector<int> sizes;    // submesh sizes in units

  explicit Dp(const InterOpProblem& problem) : p(problem) {
    unit = 0;
    for (const auto& m : p.submeshes) unit = std::gcd(unit, m.size());
    if (unit == 0) unit = 1;
    L = p.num_layers;
    S = p.max_stages;
    D = static_cast<int>(p.num_devices / unit);
    J = static_cast<int>(p.submeshes.size());
    for (const auto& m : p.submeshes) sizes.push_back(static_cast<int>(m.size() / unit));
    f.assign(static_cast<std::size_t>(S + 1) * static_cast<std::size_t>(L + 1) *
                 static_cast<std::size_t>(D + 1),
             InterOpProblem::kInfeasible);
    choice.assign(f.size(), -1);
  }
  std::size_t at(int s, int k, int d) const {
    return (static_cast<std::size_t>(s) * static_cast<std::size_t>(L + 1) +
            static_cast<std::size_t>(k)) * static_cast<std::size_t>(D + 1) +
           static_cast<std::size_t>(d);
  }

  InterOpSolution run(double t_max) {
    std::fill(f.begin(), f.end(), InterOpProblem::kInfeasible);
    f[at(0, L, 0)] = 0.0;
    for (int s = 1; s <= S; ++s) {
      for (int k = L - 1; k >= 0; --k) {
        for (int d = 1; d <= D; ++d) {
          double best = InterOpProblem::kInfeasible;
          int best_choice = -1;
          for (int i = k + 1; i <= L; ++i) {
            for (int j = 0; j < J; ++j) {
              const int size = sizes[static_cast<std::size_t>(j)];
              if (size > d) continue;
              const double rest = f[at(s - 1, i, d - size)];
              if (rest == InterOpProblem::kInfeasible) continue;
              const double t = p.time(k, i, j, s);
              if (!(t <= t_max)) continue;
              if (t + rest < best) {
                best = t + rest;
                best_choice = i * J + j;
              }
            }
          }
          f[at(s, k, d)] = best;
          choice[at(s, k, d)] = best_choice;
        }
      }
    }
    InterOpSolution sol;
    int best_s = -1;
    for (int s = 1; s <= S; ++s) {
      const double v = f[at(s, 0, D)];
      if (v < sol.sum_s || best_s < 0) {
        if (v == InterOpProblem::kInfeasible) continue;
        sol.sum_s = v;
        best_s = s;
      }
    }
    if (best_s < 0) return InterOpSolution{};
    int k = 0, d = D;
    for (int s = best_s; s >= 1; --s) {
      const int c = choice[at(s, k, d)];
      const int i = c / J, j = c % J;
      const double t = p.time(k, i, j, s);
      sol.stages.push_back({k, i, j, t});
      sol.max_stage_s = std::max(sol.max_stage_s, t);
      d -= sizes[static_cast<std::size_t>(j)];
      k = i;
    }
    sol.total_s = sol.sum_s + static_cast<double>(p.num_microbatches - 1) * sol.max_stage_s;
    return sol;
  }
};

}  // namespace

InterOpResult solve_inter_op(const InterOpProblem& p, const InterOpOptions& options) {
  ALPASIM_CHECK(p.table.size() == p.index(p.num_layers - 1, p.num_layers,
                                          static_cast<int>(p.submeshes.size()) - 1,
                                          p.max_stages) + 1)
      << "InterOpProblem::resize() not called";
  InterOpResult result;
  std::vector<double> candidates;
  for (double t : p.table) {
    if (std::isfinite(t)) candidates.push_back(t);
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  result.t_max_candidates = static_cast<int>(candidates.size());
  Dp dp(p);
  const double b = static_cast<double>(p.num_microbatches);
  double last = -1.0;
  std::vector<InterOpSolution>& kept = result.solutions;
  for (double t_max : candidates) {
    const double best = kept.empty() ? InterOpProblem::kInfeasible : kept.front().total_s;
    if (options.prune && b * t_max >= best) break;
    if (last >= 0 && t_max < last * (1.0 + options.epsilon) && options.epsilon > 0) continue;
    last = t_max;
    ++result.t_max_enumerated;
    InterOpSolution sol = dp.run(t_max);
    if (!std::isfinite(sol.total_s)) continue;
    // Distinct solutions only (a larger t_max often finds the same pipeline again).
    bool seen = false;
    for (const auto& k : kept) seen = seen || k.stages == sol.stages;
    if (seen) continue;
    kept.push_back(std::move(sol));
    std::stable_sort(kept.begin(), kept.end(), [](const InterOpSolution& a, const InterOpSolution& c) {
      return a.total_s < c.total_s;
    });
    if (static_cast<int>(kept.size()) > std::max(1, options.top_k)) kept.pop_back();
  }
  return result;
}

namespace {
void brute(const InterOpProblem& p, int k, std::int64_t devices_left, std::vector<StageChoice>& cur,
           InterOpSolution& best) {
  if (k == p.num_layers) {
    if (devices_left != 0 || cur.empty()) return;
    const int s_total = static_cast<int>(cur.size());
    double sum = 0, mx = 0;
    for (int idx = 0; idx < s_total; ++idx) {
      const auto& c = cur[static_cast<std::size_t>(idx)];
      const double t = p.time(c.layer_begin, c.layer_end, c.submesh, s_total - idx);
      if (!std::isfinite(t)) return;
      sum += t;
      mx = std::max(mx, t);
    }
    const double total = sum + static_cast<double>(p.num_microbatches - 1) * mx;
    if (total < best.total_s) {
      best.total_s = total;
      best.sum_s = sum;
      best.max_stage_s = mx;
      best.stages = cur;
      for (int idx = 0; idx < s_total; ++idx) {
        auto& c = best.stages[static_cast<std::size_t>(idx)];
        c.time_s = p.time(c.layer_begin, c.layer_end, c.submesh, s_total - idx);
      }
    }
    return;
  }
  if (static_cast<int>(cur.size()) == p.max_stages) return;
  for (int i = k + 1; i <= p.num_layers; ++i) {
    for (int j = 0; j < static_cast<int>(p.submeshes.size()); ++j) {
      const std::int64_t size = p.submeshes[static_cast<std::size_t>(j)].size();
      if (size > devices_left) continue;
      cur.push_back({k, i, j, 0.0});
      brute(p, i, devices_left - size, cur, best);
      cur.pop_back();
    }
  }
}
}  // namespace

InterOpSolution brute_force_inter_op(const InterOpProblem& problem) {
  InterOpSolution best;
  std::vector<StageChoice> cur;
  brute(problem, 0, problem.num_devices, cur, best);
  return best;
}

core::Result<std::vector<Placement>> assign_devices(const std::vector<SubmeshShape>& stages,
                                                    std::int64_t nodes,
                                                    std::int64_t gpus_per_node) {
  std::int64_t total = 0;
  for (const auto& s : stages) total += s.size();
  if (total != nodes * gpus_per_node) {
    return core::invalid_argument("stage submeshes hold " + std::to_string(total) +
                                  " GPUs but the cluster has " +
                                  std::to_string(nodes * gpus_per_node));
  }
  std::vector<Placement> out(stages.size());
  std::int64_t next_node = 0;
  // Whole-node submeshes in pipeline order on consecutive nodes.
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].gpus_per_node != gpus_per_node) continue;
    out[i] = {next_node, 0};
    next_node += stages[i].nodes;
  }
  // Partial-node submeshes: largest first (stable: pipeline order among equals), each at
  // the first free slot aligned to its size in the remaining nodes.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].gpus_per_node != gpus_per_node) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return stages[a].size() > stages[b].size();
  });
  std::vector<std::vector<bool>> used(static_cast<std::size_t>(nodes),
                                      std::vector<bool>(static_cast<std::size_t>(gpus_per_node)));
  for (std::int64_t n = 0; n < next_node; ++n) used[static_cast<std::size_t>(n)].assign(
      static_cast<std::size_t>(gpus_per_node), true);
  for (std::size_t i : order) {
    const std::int64_t m = stages[i].gpus_per_node;
    bool placed = false;
    for (std::int64_t n = next_node; n < nodes && !placed; ++n) {
      auto& u = used[static_cast<std::size_t>(n)];
      for (std::int64_t off = 0; off + m <= gpus_per_node && !placed; off += m) {
        bool free = true;
        for (std::int64_t g = off; g < off + m; ++g) free = free && !u[static_cast<std::size_t>(g)];
        if (!free) continue;
        for (std::int64_t g = off; g < off + m; ++g) u[static_cast<std::size_t>(g)] = true;
        out[i] = {n, off};
        placed = true;
      }
    }
    if (!placed) {
      return core::invalid_argument("cannot place a 1x" + std::to_string(m) +
                                    " submesh without overlapping another stage");
    }
  }
  return out;
}

}  // namespace alpasim::planner::inter_op

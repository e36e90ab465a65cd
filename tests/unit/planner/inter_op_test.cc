// The inter-op DP (Alpa §5.2, Algorithm 1) against brute force, pruning, submesh shapes and
// device assignment.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>

#include "planner/adapters/ir_adapter.h"
#include "planner/inter_op/inter_op_dp.h"

using namespace alpasim::planner;
using inter_op::InterOpProblem;

namespace {

// Uniform double in [0, 1) from the top 53 bits (our own distribution: portable results).
double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

InterOpProblem random_problem(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  InterOpProblem p;
  p.num_layers = 2 + static_cast<int>(rng() % 4);  // 2..5
  p.submeshes = inter_op::submesh_shapes(1, 4);    // (1,1) (1,2) (1,4)
  p.num_devices = 4;
  p.num_microbatches = 1 + static_cast<std::int64_t>(rng() % 8);
  p.max_stages = p.num_layers;
  p.resize();
  for (int k = 0; k < p.num_layers; ++k) {
    for (int i = k + 1; i <= p.num_layers; ++i) {
      for (int j = 0; j < 3; ++j) {
        // A stage gets faster on more devices; more stages after it (more microbatches in
        // flight) may make it infeasible (memory).
        const double base = (i - k) * (0.5 + unit(rng)) / static_cast<double>(1 << j);
        for (int s = 1; s <= p.max_stages; ++s) {
          const bool fits = unit(rng) > 0.15 * s;
          p.set(k, i, j, s, fits ? base * (1.0 + 0.05 * s) : InterOpProblem::kInfeasible);
        }
      }
    }
  }
  return p;
}

}  // namespace

TEST_CASE("submesh shapes are Alpa's (1, 2^k) and (n, M)") {
  const auto s = inter_op::submesh_shapes(4, 8);
  REQUIRE(s.size() == 7);
  // (1,1) (1,2) (1,4) (1,8) (2,8) (3,8) (4,8)
  CHECK(s[0] == adapters::SubmeshShape{1, 1});
  CHECK(s[2] == adapters::SubmeshShape{1, 4});
  CHECK(s[3] == adapters::SubmeshShape{1, 8});
  CHECK(s[6] == adapters::SubmeshShape{4, 8});
  // A 6-GPU node: 1, 2, 4 and the whole node.
  const auto t = inter_op::submesh_shapes(1, 6);
  REQUIRE(t.size() == 4);
  CHECK(t[3] == adapters::SubmeshShape{1, 6});
}

TEST_CASE("the inter-op DP equals brute force over partitions and submeshes") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    const InterOpProblem p = random_problem(seed);
    const auto brute = inter_op::brute_force_inter_op(p);
    inter_op::InterOpOptions o;  // exact: epsilon 0, pruning on
    const auto dp = inter_op::solve_inter_op(p, o);
    if (!std::isfinite(brute.total_s)) {
      CHECK(dp.solutions.empty());
      continue;
    }
    REQUIRE_FALSE(dp.solutions.empty());
    CHECK(dp.solutions.front().total_s == doctest::Approx(brute.total_s).epsilon(1e-12));
    // The solution's stages cover every layer and exactly the 4 devices.
    std::int64_t devices = 0;
    int next = 0;
    for (const auto& st : dp.solutions.front().stages) {
      CHECK(st.layer_begin == next);
      next = st.layer_end;
      devices += p.submeshes[static_cast<std::size_t>(st.submesh)].size();
    }
    CHECK(next == p.num_layers);
    CHECK(devices == 4);
  }
}

TEST_CASE("early pruning (B * t_max >= T*) does not change the optimum") {
  int pruned_runs = 0;
  for (std::uint64_t seed = 100; seed < 130; ++seed) {
    const InterOpProblem p = random_problem(seed);
    inter_op::InterOpOptions with, without;
    without.prune = false;
    const auto a = inter_op::solve_inter_op(p, with);
    const auto b = inter_op::solve_inter_op(p, without);
    REQUIRE(a.solutions.empty() == b.solutions.empty());
    if (a.solutions.empty()) continue;
    CHECK(a.solutions.front().total_s == b.solutions.front().total_s);
    CHECK(a.t_max_enumerated <= b.t_max_enumerated);
    if (a.t_max_enumerated < b.t_max_enumerated) ++pruned_runs;
  }
  CHECK(pruned_runs > 0);  // the pruning does cut the enumeration somewhere
}

TEST_CASE("top-K keeps distinct solutions, best first") {
  int with_several = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    const InterOpProblem p = random_problem(seed);
    inter_op::InterOpOptions o;
    o.top_k = 3;
    o.prune = false;
    const auto r = inter_op::solve_inter_op(p, o);
    CHECK(r.solutions.size() <= 3);
    if (r.solutions.size() >= 2) ++with_several;
    for (std::size_t i = 1; i < r.solutions.size(); ++i) {
      CHECK(r.solutions[i - 1].total_s <= r.solutions[i].total_s);
      CHECK_FALSE(r.solutions[i - 1].stages == r.solutions[i].stages);
    }
  }
  CHECK(with_several > 0);
}

TEST_CASE("device assignment covers the cluster without overlap") {
  // 4 nodes x 8: (2,8) + (1,4) + (1,2) + (1,1) + (1,1) + (1,8) = 16 + 4 + 2 + 1 + 1 + 8 = 32.
  const std::vector<adapters::SubmeshShape> stages = {{1, 1}, {2, 8}, {1, 4}, {1, 2}, {1, 8}, {1, 1}};
  auto placed = inter_op::assign_devices(stages, 4, 8);
  REQUIRE(placed.ok());
  std::set<std::int64_t> ids;
  std::size_t total = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const auto& pl = placed.value()[i];
    const auto dev = adapters::mesh_device_ids(stages[i], {stages[i].size(), 1}, 8, pl.first_node,
                                               pl.first_local);
    total += dev.size();
    for (auto d : dev) {
      CHECK(d >= 0);
      CHECK(d < 32);
      ids.insert(d);
    }
  }
  CHECK(total == 32);
  CHECK(ids.size() == 32);  // disjoint and covering
  // Whole-node stages sit on consecutive nodes in pipeline order: (2,8) at node 0, (1,8) at 2.
  CHECK(placed.value()[1].first_node == 0);
  CHECK(placed.value()[4].first_node == 2);
}

TEST_CASE("device assignment rejects sizes that do not sum to the cluster") {
  auto r = inter_op::assign_devices({{1, 8}, {1, 4}}, 2, 8);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "stage submeshes hold 12 GPUs but the cluster has 16");
}

#include "ir/clustering.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>

namespace alpasim::ir {
namespace {

// A random DAG of `k` compute ops (each reads 1-2 earlier tensors or the input) with
// FLOPs in [0, 100] and tensor sizes in [1, 64] fp32 elements. std::mt19937_64 with our
// own range mapping keeps it identical on every platform.
Graph random_graph(std::mt19937_64& rng, int k) {
  auto pick = [&](std::uint64_t n) { return static_cast<std::int64_t>(rng() % n); };
  Graph g;
  g.meta.dtype = core::DType::kFp32;
  OpId in = g.add_input("in", {8}, false, 0);
  for (int i = 0; i < k; ++i) {
    Op o;
    o.kind = OpKind::kElementwise;
    o.name = "op" + std::to_string(i);
    const int reads = 1 + static_cast<int>(pick(2));
    for (int r = 0; r < reads; ++r) {
      OpId src = i == 0 ? in : static_cast<OpId>(1 + pick(static_cast<std::uint64_t>(i)));
      if (std::find(o.inputs.begin(), o.inputs.end(), src) == o.inputs.end()) o.inputs.push_back(src);
    }
    o.out = {{1 + pick(64)}, core::DType::kFp32, false};
    o.flops = pick(101);
    g.add(std::move(o));
  }
  return g;
}

struct Best {
  std::int64_t max_c = std::numeric_limits<std::int64_t>::max();
  double sum_sq = 0;
  bool found = false;
};

// Every split of the K ops into L non-empty contiguous layers.
Best brute_force(const Graph& g, int L, double delta) {
  const std::vector<OpId> ops = clusterable_ops(g);
  const std::size_t K = ops.size();
  double total = 0;
  for (OpId id : ops) total += static_cast<double>(g.op(id).flops);
  const double bound = (1.0 + delta) * total / L * (1 + 1e-12);  // as the DP
  Best best;
  std::vector<std::size_t> cuts(static_cast<std::size_t>(L) + 1);
  std::function<void(int, std::size_t)> rec = [&](int r, std::size_t start) {
    if (r == L) {
      if (start != K) return;
      std::int64_t mc = 0;
      double sq = 0;
      for (int j = 0; j < L; ++j) {
        std::int64_t f = 0;
        for (std::size_t x = cuts[static_cast<std::size_t>(j)]; x < cuts[static_cast<std::size_t>(j) + 1]; ++x) {
          f += g.op(ops[x]).flops;
        }
        if (static_cast<double>(f) > bound) return;
        sq += static_cast<double>(f) * static_cast<double>(f);
        mc = std::max(mc, incoming_bytes(g, ops, cuts[static_cast<std::size_t>(j)], cuts[static_cast<std::size_t>(j) + 1]));
      }
      if (!best.found || mc < best.max_c || (mc == best.max_c && sq < best.sum_sq)) best = {mc, sq, true};
      return;
    }
    for (std::size_t end = start + 1; end <= K; ++end) {
      cuts[static_cast<std::size_t>(r) + 1] = end;
      rec(r + 1, end);
    }
  };
  cuts[0] = 0;
  rec(0, 0);
  return best;
}

TEST_CASE("operator clustering equals brute force on 300 random graphs") {
  std::mt19937_64 rng(20221123);
  int feasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int k = 3 + static_cast<int>(rng() % 7);  // 3..9 ops
    const int L = 1 + static_cast<int>(rng() % std::min(k, 4));
    const double delta = (rng() % 4) * 0.25;  // 0, 0.25, 0.5, 0.75
    const Graph g = random_graph(rng, k);
    CAPTURE(trial);
    const Best bf = brute_force(g, L, delta);
    auto dp = cluster_operators(g, {L, delta});
    CHECK(dp.ok() == bf.found);
    if (!dp.ok() || !bf.found) continue;
    ++feasible;
    // Both criteria optimal: the least largest incoming size, then the least Σ FLOPs².
    CHECK(dp->max_incoming_bytes == bf.max_c);
    CHECK(dp->flops_sum_of_squares == bf.sum_sq);
    REQUIRE(dp->starts.size() == static_cast<std::size_t>(L));
    CHECK(*std::max_element(dp->layer_incoming_bytes.begin(), dp->layer_incoming_bytes.end()) ==
          dp->max_incoming_bytes);
  }
  CHECK(feasible > 150);  // the comparison exercised mostly feasible cases
}

TEST_CASE("clustering a chain cuts at the smallest tensors within the FLOP bound") {
  // Four ops of 10 FLOPs each in a chain; tensors of 100, 1, 100 fp32 elements between
  // them. L = 2, δ = 0.5: each layer may have up to 30 FLOPs, so the cut may go after op
  // 1, 2 or 3; after op 2 the next layer receives 1 element (4 bytes).
  Graph g;
  g.meta.dtype = core::DType::kFp32;
  OpId prev = g.add_input("in", {1}, false, 0);
  for (std::int64_t size : {100, 1, 100, 5}) {
    Op o;
    o.kind = OpKind::kElementwise;
    o.name = "op";
    o.inputs = {prev};
    o.out = {{size}, core::DType::kFp32, false};
    o.flops = 10;
    prev = g.add(std::move(o));
  }
  auto c = cluster_operators(g, {2, 0.5});
  REQUIRE(c.ok());
  CHECK(c->starts == std::vector<std::size_t>{0, 2});
  CHECK(c->max_incoming_bytes == 4);
  CHECK(c->layer_flops == std::vector<std::int64_t>{20, 20});
  CHECK(cluster_operators(g, {5, 0.5}).status().message() ==
        "operator clustering: expected 1 to 4 layers (the number of forward ops), got 5");
  CHECK(cluster_operators(g, {3, 0.0}).status().message() ==
        "operator clustering: no split of 4 ops into 3 layers keeps every layer within 1.000x "
        "the mean of 13 FLOPs (the heaviest op has 10 FLOPs); use fewer layers or a larger "
        "tolerance");
}

}  // namespace
}  // namespace alpasim::ir

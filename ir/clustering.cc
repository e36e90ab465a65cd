#include "ir/clustering.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/text.h"

namespace alpasim::ir {
namespace {

constexpr std::int64_t kInf = std::numeric_limits<std::int64_t>::max();

/// Calls visit(k, C(i, k+1)) for k = i, i+1, ... while the layer [i, k] stays within
/// `flop_bound`, computing C incrementally: a tensor counts once per start i (stamp).
template <class Visit>
void scan_layers_from(const Graph& g, const std::vector<OpId>& ops, const std::vector<std::int64_t>& pos,
                      std::size_t i, double flop_bound, std::vector<std::int64_t>& stamp, Visit visit) {
  std::int64_t c = 0;
  std::int64_t flops = 0;
  const auto stamp_value = static_cast<std::int64_t>(i);
  for (std::size_t k = i; k < ops.size(); ++k) {
    const Op& o = g.op(ops[k]);
    flops += o.flops;
    if (static_cast<double>(flops) > flop_bound) break;
    for (OpId t : o.inputs) {
      const std::int64_t p = pos[static_cast<std::size_t>(t)];
      if (p >= 0 && p < stamp_value && stamp[static_cast<std::size_t>(t)] != stamp_value) {
        stamp[static_cast<std::size_t>(t)] = stamp_value;
        c += g.op(t).out.bytes();
      }
    }
    visit(k, c, flops);
  }
}

}  // namespace

std::vector<OpId> clusterable_ops(const Graph& g) {
  std::vector<OpId> ops;
  for (const Op& o : g.ops()) {
    if (o.phase == Phase::kForward && !o.is_source()) ops.push_back(o.id);
  }
  return ops;
}

std::int64_t incoming_bytes(const Graph& g, const std::vector<OpId>& ops, std::size_t i, std::size_t k) {
  std::vector<char> before(g.size(), 0), seen(g.size(), 0);
  for (std::size_t j = 0; j < i; ++j) before[static_cast<std::size_t>(ops[j])] = 1;
  std::int64_t c = 0;
  for (std::size_t j = i; j < k; ++j) {
    for (OpId t : g.op(ops[j]).inputs) {
      auto u = static_cast<std::size_t>(t);
      if (before[u] && !seen[u]) {
        seen[u] = 1;
        c += g.op(t).out.bytes();
      }
    }
  }
  return c;
}

core::Result<Clustering> cluster_operators(const Graph& g, const ClusteringOptions& options) {
  const std::vector<OpId> ops = clusterable_ops(g);
  const std::size_t K = ops.size();
  const auto L = static_cast<std::size_t>(std::max(options.num_layers, 0));
  if (L < 1 || L > K) {
    return core::invalid_argument("operator clustering: expected 1 to " + std::to_string(K) +
                                  " layers (the number of forward ops), got " +
                                  std::to_string(options.num_layers));
  }
  if (!(options.imbalance_tolerance >= 0)) {
    return core::invalid_argument("operator clustering: expected a tolerance >= 0, got " +
                                  core::format_fixed(options.imbalance_tolerance, 3));
  }
  std::vector<std::int64_t> pos(g.size(), -1);
  double total = 0;
  std::int64_t heaviest = 0;
  for (std::size_t k = 0; k < K; ++k) {
    pos[static_cast<std::size_t>(ops[k])] = static_cast<std::int64_t>(k);
    total += static_cast<double>(g.op(ops[k]).flops);
    heaviest = std::max(heaviest, g.op(ops[k]).flops);
  }
  // A tiny relative slack keeps a bound equal to a layer's FLOPs feasible despite rounding.
  const double bound = (1.0 + options.imbalance_tolerance) * total / static_cast<double>(L) * (1 + 1e-12);
  std::vector<std::int64_t> stamp(g.size(), -1);

  // Pass 1: G[k][r] over prefixes of k ops in r layers (row-major (K+1) x (L+1)).
  auto at = [&](std::size_t k, std::size_t r) { return k * (L + 1) + r; };
  std::vector<std::int64_t> G((K + 1) * (L + 1), kInf);
  G[at(0, 0)] = 0;
  for (std::size_t i = 0; i < K; ++i) {  // a layer starting at op i (0-based)
    scan_layers_from(g, ops, pos, i, bound, stamp, [&](std::size_t k, std::int64_t c, std::int64_t) {
      for (std::size_t r = 1; r <= L; ++r) {
        const std::int64_t prev = G[at(i, r - 1)];
        if (prev == kInf) continue;
        G[at(k + 1, r)] = std::min(G[at(k + 1, r)], std::max(prev, c));
      }
    });
  }
  const std::int64_t best = G[at(K, L)];
  if (best == kInf) {
    return core::failed_precondition(
        "operator clustering: no split of " + std::to_string(K) + " ops into " + std::to_string(L) +
        " layers keeps every layer within " + core::format_fixed(1 + options.imbalance_tolerance, 3) +
        "x the mean of " + core::format_fixed(total / static_cast<double>(L), 0) +
        " FLOPs (the heaviest op has " + std::to_string(heaviest) + " FLOPs); use fewer layers or a larger tolerance");
  }

  // Pass 2: least Σ flops² among partitions whose every layer has C <= best.
  std::fill(stamp.begin(), stamp.end(), -1);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> V((K + 1) * (L + 1), inf);
  std::vector<std::size_t> from((K + 1) * (L + 1), 0);
  V[at(0, 0)] = 0;
  for (std::size_t i = 0; i < K; ++i) {
    scan_layers_from(g, ops, pos, i, bound, stamp, [&](std::size_t k, std::int64_t c, std::int64_t f) {
      if (c > best) return;
      const double sq = static_cast<double>(f) * static_cast<double>(f);
      for (std::size_t r = 1; r <= L; ++r) {
        const double prev = V[at(i, r - 1)];
        if (prev == inf) continue;
        // Strict "<": among equal values the earliest start wins (deterministic).
        if (prev + sq < V[at(k + 1, r)]) {
          V[at(k + 1, r)] = prev + sq;
          from[at(k + 1, r)] = i;
        }
      }
    });
  }
  ALPASIM_CHECK(V[at(K, L)] < inf) << "pass 2 must find the partition pass 1 found";
  Clustering out;
  out.ops = ops;
  out.max_incoming_bytes = best;
  out.flops_sum_of_squares = V[at(K, L)];
  out.starts.assign(L, 0);
  std::size_t k = K;
  for (std::size_t r = L; r >= 1; --r) {
    out.starts[r - 1] = from[at(k, r)];
    k = out.starts[r - 1];
  }
  out.layer_of.assign(g.size(), -1);
  for (std::size_t r = 0; r < L; ++r) {
    const std::size_t end = r + 1 < L ? out.starts[r + 1] : K;
    std::int64_t f = 0;
    for (std::size_t j = out.starts[r]; j < end; ++j) {
      f += g.op(ops[j]).flops;
      out.layer_of[static_cast<std::size_t>(ops[j])] = static_cast<std::int32_t>(r);
    }
    out.layer_flops.push_back(f);
    out.layer_incoming_bytes.push_back(incoming_bytes(g, ops, out.starts[r], end));
  }
  return out;
}

}  // namespace alpasim::ir

#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace alpasim::ir {

/// Operator clustering of the Alpa paper (§5.2, "performance optimization #2"): groups
/// the forward compute ops o_1..o_K (topological order; parameters and inputs excluded)
/// into L contiguous layers so that
///   1. every layer's FLOPs are at most (1 + δ) times the mean (total / L);
///   2. G(K, L) = the largest number of bytes any layer receives from earlier layers is
///      minimal, with G(k, r) = min_i max(G(i-1, r-1), C(i, k)), where C(i, k) is the
///      size of the distinct tensors produced by o_1..o_{i-1} and read by o_i..o_k;
///   3. among partitions with that minimal G, the FLOPs are the most even (least sum of
///      squared layer FLOPs = least variance, the paper's tie-break).
/// Both criteria are solved exactly: one DP for G, a second DP for the variance
/// restricted to layers whose C is within G. O(K²·L) worst case; the FLOP bound limits
/// each layer's span, so typical graphs cost far less.
struct ClusteringOptions {
  std::int32_t num_layers = 1;  ///< L >= 1
  double imbalance_tolerance = 0.25;  ///< δ >= 0 (Alpa's stage_imbalance_tolerance)
};

struct Clustering {
  /// The clustered ops in order; layer j holds ops[starts[j]] .. ops[starts[j+1]-1].
  std::vector<OpId> ops;
  std::vector<std::size_t> starts;  ///< L entries, starts[0] == 0
  std::vector<std::int64_t> layer_flops;           ///< per layer
  std::vector<std::int64_t> layer_incoming_bytes;  ///< C(start, end) per layer
  std::int64_t max_incoming_bytes = 0;             ///< G(K, L)
  double flops_sum_of_squares = 0;                 ///< Σ layer_flops², the tie-break value
  /// Layer index of graph op `id` (-1 for ops not clustered).
  std::vector<std::int32_t> layer_of;
};

/// Clusters the forward ops of `graph`. Errors (kInvalidArgument / kFailedPrecondition):
/// L larger than the number of ops, or no partition meets the FLOP bound (the message
/// gives the heaviest op and the bound).
core::Result<Clustering> cluster_operators(const Graph& graph, const ClusteringOptions& options);

/// The ops cluster_operators considers, in order.
std::vector<OpId> clusterable_ops(const Graph& graph);

/// C(i, k) for the 0-based half-open range [i, k) of `ops`: bytes of distinct tensors
/// produced by ops[0..i) and read by ops[i..k). For tests and brute force.
std::int64_t incoming_bytes(const Graph& graph, const std::vector<OpId>& ops, std::size_t i,
                            std::size_t k);

}  // namespace alpasim::ir

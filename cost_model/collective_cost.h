#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cluster/topology.h"
#include "core/units.h"

namespace alpasim::cost_model {

/// The collectives the model prices. Message sizes follow nccl-tests: `bytes` is the
/// per-rank buffer for all-reduce and broadcast, the total (gathered) size for all-gather,
/// reduce-scatter and all-to-all, and the transferred size for send/recv.
enum class Collective : std::int8_t {
  kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSendRecv
};
/// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv".
const char* collective_name(Collective c);

/// Algorithms, as NCCL (and Tutel for all-to-all) implement them.
enum class CollectiveAlgorithm : std::int8_t {
  kRing,          ///< one ring over all ranks, channels packed over the links
  kTree,          ///< NCCL tree: intra-node chain + inter-node (double) binary tree
  kHierarchical,  ///< reduce-scatter in the node, all-reduce across nodes, all-gather in the node
  kNvls,          ///< NVLink SHARP: reduction inside the NVSwitch (Hopper, single node)
  kDirect,        ///< all-to-all: every rank sends to every rank at once (NCCL's alltoall)
  kTwoDimHierarchical,  ///< Tutel 2DH all-to-all: intra-node a2a, stride copy, inter-node a2a
  kPointToPoint,  ///< send/recv over the widest path
};
/// "ring", "tree", "hierarchical", "nvls", "direct", "2d_hierarchical", "p2p".
const char* algorithm_name(CollectiveAlgorithm a);

/// NCCL protocols: LL trades bandwidth for latency, Simple the reverse.
enum class Protocol : std::int8_t { kLowLatency, kSimple };
/// "ll" or "simple".
const char* protocol_name(Protocol p);

/// Per link class: how much of the graph's bandwidth NCCL achieves.
struct LinkClassParams {
  double bandwidth_efficiency = 0.0;  ///< collectives: achieved busbw / graph bandwidth, Simple
  double p2p_efficiency = 0.0;  ///< send/recv: achieved / path bandwidth (0 = use the above)
};

/// The alpha-beta parameters of the collective model (docs/cost_model.md). Times in
/// seconds; the graph supplies bandwidths (bytes/s) and wire latencies.
struct CollectiveParams {
  double base_latency_s = 0.0;       ///< per call: kernel launch and synchronisation
  double hop_latency_s = 0.0;        ///< per ring/tree step, software, on top of the wire
  double simple_latency_s = 0.0;     ///< extra per-call latency of the Simple protocol
  /// Size-dependent Simple latency: (log2 of message bytes, seconds) points in ascending
  /// order, from the calibration's residuals; piecewise linear in log2(bytes) and flat
  /// outside the points. Empty: simple_latency_s at every size.
  std::vector<std::pair<double, double>> simple_latency_curve;
  double ll_bandwidth_fraction = 0.0;  ///< LL bandwidth / Simple bandwidth, (0, 1]
  double nvls_efficiency = 0.0;      ///< NVLS: achieved / NVLink bandwidth
  /// Per cluster::LinkClass (index = enum value).
  std::array<LinkClassParams, cluster::kNumLinkClasses> link{};
  /// HBM bandwidth for the local stride copies of Tutel's 2DH all-to-all, bytes/s
  /// (0 disables that algorithm).
  double local_copy_bytes_per_s = 0.0;
};

/// A priced collective.
struct CollectiveEstimate {
  core::Seconds time{0};
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  Protocol protocol = Protocol::kSimple;
  core::BytesPerSecond algo_bandwidth{0};  ///< bytes / time
  core::BytesPerSecond bus_bandwidth{0};   ///< algo_bandwidth * bus_factor (nccl-tests)
};

/// "<algorithm>/<protocol>" of a priced collective, e.g. "ring/simple" (trace events).
std::string algorithm_text(const CollectiveEstimate& e);

/// nccl-tests' busbw factor: 2(n-1)/n all-reduce, (n-1)/n all-gather, reduce-scatter and
/// all-to-all, 1 broadcast and send/recv.
double bus_factor(Collective c, std::int64_t n);

/// Collective time on a device group. Every query is O(1): a few formulas per algorithm
/// on the group's precomputed cluster::GroupInfo, the fastest kept (as NCCL's tuner does).
class CollectiveCostModel {
 public:
  explicit CollectiveCostModel(CollectiveParams params) : params_(params) {}

  /// The fastest algorithm and protocol for `c` of `bytes` on `group`. A group of one rank
  /// costs nothing. For kSendRecv use send_recv().
  CollectiveEstimate estimate(Collective c, core::Bytes bytes,
                              const cluster::GroupInfo& group) const;
  /// `c` with `algorithm` forced, and `protocol` when given (else its fastest); time is
  /// +infinity when the algorithm does not apply (e.g. NVLS off Hopper, 2DH on one node).
  CollectiveEstimate estimate_with(Collective c, CollectiveAlgorithm algorithm,
                                   core::Bytes bytes, const cluster::GroupInfo& group,
                                   std::optional<Protocol> protocol = std::nullopt) const;
  /// A point-to-point transfer of `bytes` over `path`.
  CollectiveEstimate send_recv(core::Bytes bytes, const cluster::PathInfo& path) const;

  const CollectiveParams& params() const { return params_; }
  /// The Simple protocol's extra latency for a message of `bytes` (seconds).
  double simple_latency_s(double bytes) const;

 private:
  CollectiveEstimate best_of(Collective c, CollectiveAlgorithm a, double bytes,
                             const cluster::GroupInfo& g, std::optional<Protocol> protocol,
                             double simple_lat) const;
  double time_of(Collective c, CollectiveAlgorithm a, Protocol p, double bytes,
                 const cluster::GroupInfo& g, double simple_lat) const;
  CollectiveParams params_;
};

}  // namespace alpasim::cost_model

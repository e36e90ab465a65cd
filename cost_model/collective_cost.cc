#include "cost_model/collective_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace alpasim::cost_model {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double ceil_log2(std::int64_t m) {
  double d = 0;
  for (std::int64_t v = 1; v < m; v *= 2) d += 1;
  return d;
}

// bytes / bandwidth, +infinity when the bandwidth is missing.
double xfer(double bytes, double bytes_per_s) {
  if (bytes <= 0) return 0;
  return bytes_per_s > 0 ? bytes / bytes_per_s : kInf;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "send_recv";
  }
  return "?";
}

const char* algorithm_name(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::kRing: return "ring";
    case CollectiveAlgorithm::kTree: return "tree";
    case CollectiveAlgorithm::kHierarchical: return "hierarchical";
    case CollectiveAlgorithm::kNvls: return "nvls";
    case CollectiveAlgorithm::kDirect: return "direct";
    case CollectiveAlgorithm::kTwoDimHierarchical: return "2d_hierarchical";
    case CollectiveAlgorithm::kPointToPoint: return "p2p";
  }
  return "?";
}

const char* protocol_name(Protocol p) { return p == Protocol::kLowLatency ? "ll" : "simple"; }

std::string algorithm_text(const CollectiveEstimate& e) {
  return std::string(algorithm_name(e.algorithm)) + "/" + protocol_name(e.protocol);
}

double bus_factor(Collective c, std::int64_t n) {
  const double dn = static_cast<double>(n);
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (dn - 1) / dn;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return (dn - 1) / dn;
    case Collective::kBroadcast:
    case Collective::kSendRecv: return 1.0;
  }
  return 1.0;
}

double CollectiveCostModel::simple_latency_s(double bytes) const {
  const auto& curve = params_.simple_latency_curve;
  if (curve.empty() || bytes <= 0) return params_.simple_latency_s;
  const double x = std::log2(bytes);
  if (x <= curve.front().first) return curve.front().second;
  if (x >= curve.back().first) return curve.back().second;
  auto it = std::upper_bound(curve.begin(), curve.end(), x,
                             [](double v, const std::pair<double, double>& pt) { return v < pt.first; });
  const auto& hi = *it;
  const auto& lo = *(it - 1);
  return lo.second + (hi.second - lo.second) * (x - lo.first) / (hi.first - lo.first);
}

double CollectiveCostModel::time_of(Collective c, CollectiveAlgorithm a, Protocol p,
                                    double S, const cluster::GroupInfo& g,
                                    double simple_lat) const {
  const auto& P = params_;
  const double n = static_cast<double>(g.num_ranks);
  const double k = static_cast<double>(g.ranks_per_node);
  const double m = static_cast<double>(g.num_nodes);
  const bool multi_node = g.num_nodes > 1;
  const bool multi_local = g.ranks_per_node > 1;
  const double phi = p == Protocol::kLowLatency ? P.ll_bandwidth_fraction : 1.0;
  const double lat = P.base_latency_s + (p == Protocol::kSimple ? simple_lat : 0.0);
  const double eta_i = P.link[static_cast<std::size_t>(g.intra_class)].bandwidth_efficiency;
  const double eta_n = P.link[static_cast<std::size_t>(g.inter_class)].bandwidth_efficiency;
  // Effective bandwidths (bytes/s) after NCCL's protocol overheads; +inf where unused.
  const double bi = multi_local ? phi * eta_i * g.intra_ring_bandwidth.value() : kInf;
  const double bn = multi_node ? phi * eta_n * g.inter_ring_bandwidth.value() : kInf;
  const double b_ring = std::min(bi, bn);
  const double hop_i = P.hop_latency_s + g.intra_hop_latency.value();
  const double hop_n = P.hop_latency_s + g.inter_hop_latency.value();
  // NCCL's ring latency is 2(n-1) x the slowest hop (sjeaugey, nccl-tests issue #123).
  const double hop_ring = multi_node ? std::max(multi_local ? hop_i : 0.0, hop_n) : hop_i;

  switch (a) {
    case CollectiveAlgorithm::kRing:
      switch (c) {
        case Collective::kAllReduce:
          return lat + 2 * (n - 1) * hop_ring + xfer(2 * (n - 1) / n * S, b_ring);
        case Collective::kAllGather:
        case Collective::kReduceScatter:
          return lat + (n - 1) * hop_ring + xfer((n - 1) / n * S, b_ring);
        case Collective::kBroadcast:
          return lat + (n - 1) * hop_ring + xfer(S, b_ring);
        default: return kInf;
      }
    case CollectiveAlgorithm::kTree: {
      // NCCL tree (2.4+): a chain through the node's GPUs and a double binary tree across
      // nodes; latency grows with log2(nodes), each rank moves the whole buffer up and
      // down, so the bandwidth term has factor 2 (vs 2(n-1)/n for the ring).
      if (c != Collective::kAllReduce || !multi_node) return kInf;
      const double depth_lat = (k - 1) * hop_i + ceil_log2(g.num_nodes) * hop_n;
      return lat + 2 * depth_lat + xfer(2 * S, b_ring);
    }
    case CollectiveAlgorithm::kHierarchical: {
      if (c != Collective::kAllReduce || !multi_node || !multi_local) return kInf;
      // Reduce-scatter over k local ranks, all-reduce of S/k across m nodes on k parallel
      // rings (together the node's inter-node bandwidth), all-gather over k local ranks.
      const double intra = lat + (k - 1) * hop_i + xfer((k - 1) / k * S, bi);
      const double inter = lat + 2 * (m - 1) * hop_n + xfer(2 * (m - 1) / m * S, bn);
      return 2 * intra + inter;
    }
    case CollectiveAlgorithm::kNvls: {
      // NVLink SHARP: per GPU, multimem ld_reduce pulls its 1/n shard from every GPU
      // (S out, S/n in) and multimem st multicasts the result (S/n out, S in): S(1 + 1/n)
      // each way at nvls_efficiency of the GPU's NVLink bandwidth.
      if (c != Collective::kAllReduce || !g.nvls_capable || p != Protocol::kSimple) return kInf;
      return lat + 2 * hop_i +
             xfer(S * (1 + 1 / n), P.nvls_efficiency * g.intra_ring_bandwidth.value());
    }
    case CollectiveAlgorithm::kDirect: {
      if (c != Collective::kAllToAll || p != Protocol::kSimple) return kInf;
      // Every rank sends S/n to each peer at once: (k-1)/n of S over NVLink, (n-k)/n of S
      // over its share of the network; one message latency per peer.
      const double wire = std::max(multi_local ? g.intra_hop_latency.value() : 0.0,
                                   multi_node ? g.inter_hop_latency.value() : 0.0);
      const double t_intra = multi_local ? xfer((k - 1) / n * S, bi) : 0.0;
      const double t_inter =
          multi_node ? xfer((n - k) / n * S, eta_n * g.inter_rank_bandwidth.value()) : 0.0;
      return lat + (n - 1) * P.hop_latency_s + wire + std::max(t_intra, t_inter);
    }
    case CollectiveAlgorithm::kTwoDimHierarchical: {
      // Tutel (Hwang et al. 2023, Sec. 3.3): stride-copy chunks with the same local
      // destination together, all-to-all inside the node over NVLink, stride-copy chunks
      // with the same remote destination together, then all-to-all across nodes between
      // GPUs of equal local rank: (k-1) + (m-1) messages instead of n-1, each larger.
      if (c != Collective::kAllToAll || !multi_node || !multi_local || p != Protocol::kSimple ||
          P.local_copy_bytes_per_s <= 0) {
        return kInf;
      }
      const double copies = 2 * xfer(2 * S, P.local_copy_bytes_per_s);  // read + write, twice
      const double intra = lat + (k - 1) * P.hop_latency_s + g.intra_hop_latency.value() +
                           xfer((k - 1) / k * S, bi);
      const double inter = lat + (m - 1) * P.hop_latency_s + g.inter_hop_latency.value() +
                           xfer((m - 1) / m * S, eta_n * g.inter_rank_bandwidth.value());
      return copies + intra + inter;
    }
    case CollectiveAlgorithm::kPointToPoint: return kInf;
  }
  return kInf;
}

CollectiveEstimate CollectiveCostModel::best_of(Collective c, CollectiveAlgorithm a, double S,
                                                const cluster::GroupInfo& g,
                                                std::optional<Protocol> protocol,
                                                double simple_lat) const {
  CollectiveEstimate best;
  best.algorithm = a;
  double t = kInf;
  for (Protocol p : {Protocol::kLowLatency, Protocol::kSimple}) {
    if (protocol && *protocol != p) continue;
    const double tp = time_of(c, a, p, S, g, simple_lat);
    if (tp < t) {
      t = tp;
      best.protocol = p;
    }
  }
  best.time = core::Seconds(t);
  if (std::isfinite(t) && t > 0) {
    best.algo_bandwidth = core::BytesPerSecond(S / t);
    best.bus_bandwidth = core::BytesPerSecond(S / t * bus_factor(c, g.num_ranks));
  }
  return best;
}

CollectiveEstimate CollectiveCostModel::estimate_with(Collective c, CollectiveAlgorithm a,
                                                      core::Bytes bytes,
                                                      const cluster::GroupInfo& g,
                                                      std::optional<Protocol> protocol) const {
  const double S = static_cast<double>(bytes.value());
  return best_of(c, a, S, g, protocol, simple_latency_s(S));
}

CollectiveEstimate CollectiveCostModel::estimate(Collective c, core::Bytes bytes,
                                                 const cluster::GroupInfo& g) const {
  CollectiveEstimate best;
  if (g.num_ranks <= 1 || bytes.value() <= 0) {
    best.time = core::Seconds(0);
    return best;
  }
  best.time = core::Seconds(kInf);
  const double S = static_cast<double>(bytes.value());
  const double simple_lat = simple_latency_s(S);
  static constexpr CollectiveAlgorithm kAll[] = {
      CollectiveAlgorithm::kRing,   CollectiveAlgorithm::kTree,
      CollectiveAlgorithm::kHierarchical, CollectiveAlgorithm::kNvls,
      CollectiveAlgorithm::kDirect, CollectiveAlgorithm::kTwoDimHierarchical};
  for (CollectiveAlgorithm a : kAll) {
    CollectiveEstimate e = best_of(c, a, S, g, std::nullopt, simple_lat);
    if (e.time < best.time) best = e;  // strict: ties keep the earlier algorithm
  }
  return best;
}

CollectiveEstimate CollectiveCostModel::send_recv(core::Bytes bytes,
                                                  const cluster::PathInfo& path) const {
  CollectiveEstimate e;
  e.algorithm = CollectiveAlgorithm::kPointToPoint;
  e.protocol = Protocol::kSimple;
  const LinkClassParams& cls = params_.link[static_cast<std::size_t>(path.bottleneck_class)];
  const double eff = cls.p2p_efficiency > 0 ? cls.p2p_efficiency : cls.bandwidth_efficiency;
  const double S = static_cast<double>(bytes.value());
  const double t = params_.base_latency_s + params_.hop_latency_s + path.latency.value() +
                   xfer(S, eff * path.bandwidth.value());
  e.time = core::Seconds(t);
  if (t > 0 && std::isfinite(t)) {
    e.algo_bandwidth = core::BytesPerSecond(S / t);
    e.bus_bandwidth = e.algo_bandwidth;
  }
  return e;
}

}  // namespace alpasim::cost_model

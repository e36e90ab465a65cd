#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cluster/cluster_spec.h"
#include "core/json_reader.h"
#include "core/status.h"
#include "core/units.h"

namespace alpasim::cluster {

/// The kind of a physical link. Calibration fits one bandwidth efficiency and one per-hop
/// latency per class (cost_model/calibration.h).
enum class LinkClass : std::int8_t {
  kNvswitch = 0,  ///< GPU <-> NVSwitch (all NVLinks of a GPU, aggregated)
  kNvlink,        ///< direct GPU <-> GPU link: NVLink bundle (V100 hybrid cube-mesh, bridges)
                  ///< or AMD Infinity Fabric (xGMI) link
  kPcie,          ///< GPU/NIC <-> PCIe switch <-> CPU, and the CPU <-> CPU socket link
  kInfiniband,    ///< NIC <-> leaf <-> spine on an InfiniBand fabric
  kEthernet,      ///< ... on an Ethernet (TCP or RoCE) fabric
  kEfa,           ///< ... on AWS Elastic Fabric Adapter
};
/// Number of LinkClass values (for per-class arrays).
inline constexpr int kNumLinkClasses = 6;
/// "nvswitch", "nvlink", "pcie", "infiniband", "ethernet", "efa" (profile spelling).
const char* link_class_name(LinkClass c);
/// True for the three network classes (InfiniBand, Ethernet, EFA).
constexpr bool is_network(LinkClass c) { return static_cast<int>(c) >= 3; }

/// What a point-to-point transfer between two devices gets: the widest path of the
/// topology graph (maximum bottleneck bandwidth, then minimum latency), never routed
/// through a third GPU (NCCL does not forward p2p traffic through GPUs).
struct PathInfo {
  core::BytesPerSecond bandwidth{0};  ///< bottleneck bandwidth, per direction
  core::Seconds latency{0};           ///< sum of the link latencies on the path
  LinkClass bottleneck_class = LinkClass::kNvswitch;  ///< class of the bottleneck link
  std::int32_t hops = 0;              ///< links on the path
  bool inter_node = false;
};

/// Everything a collective cost query needs about a device group, derived once from the
/// graph so that each query is O(1) (cost_model/collective_cost.h). "Node" here means an
/// NVLink domain, as NCCL treats a multi-node NVLink clique: the node itself unless the
/// cluster's NVLink spans nodes (GB200 NVL72: the rack's trays in use, ClusterSpec::
/// nvlink_domain_nodes_in_use()); "intra-node" is NVLink, "inter-node" the NICs.
struct GroupInfo {
  std::int64_t num_ranks = 0;
  std::int64_t num_nodes = 0;       ///< NVLink domains the group spans
  std::int64_t ranks_per_node = 0;  ///< the most ranks the group has in one NVLink domain
  /// Sum of the ring channels packed over the group's links inside one node (the slowest
  /// node): what one rank can push to its ring successors concurrently. Zero when no node
  /// holds two ranks.
  core::BytesPerSecond intra_ring_bandwidth{0};
  LinkClass intra_class = LinkClass::kNvswitch;  ///< class of the intra-node ring's bottleneck
  core::Seconds intra_hop_latency{0};  ///< the slowest ring neighbour pair's wire latency
  /// Sum over inter-node ring channels (one per NIC the group's GPUs use on a node) of each
  /// channel's bandwidth after sharing every network and PCIe link with the other channels.
  /// Zero for a single-node group.
  core::BytesPerSecond inter_ring_bandwidth{0};
  std::int64_t inter_channels = 0;  ///< NICs per node the group's rings use
  /// Network bandwidth one rank gets when every rank sends off-node at once (all-to-all):
  /// its NIC shared by the ranks behind it, and leaf uplinks shared when oversubscribed.
  core::BytesPerSecond inter_rank_bandwidth{0};
  LinkClass inter_class = LinkClass::kInfiniband;  ///< bottleneck class of the network rings
  core::Seconds inter_hop_latency{0};  ///< GPU -> NIC -> network -> NIC -> GPU wire latency
  /// NVLink SHARP (NVLS) in-switch reduction is available to this group (NVSwitch of
  /// NVLink4 or later, group in one NVLink domain).
  bool nvls_capable = false;
  /// The group has the same number of ranks on every node it spans.
  bool uniform = true;
};

/// The physical topology of a cluster as a Boost.Graph graph (kept inside topology.cc):
/// GPUs, NVSwitches or NVLink bundles, PCIe switches and CPU sockets, NICs, leaf and spine
/// switches, each link with a per-direction bandwidth and a latency. Immutable after build;
/// copies share the graph. Thread-safe.
class Topology {
 public:
  /// Builds the graph of `spec` (docs/cluster.md describes the shapes). Fails when the spec
  /// cannot be drawn (e.g. a hybrid cube-mesh node without 8 GPUs).
  static core::Result<Topology> build(const ClusterSpec& spec);

  const ClusterSpec& spec() const;
  std::int64_t num_devices() const;
  /// Node of global device id `device` (ids are node-major: node * gpus_per_node + local).
  std::int64_t node_of(std::int64_t device) const;
  /// NVLink domain of `device`: node_of(device) unless NVLink spans nodes. Two devices of
  /// one domain talk over NVLink; of two domains, over the network.
  std::int64_t domain_of(std::int64_t device) const;
  std::int64_t num_vertices() const;
  /// Directed links (each physical link is two, one per direction).
  std::int64_t num_links() const;

  /// Point-to-point path from `src` to `dst` (distinct, valid ids). O(1): intra-node paths
  /// and GPU-to-NIC paths are tabulated at build time; the network part is a tree walk.
  PathInfo point_to_point(std::int64_t src, std::int64_t dst) const;

  /// Derives the collective view of a device group (ids distinct, in range, at least 1).
  /// Cost: one ring packing per distinct local GPU set (cached), one pass over the
  /// network links for multi-node groups.
  core::Result<GroupInfo> group(std::span<const std::int64_t> devices) const;

  /// GroupInfos of device groups that run collectives at the same time (e.g. the rows of a
  /// logical mesh doing their all-reduces together): inter-node channels of all groups share
  /// every NIC, PCIe and network link they cross, and all-to-all shares count the ranks of
  /// all groups behind each NIC and leaf. Groups must be disjoint. Intra-node links are
  /// assumed not shared between groups (exact on NVSwitch).
  core::Result<std::vector<GroupInfo>> concurrent_groups(
      std::span<const std::vector<std::int64_t>> groups) const;

  /// The group of `nodes` whole consecutive nodes starting at node 0, `gpus_per_node`
  /// GPUs (local ids 0..gpus_per_node-1) on each: the shape of a submesh.
  core::Result<GroupInfo> submesh_group(std::int64_t nodes, std::int64_t gpus_per_node) const;

  /// Vertices and links as JSON (for --dump-cluster and tests), in build order.
  core::Json to_json() const;

  struct Impl;

 private:
  explicit Topology(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace alpasim::cluster

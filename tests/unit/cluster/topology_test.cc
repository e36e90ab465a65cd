#include "cluster/topology.h"

#include <doctest/doctest.h>

namespace alpasim::cluster {
namespace {

constexpr double kRel = 1e-9;  // closed-form expectations; only rounding separates them

Topology preset(const std::string& name, std::int64_t nodes) {
  return Topology::build(make_preset_cluster(name, nodes).value()).value();
}

double gbs(core::BytesPerSecond bw) { return core::to_gbyte_per_s(bw); }

TEST_CASE("NVSwitch node: every pair at the GPU's full NVLink bandwidth") {
  Topology t = preset("dgx-a100-80gb", 1);
  // GPU -> NVSwitch -> GPU: 300 GB/s per direction, two half-hops of latency_us/2 = 1 us.
  PathInfo p = t.point_to_point(0, 7);
  CHECK(gbs(p.bandwidth) == doctest::Approx(300).epsilon(kRel));
  CHECK(core::to_us(p.latency) == doctest::Approx(2.0).epsilon(kRel));
  CHECK(p.hops == 2);
  CHECK(p.bottleneck_class == LinkClass::kNvswitch);
  CHECK_FALSE(p.inter_node);
  // One ring through the crossbar uses each GPU's uplink once and downlink once, so it gets
  // the whole 300 GB/s and nothing is left for a second ring.
  const std::vector<std::int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  GroupInfo g = t.group(all).value();
  CHECK(g.num_ranks == 8);
  CHECK(g.num_nodes == 1);
  CHECK(gbs(g.intra_ring_bandwidth) == doctest::Approx(300).epsilon(kRel));
  CHECK(g.intra_class == LinkClass::kNvswitch);
  CHECK_FALSE(g.nvls_capable);  // A100's NVSwitch has no SHARP
  CHECK(preset("dgx-h100", 1).submesh_group(1, 8).value().nvls_capable);
}

TEST_CASE("GB200 NVL72: the rack's 72 GPUs are one NVLink domain, racks meet over InfiniBand") {
  Topology rack = preset("gb200-nvl72", 18);
  // Trays 0 and 17: GPU -> NVLink switch -> GPU at 900 GB/s, never through a NIC.
  PathInfo p = rack.point_to_point(0, 71);
  CHECK(gbs(p.bandwidth) == doctest::Approx(900).epsilon(kRel));
  CHECK(p.hops == 2);
  CHECK(p.bottleneck_class == LinkClass::kNvswitch);
  CHECK_FALSE(p.inter_node);
  CHECK(rack.node_of(71) == 17);
  CHECK(rack.domain_of(71) == 0);
  // All 72 GPUs: one ring through the switch at the full 900 GB/s, in-switch reduction
  // (NVLS) across the trays, no inter-node part.
  GroupInfo all = rack.submesh_group(18, 4).value();
  CHECK(all.num_ranks == 72);
  CHECK(all.num_nodes == 1);
  CHECK(all.ranks_per_node == 72);
  CHECK(gbs(all.intra_ring_bandwidth) == doctest::Approx(900).epsilon(kRel));
  CHECK(all.nvls_capable);
  CHECK(gbs(all.inter_ring_bandwidth) == 0);

  // 64 trays run as 4 domains of 16 (64 GPUs each). The 256 GPUs ring over every NIC of a
  // domain: 64 rails x 50 GB/s = 3,200 GB/s, one channel per GPU.
  Topology four = preset("gb200-nvl72", 64);
  CHECK(four.domain_of(63) == 0);
  CHECK(four.domain_of(64) == 1);
  CHECK(four.node_of(64) == 16);
  GroupInfo g = four.submesh_group(64, 4).value();
  CHECK(g.num_nodes == 4);
  CHECK(g.ranks_per_node == 64);
  CHECK_FALSE(g.nvls_capable);
  CHECK(g.inter_channels == 64);
  CHECK(gbs(g.inter_ring_bandwidth) == doctest::Approx(64 * 50).epsilon(kRel));
  CHECK(g.inter_class == LinkClass::kInfiniband);
  // Across domains a pair goes GPU -> PCIe -> its NIC -> rail leaf -> NIC -> PCIe -> GPU at
  // the NIC's 50 GB/s.
  PathInfo cross = four.point_to_point(0, 64);
  CHECK(cross.inter_node);
  CHECK(gbs(cross.bandwidth) == doctest::Approx(50).epsilon(kRel));
  CHECK(cross.bottleneck_class == LinkClass::kInfiniband);
  // The network is wired per tray and rail whatever the domains: 4 rails x 2 leaf groups
  // (32 trays per leaf).
  int leaves = 0, nvswitches = 0;
  const core::Json dump = four.to_json();
  for (const auto& v : dump["vertices"]) {
    leaves += v["kind"] == "leaf_switch";
    nvswitches += v["kind"] == "nvswitch";
    if (v["kind"] == "gpu") CHECK(v["node"].get<std::int64_t>() / 16 == v["nvlink_domain"].get<std::int64_t>());
  }
  CHECK(leaves == 8);
  CHECK(nvswitches == 4);
}

TEST_CASE("a one-node NVLink domain builds the graph of the node") {
  // The same DGX H100 pair of nodes with and without an explicit domain of one node: the
  // same vertices and links (and no "nvlink_domain" key).
  ClusterSpec spec = make_preset_cluster("dgx-h100", 2).value();
  spec.nvlink_domain_nodes = 1;
  CHECK(Topology::build(spec)->to_json() == preset("dgx-h100", 2).to_json());
  // GB200 trays with NVLink cut at the tray (as on 4-GPU partitions): two domains.
  ClusterSpec trays = make_preset_cluster("gb200-nvl72", 2).value();
  trays.nvlink_domain_nodes = 1;
  Topology t = Topology::build(trays).value();
  CHECK(t.point_to_point(0, 4).inter_node);
  CHECK(t.submesh_group(2, 4)->num_nodes == 2);
  CHECK_FALSE(preset("gb200-nvl72", 2).point_to_point(0, 4).inter_node);
}

TEST_CASE("V100 hybrid cube-mesh: NV1/NV2 pairs, PCIe pairs and six links per GPU") {
  Topology t = preset("aws-p3.16xlarge", 1);
  CHECK(gbs(t.point_to_point(0, 3).bandwidth) == doctest::Approx(50).epsilon(kRel));  // NV2
  CHECK(gbs(t.point_to_point(0, 1).bandwidth) == doctest::Approx(25).epsilon(kRel));  // NV1
  // GPU0 and GPU5 share no NVLink: GPU0 -> PCIe sw0 -> CPU0 -> CPU1 -> PCIe sw2 -> GPU5, at
  // the 16 GB/s PCIe bandwidth (GPUs never forward traffic, so no NVLink detour).
  PathInfo p = t.point_to_point(0, 5);
  CHECK(gbs(p.bandwidth) == doctest::Approx(16).epsilon(kRel));
  CHECK(p.bottleneck_class == LinkClass::kPcie);
  CHECK(p.hops == 5);
  // Ring packing over all 8 GPUs: the NV2 Hamiltonian cycle 0-3-2-1-5-6-7-4 in both
  // directions (2 x 50 GB/s) and the NV1 cycle 0-1-3-7-5-4-6-2 in both (2 x 25 GB/s):
  // 150 GB/s = 6 links x 25 GB/s, with no PCIe ring mixed in.
  GroupInfo g = t.submesh_group(1, 8).value();
  CHECK(gbs(g.intra_ring_bandwidth) == doctest::Approx(150).epsilon(kRel));
  CHECK(g.intra_class == LinkClass::kNvlink);
  // GPUs {0, 5}: no NVLink, so the pair rings over PCIe: 16 GB/s.
  const std::vector<std::int64_t> pair = {0, 5};
  CHECK(gbs(t.group(pair).value().intra_ring_bandwidth) == doctest::Approx(16).epsilon(kRel));
}

TEST_CASE("MI300X Infinity Fabric: a full mesh of one 64 GB/s link per GPU pair") {
  Topology t = preset("mi300x", 1);
  // Every pair: its one xGMI link, direct (GPUs never forward traffic).
  for (std::int64_t b = 1; b < 8; ++b) {
    PathInfo p = t.point_to_point(0, b);
    CHECK(gbs(p.bandwidth) == doctest::Approx(64).epsilon(kRel));
    CHECK(p.hops == 1);
    CHECK(p.bottleneck_class == LinkClass::kNvlink);
  }
  // All 8 GPUs: the greedy ring packing takes 6 link-disjoint directed Hamiltonian rings
  // (6 x 64 = 384 GB/s per GPU) and leaves one outgoing link per GPU (8 arcs with no ring
  // through them all). A 7th ring exists (the complete digraph on 8 vertices splits into 7,
  // Tillson 1980), so this is 6/7 of the links; the fitted link efficiency absorbs it. The
  // PCIe detour of a used link (also 64 GB/s) is never taken: rings stay on xGMI.
  GroupInfo g = t.submesh_group(1, 8).value();
  CHECK(gbs(g.intra_ring_bandwidth) == doctest::Approx(384).epsilon(kRel));
  CHECK(g.intra_class == LinkClass::kNvlink);
  CHECK_FALSE(g.nvls_capable);
  // A pair: its one link each way, a ring of 2 ranks: 64 GB/s. 4 GPUs: the complete digraph
  // on 4 vertices has no split into 3 Hamiltonian cycles (Tillson: none for 4 and 6), so 2
  // rings: 128 GB/s.
  const std::vector<std::int64_t> pair = {0, 1};
  CHECK(gbs(t.group(pair).value().intra_ring_bandwidth) == doctest::Approx(64).epsilon(kRel));
  CHECK(gbs(t.submesh_group(1, 4).value().intra_ring_bandwidth) == doctest::Approx(128).epsilon(kRel));
}

TEST_CASE("two DGX A100 nodes: eight rail channels of one HDR NIC each") {
  Topology t = preset("dgx-a100-80gb", 2);
  GroupInfo g = t.submesh_group(2, 8).value();
  CHECK(g.num_nodes == 2);
  CHECK(g.ranks_per_node == 8);
  CHECK(g.inter_channels == 8);
  // Each channel: GPU -> PCIe (32 GB/s) -> NIC -> rail leaf (200 Gb/s = 25 GB/s) -> NIC ->
  // PCIe -> GPU, no link shared between channels: 8 x 25 GB/s.
  CHECK(gbs(g.inter_ring_bandwidth) == doctest::Approx(200).epsilon(kRel));
  CHECK(is_network(g.inter_class));
  // All-to-all: one GPU per NIC, so each rank gets a whole NIC.
  CHECK(gbs(g.inter_rank_bandwidth) == doctest::Approx(25).epsilon(kRel));
  // p2p across nodes: GPU 0 -> NIC 0 -> rail-0 leaf -> NIC 0 -> GPU 8, bottleneck the NIC.
  PathInfo p = t.point_to_point(0, 8);
  CHECK(p.inter_node);
  CHECK(gbs(p.bandwidth) == doctest::Approx(25).epsilon(kRel));
  CHECK(p.bottleneck_class == LinkClass::kInfiniband);
  // 1 us (GPU->PCIe) + 1 us (PCIe->NIC) + 5 us (NIC->leaf->NIC) + 2 us back down.
  CHECK(core::to_us(p.latency) == doctest::Approx(9.0).epsilon(kRel));
}

TEST_CASE("an oversubscribed fat tree shares the leaf uplinks") {
  ClusterSpec spec = make_preset_cluster("dgx-a100-80gb", 8).value();
  spec.inter_node.topology = "fat_tree";
  spec.inter_node.oversubscription = 2;
  Topology t = Topology::build(spec).value();
  // 32 ports per leaf / 8 NICs = 4 nodes per leaf: 2 leaves; each leaf uplink carries
  // 4 x 8 x 25 GB/s / 2 = 400 GB/s. An 8-node ring crosses each uplink once per direction
  // with all 8 channels: 400 / 8 = 50 GB/s per channel > 25 GB/s NIC, so rings keep 200.
  GroupInfo ring = t.submesh_group(8, 8).value();
  CHECK(gbs(ring.inter_ring_bandwidth) == doctest::Approx(200).epsilon(kRel));
  // All-to-all: 32 ranks under each leaf share its 400 GB/s uplink: 12.5 GB/s per rank.
  CHECK(gbs(ring.inter_rank_bandwidth) == doctest::Approx(12.5).epsilon(kRel));
}

TEST_CASE("a PCIe node with one Ethernet NIC") {
  ClusterSpec spec = make_preset_cluster("dgx-a100-80gb", 2).value();
  spec.intra_node = {"pcie", 32, 32, 32, 2.0};
  spec.inter_node = {"ethernet", 1, 100, 10.0, "single_switch", 1};
  Topology t = Topology::build(spec).value();
  GroupInfo g = t.submesh_group(2, 8).value();
  // One channel through the only NIC: 100 Gb/s = 12.5 GB/s.
  CHECK(g.inter_channels == 1);
  CHECK(gbs(g.inter_ring_bandwidth) == doctest::Approx(12.5).epsilon(kRel));
  CHECK(g.inter_class == LinkClass::kEthernet);
  // The intra-node ring 0..7 over the PCIe tree: each switch uplink carries one flow each
  // way, so the ring gets the full 32 GB/s; the next ring would be left with nothing.
  CHECK(gbs(g.intra_ring_bandwidth) == doctest::Approx(32).epsilon(kRel));
  CHECK(g.intra_class == LinkClass::kPcie);
  // All 8 ranks of a node share its one NIC for all-to-all.
  CHECK(gbs(g.inter_rank_bandwidth) == doctest::Approx(12.5 / 8).epsilon(kRel));
}

TEST_CASE("16-GPU nodes use the greedy ring order, uneven groups are flagged") {
  // 16 GPUs on one NVSwitch: the greedy order (beyond 8 GPUs) still finds one ring through
  // the crossbar at the full 450 GB/s.
  ClusterSpec spec = make_preset_cluster("dgx-h100", 2).value();
  spec.gpus_per_node = 16;
  spec.inter_node.nics_per_node = 16;
  Topology t = Topology::build(spec).value();
  GroupInfo g = t.submesh_group(2, 16).value();
  CHECK(gbs(g.intra_ring_bandwidth) == doctest::Approx(450).epsilon(kRel));
  // 16 NICs of 50 GB/s, one per GPU: 16 channels.
  CHECK(g.inter_channels == 16);
  CHECK(gbs(g.inter_ring_bandwidth) == doctest::Approx(800).epsilon(kRel));
  // 3 GPUs on node 0 and 1 on node 1: uneven, the ring packing of node 0 decides.
  const std::vector<std::int64_t> uneven = {0, 1, 2, 16};
  GroupInfo u = t.group(uneven).value();
  CHECK_FALSE(u.uniform);
  CHECK(u.ranks_per_node == 3);
  CHECK(u.num_nodes == 2);
  CHECK(gbs(u.intra_ring_bandwidth) == doctest::Approx(450).epsilon(kRel));
}

TEST_CASE("concurrent data-parallel groups share the NICs their GPUs sit next to") {
  // 2 DGX A100 nodes. Alone, the group {0, 8} (local GPU 0 of each node) rings over both
  // NICs of its PCIe switch, but both channels cross GPU 0's own 32 GB/s PCIe link: 2 x 16
  // = 32 GB/s. With {1, 9} running at the same time, GPUs 0 and 1 share that switch's two
  // NICs: 4 channels over 2 NICs, 12.5 GB/s each, so each group gets 25 GB/s. The 8 groups
  // of an 8-wide data-parallel mesh get 25 GB/s each.
  Topology t = preset("dgx-a100-80gb", 2);
  const std::vector<std::int64_t> g0 = {0, 8};
  CHECK(gbs(t.group(g0).value().inter_ring_bandwidth) == doctest::Approx(32).epsilon(kRel));
  std::vector<std::vector<std::int64_t>> dp;
  for (std::int64_t l = 0; l < 8; ++l) dp.push_back({l, 8 + l});
  std::vector<GroupInfo> infos = t.concurrent_groups(dp).value();
  REQUIRE(infos.size() == 8);
  for (const GroupInfo& info : infos) {
    CHECK(gbs(info.inter_ring_bandwidth) == doctest::Approx(25).epsilon(kRel));
    // All-to-all: each NIC is nearest to exactly one GPU: a whole 25 GB/s per rank.
    CHECK(gbs(info.inter_rank_bandwidth) == doctest::Approx(25).epsilon(kRel));
  }
  const std::vector<std::vector<std::int64_t>> overlap = {{0, 8}, {8, 1}};
  CHECK(t.concurrent_groups(overlap).status().message() ==
        "device id 8 is in two concurrent groups");
}

TEST_CASE("bad groups and clusters give exact errors") {
  Topology t = preset("dgx-h100", 1);
  const std::vector<std::int64_t> out = {0, 8};
  CHECK(t.group(out).status().message() == "device id 8 is outside [0, 8)");
  const std::vector<std::int64_t> twice = {1, 1};
  CHECK(t.group(twice).status().message() == "device id 1 appears twice in a group");
  CHECK(t.submesh_group(2, 8).status().message() ==
        "submesh 2 x 8 does not fit a cluster of 1 x 8");
  ClusterSpec spec = make_preset_cluster("aws-p3.16xlarge", 1).value();
  spec.gpus_per_node = 16;
  CHECK(Topology::build(spec).status().message() ==
        "an NVLink hybrid cube-mesh node has at most 8 GPUs, got gpus_per_node = 16");
}

TEST_CASE("the graph dump lists every vertex and both directions of every link") {
  Topology t = preset("dgx-a100-80gb", 2);
  core::Json j = t.to_json();
  CHECK(static_cast<std::int64_t>(j["vertices"].size()) == t.num_vertices());
  CHECK(static_cast<std::int64_t>(j["links"].size()) == t.num_links());
  CHECK(t.num_links() % 2 == 0);
  CHECK(j["vertices"][0]["kind"] == "gpu");
}

}  // namespace
}  // namespace alpasim::cluster

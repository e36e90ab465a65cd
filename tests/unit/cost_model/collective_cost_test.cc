#include "cost_model/collective_cost.h"

#include <doctest/doctest.h>

#include <cmath>

namespace alpasim::cost_model {
namespace {

constexpr double kRel = 1e-9;
constexpr double kGiB = 1073741824.0;

// Unit efficiencies and no latencies unless a test sets them: times are pure bytes/bandwidth.
CollectiveParams ideal() {
  CollectiveParams p;
  p.ll_bandwidth_fraction = 0.5;
  p.nvls_efficiency = 0.5;
  for (auto& l : p.link) l = {1.0, 0.0};
  return p;
}

cluster::GroupInfo one_node(std::int64_t n, double ring_gbyte_per_s) {
  cluster::GroupInfo g;
  g.num_ranks = n;
  g.num_nodes = 1;
  g.ranks_per_node = n;
  g.intra_ring_bandwidth = core::gbyte_per_s(ring_gbyte_per_s);
  g.intra_class = cluster::LinkClass::kNvswitch;
  return g;
}

cluster::GroupInfo nodes(std::int64_t m, std::int64_t k, double intra, double inter,
                         double per_rank) {
  cluster::GroupInfo g = one_node(m * k, intra);
  g.num_nodes = m;
  g.ranks_per_node = k;
  g.inter_ring_bandwidth = core::gbyte_per_s(inter);
  g.inter_rank_bandwidth = core::gbyte_per_s(per_rank);
  g.inter_class = cluster::LinkClass::kInfiniband;
  g.inter_channels = 8;
  return g;
}

TEST_CASE("busbw factors follow nccl-tests") {
  CHECK(bus_factor(Collective::kAllReduce, 8) == doctest::Approx(1.75));
  CHECK(bus_factor(Collective::kAllGather, 8) == doctest::Approx(0.875));
  CHECK(bus_factor(Collective::kAllToAll, 4) == doctest::Approx(0.75));
  CHECK(bus_factor(Collective::kBroadcast, 8) == doctest::Approx(1.0));
}

TEST_CASE("ring all-reduce, all-gather and broadcast in closed form") {
  CollectiveCostModel m(ideal());
  cluster::GroupInfo g = one_node(8, 100);
  // All-reduce of 1 GiB over 8 GPUs at 100 GB/s: 2 (n-1)/n S / B; busbw is then B.
  CollectiveEstimate ar = m.estimate(Collective::kAllReduce, core::gib(1), g);
  CHECK(ar.time.value() == doctest::Approx(2.0 * 7 / 8 * kGiB / 100e9).epsilon(kRel));
  CHECK(ar.algorithm == CollectiveAlgorithm::kRing);
  CHECK(ar.protocol == Protocol::kSimple);
  CHECK(core::to_gbyte_per_s(ar.bus_bandwidth) == doctest::Approx(100).epsilon(kRel));
  CHECK(m.estimate(Collective::kAllGather, core::gib(1), g).time.value() ==
        doctest::Approx(7.0 / 8 * kGiB / 100e9).epsilon(kRel));
  CHECK(m.estimate(Collective::kBroadcast, core::gib(1), g).time.value() ==
        doctest::Approx(kGiB / 100e9).epsilon(kRel));
  // One rank or nothing to send: free.
  CHECK(m.estimate(Collective::kAllReduce, core::gib(1), one_node(1, 100)).time.value() == 0);
}

TEST_CASE("latency terms and the LL / Simple choice") {
  CollectiveParams p = ideal();
  p.base_latency_s = 5e-6;
  p.hop_latency_s = 1e-6;
  p.simple_latency_s = 50e-6;
  CollectiveCostModel m(p);
  cluster::GroupInfo g = one_node(8, 100);
  g.intra_hop_latency = core::Seconds(1e-6);
  // 1 KiB: LL = 5 + 14 * (1 + 1) us + 1.75 KiB / (0.5 * 100 GB/s); Simple pays 50 us more.
  CollectiveEstimate small = m.estimate(Collective::kAllReduce, core::kib(1), g);
  CHECK(small.protocol == Protocol::kLowLatency);
  CHECK(small.time.value() ==
        doctest::Approx(5e-6 + 14 * 2e-6 + 1.75 * 1024 / 50e9).epsilon(kRel));
  // 1 GiB: the bandwidth halving of LL costs far more than 50 us.
  CHECK(m.estimate(Collective::kAllReduce, core::gib(1), g).protocol == Protocol::kSimple);
}

TEST_CASE("NVLS all-reduce moves S (1 + 1/n) per GPU at nvls_efficiency") {
  CollectiveCostModel m(ideal());
  cluster::GroupInfo g = one_node(8, 450);
  g.nvls_capable = true;
  CollectiveEstimate nvls = m.estimate_with(Collective::kAllReduce, CollectiveAlgorithm::kNvls,
                                            core::gib(1), g);
  CHECK(nvls.time.value() == doctest::Approx(kGiB * 9 / 8 / (0.5 * 450e9)).epsilon(kRel));
  // Ring: 1.75 S / 450 GB/s; NVLS: 1.125 S / 225 GB/s = 2.25 S / 450: the ring wins here.
  CHECK(m.estimate(Collective::kAllReduce, core::gib(1), g).algorithm == CollectiveAlgorithm::kRing);
  g.nvls_capable = false;
  CHECK(std::isinf(m.estimate_with(Collective::kAllReduce, CollectiveAlgorithm::kNvls,
                                   core::gib(1), g).time.value()));
}

TEST_CASE("across nodes: the ring is bounded by the network, hierarchical adds phases") {
  CollectiveCostModel m(ideal());
  // 2 nodes x 8 GPUs, 300 GB/s NVLink ring, 200 GB/s of NICs per node.
  cluster::GroupInfo g = nodes(2, 8, 300, 200, 25);
  const double n = 16;
  CollectiveEstimate ring =
      m.estimate_with(Collective::kAllReduce, CollectiveAlgorithm::kRing, core::gib(1), g);
  CHECK(ring.time.value() == doctest::Approx(2 * (n - 1) / n * kGiB / 200e9).epsilon(kRel));
  // Hierarchical: RS + AG over 8 local ranks at 300 GB/s, all-reduce over 2 nodes at 200.
  CollectiveEstimate hier = m.estimate_with(Collective::kAllReduce,
                                            CollectiveAlgorithm::kHierarchical, core::gib(1), g);
  CHECK(hier.time.value() ==
        doctest::Approx(2 * (7.0 / 8) * kGiB / 300e9 + kGiB / 200e9).epsilon(kRel));
  // Tree: 2 S / min(B) = 2 S / 200 GB/s.
  CHECK(m.estimate_with(Collective::kAllReduce, CollectiveAlgorithm::kTree, core::gib(1), g)
            .time.value() == doctest::Approx(2 * kGiB / 200e9).epsilon(kRel));
  CHECK(m.estimate(Collective::kAllReduce, core::gib(1), g).algorithm == CollectiveAlgorithm::kRing);
}

TEST_CASE("all-to-all: direct vs Tutel's 2D-hierarchical") {
  CollectiveParams p = ideal();
  p.base_latency_s = 5e-6;
  p.hop_latency_s = 2e-6;
  p.local_copy_bytes_per_s = 1e12;
  CollectiveCostModel m(p);
  cluster::GroupInfo g = nodes(16, 8, 300, 200, 25);  // 128 ranks
  const double n = 128, k = 8, mm = 16;
  // Direct, 1 MiB: 127 peer latencies; inter part (n - k)/n S at 25 GB/s per rank.
  const double S = 1048576;
  const double direct = 5e-6 + 127 * 2e-6 + std::max((k - 1) / n * S / 300e9, (n - k) / n * S / 25e9);
  CHECK(m.estimate_with(Collective::kAllToAll, CollectiveAlgorithm::kDirect, core::mib(1), g)
            .time.value() == doctest::Approx(direct).epsilon(kRel));
  // 2DH: 2 stride copies (read + write S each) + intra a2a (7 peers) + inter a2a (15 peers).
  const double twodh = 2 * (2 * S / 1e12) + (5e-6 + 7 * 2e-6 + (k - 1) / k * S / 300e9) +
                       (5e-6 + 15 * 2e-6 + (mm - 1) / mm * S / 25e9);
  CHECK(m.estimate_with(Collective::kAllToAll, CollectiveAlgorithm::kTwoDimHierarchical,
                        core::mib(1), g).time.value() == doctest::Approx(twodh).epsilon(kRel));
  // Small messages over many ranks: 2DH wins (fewer, larger messages, Tutel Sec. 3.3).
  CHECK(m.estimate(Collective::kAllToAll, core::mib(1), g).algorithm ==
        CollectiveAlgorithm::kTwoDimHierarchical);
  // 1 GiB: both are bandwidth-bound; 2DH's extra intra phase and copies make direct win.
  CHECK(m.estimate(Collective::kAllToAll, core::gib(1), g).algorithm == CollectiveAlgorithm::kDirect);
}

TEST_CASE("send/recv over a path uses the p2p efficiency of its bottleneck class") {
  CollectiveParams p = ideal();
  p.base_latency_s = 5e-6;
  p.link[static_cast<std::size_t>(cluster::LinkClass::kInfiniband)] = {0.9, 0.8};
  CollectiveCostModel m(p);
  cluster::PathInfo path;
  path.bandwidth = core::gbyte_per_s(25);
  path.latency = core::Seconds(9e-6);
  path.bottleneck_class = cluster::LinkClass::kInfiniband;
  CHECK(m.send_recv(core::gib(1), path).time.value() ==
        doctest::Approx(5e-6 + 9e-6 + kGiB / (0.8 * 25e9)).epsilon(kRel));
}

}  // namespace
}  // namespace alpasim::cost_model

namespace alpasim::cost_model {
namespace {

TEST_CASE("the Simple latency curve is piecewise linear in log2(bytes), flat outside") {
  CollectiveParams p = ideal();
  p.simple_latency_s = 99e-6;  // ignored once a curve exists
  p.simple_latency_curve = {{20.0, 10e-6}, {30.0, 110e-6}};
  CollectiveCostModel m(p);
  CHECK(m.simple_latency_s(1 << 10) == doctest::Approx(10e-6));  // below: first point
  CHECK(m.simple_latency_s(1 << 25) == doctest::Approx(60e-6));  // halfway in log2
  CHECK(m.simple_latency_s(static_cast<double>(std::int64_t{1} << 40)) == doctest::Approx(110e-6));
  // It enters the Simple time: 1 GiB ring all-reduce at 100 GB/s plus 110 us.
  cluster::GroupInfo g = one_node(8, 100);
  CHECK(m.estimate(Collective::kAllReduce, core::gib(1), g).time.value() ==
        doctest::Approx(110e-6 + 2.0 * 7 / 8 * kGiB / 100e9).epsilon(kRel));
  p.simple_latency_curve.clear();
  CHECK(CollectiveCostModel(p).simple_latency_s(1 << 25) == doctest::Approx(99e-6));
}

}  // namespace
}  // namespace alpasim::cost_model

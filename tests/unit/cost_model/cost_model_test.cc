#include "cost_model/cost_model.h"

#include <doctest/doctest.h>

namespace alpasim::cost_model {
namespace {

TEST_CASE("the facade prices a 2-node DGX A100 with the shipped calibration") {
  auto shipped = calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles").value();
  auto spec = cluster::make_preset_cluster("dgx-a100-80gb", 2).value();
  CostModel cm = CostModel::create(spec, params_for_preset(shipped, spec.preset).value()).value();
  // Group ids in any order hit the same cache entry and equal the topology's own answer.
  const std::vector<std::int64_t> ids = {15, 3, 8, 0};
  const std::vector<std::int64_t> sorted = {0, 3, 8, 15};
  cluster::GroupInfo a = cm.group(ids).value();
  cluster::GroupInfo b = cm.topology().group(sorted).value();
  CHECK(a.num_nodes == 2);
  CHECK(a.intra_ring_bandwidth == b.intra_ring_bandwidth);
  CHECK(a.inter_ring_bandwidth == b.inter_ring_bandwidth);
  // The facade's collective equals the collective model on that group.
  CHECK(cm.collective(Collective::kAllReduce, core::mib(64), a).time ==
        cm.collectives().estimate(Collective::kAllReduce, core::mib(64), b).time);
  // send/recv across nodes: 1 GiB over one 25 GB/s NIC at the fitted IB efficiency 0.96
  // (p2p efficiency not fitted: the collective one applies) plus fixed latencies.
  const double eff = cm.params().collective.link[3].bandwidth_efficiency;
  CollectiveEstimate p2p = cm.send_recv(core::gib(1), 0, 8);
  CHECK(p2p.time.value() > 1073741824.0 / (eff * 25e9));
  CHECK(p2p.time.value() < 1073741824.0 / (eff * 25e9) + 100e-6);
  CHECK(cm.group(std::vector<std::int64_t>{0, 16}).status().message() ==
        "device id 16 is outside [0, 16)");
}

}  // namespace
}  // namespace alpasim::cost_model

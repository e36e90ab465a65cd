#include "cost_model/cost_model.h"
#include "cost_model/validated_error.h"

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

TEST_CASE("dgx-h800 is DGX H100 with NVLink at 200 GB/s per direction, priced by the H100 calibration") {
  auto shipped = calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles").value();
  auto h800 = cluster::make_preset_cluster("dgx-h800", 1).value();
  auto h100 = cluster::make_preset_cluster("dgx-h100", 1).value();
  CHECK(h800.gpu.name == "h800-sxm");
  CHECK(h800.gpu.peak(core::DType::kBf16) == h100.gpu.peak(core::DType::kBf16));
  CHECK(h800.intra_node.gpu_bandwidth_gbyte_per_s == 200);
  CHECK(h800.inter_node.nic_bandwidth_gbit_per_s == h100.inter_node.nic_bandwidth_gbit_per_s);
  const CalibratedParams p800 = params_for_preset(shipped, "dgx-h800").value();
  const CalibratedParams p100 = params_for_preset(shipped, "dgx-h100").value();
  CHECK(p800.collective.link[0].bandwidth_efficiency == p100.collective.link[0].bandwidth_efficiency);
  CostModel m800 = CostModel::create(h800, p800).value();
  CostModel m100 = CostModel::create(h100, p100).value();
  const std::vector<std::int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  // A bandwidth-bound 8-GPU all-reduce (4 GiB) slows by about the NVLink ratio 450/200;
  // latency and NVLS details keep it from being exact.
  const double t800 = m800.collective(Collective::kAllReduce, core::gib(4), m800.group(all).value()).time.value();
  const double t100 = m100.collective(Collective::kAllReduce, core::gib(4), m100.group(all).value()).time.value();
  CHECK(t800 / t100 > 1.8);
  CHECK(t800 / t100 < 2.6);
}

TEST_CASE("validated error: a measured band per GPU and precision, else the largest one, marked not validated") {
  const ValidatedError a100 = validated_error("a100-80gb", core::DType::kFp16);
  CHECK(a100.validated);
  CHECK(a100.relative_error == 0.098);
  CHECK(validated_error("h200-sxm", core::DType::kFp8).relative_error ==
        validated_error("h100-sxm", core::DType::kFp8).relative_error);
  // Block-scaled GEMMs never take the 16-bit band, though their tensors are bf16.
  CHECK(validated_error("gb200", core::DType::kBf16, "nvfp4").source.find("nvfp4") != std::string::npos);
  // No published V100 run: the largest band of all, named, and not validated.
  const ValidatedError v100 = validated_error("v100-16gb", core::DType::kFp16);
  CHECK_FALSE(v100.validated);
  ValidatedError largest;
  for (const char* gpu : {"a100-80gb", "h100-sxm", "b200", "gb200", "gb300"}) {
    for (const char* scaled : {"", "mxfp8", "nvfp4"}) {
      for (core::DType d : {core::DType::kBf16, core::DType::kFp8}) {
        const ValidatedError e = validated_error(gpu, d, scaled);
        if (e.validated && e.relative_error > largest.relative_error) largest = e;
      }
    }
  }
  CHECK(v100.relative_error == largest.relative_error);
  CHECK(v100.source == "no published run on this GPU and dtype was compared: the largest validated error "
                       "as the band (" + largest.source + ")");
}

}  // namespace
}  // namespace alpasim::cost_model

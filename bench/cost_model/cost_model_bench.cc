// Cost-query latency (issue target: one GEMM or one collective query under 1 us on average,
// because the planner asks millions). Run: build/bench/cost_model_bench
#include <benchmark/benchmark.h>

#include <vector>

#include "cluster/topology.h"
#include "cost_model/calibration.h"

namespace alpasim::cost_model {
namespace {

const std::map<std::string, Calibration>& shipped() {
  static const auto s = calibrate_shipped_profiles(ALPASIM_SOURCE_DIR "/profiles").value();
  return s;
}

std::vector<GemmShape> shapes() {
  std::vector<GemmShape> out;
  for (std::int64_t m : {128, 512, 2048, 8192}) {
    for (std::int64_t n : {256, 1024, 4096, 12288}) {
      for (std::int64_t k : {512, 2048, 8192, 49152}) {
        out.push_back({m, n, k, 1, core::DType::kBf16});
      }
    }
  }
  return out;
}

// The model path (outside any table): efficiency curve + roofline bound.
void BM_GemmQueryModel(benchmark::State& state) {
  ComputeCostModel model(*cluster::find_gpu_spec("a100-80gb"),
                         shipped().at("dgx-a100-80gb").params.compute);
  const auto qs = shapes();
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.gemm(qs[i]));
    i = (i + 1) % qs.size();
  }
}
BENCHMARK(BM_GemmQueryModel);

// The table path: a 8 x 8 x 8 measured grid, queries interpolated inside it.
void BM_GemmQueryInterpolated(benchmark::State& state) {
  std::vector<schema::GemmEntry> table;
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) {
      for (int c = 0; c < 8; ++c) {
        schema::GemmEntry e;
        e.m = std::int64_t{128} << a;
        e.n = std::int64_t{128} << b;
        e.k = std::int64_t{128} << c;
        e.dtype = core::DType::kBf16;
        e.time_us = 2.0 * static_cast<double>(e.m * e.n) * static_cast<double>(e.k) / 250e12 * 1e6;
        table.push_back(e);
      }
    }
  }
  ComputeCostModel model(*cluster::find_gpu_spec("a100-80gb"),
                         shipped().at("dgx-a100-80gb").params.compute, table);
  std::vector<GemmShape> qs;
  for (std::int64_t m : {200, 1000, 3000, 9000}) {
    for (std::int64_t n : {300, 1500, 5000}) {
      for (std::int64_t k : {700, 2500, 7000}) qs.push_back({m, n, k, 1, core::DType::kBf16});
    }
  }
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.gemm(qs[i]));
    i = (i + 1) % qs.size();
  }
}
BENCHMARK(BM_GemmQueryInterpolated);

// One collective query on a precomputed group (2 x 8 A100, all algorithms compared).
void BM_CollectiveQuery(benchmark::State& state) {
  auto spec = cluster::make_preset_cluster("dgx-a100-80gb", 2).value();
  auto topo = cluster::Topology::build(spec).value();
  const cluster::GroupInfo group = topo.submesh_group(2, 8).value();
  CollectiveParams params = shipped().at("dgx-a100-80gb").params.collective;
  params.local_copy_bytes_per_s = 1.7e12;
  CollectiveCostModel model(params);
  const Collective kinds[] = {Collective::kAllReduce, Collective::kAllGather,
                              Collective::kReduceScatter, Collective::kAllToAll};
  std::size_t i = 0;
  for (auto _ : state) {
    const core::Bytes bytes(std::int64_t{1} << (10 + i % 24));
    benchmark::DoNotOptimize(model.estimate(kinds[i % 4], bytes, group));
    ++i;
  }
}
BENCHMARK(BM_CollectiveQuery);

// Deriving a group from the graph (done once per device group, not per query).
void BM_GroupFromGraph(benchmark::State& state) {
  auto spec = cluster::make_preset_cluster("dgx-a100-80gb", 16).value();
  auto topo = cluster::Topology::build(spec).value();
  for (auto _ : state) benchmark::DoNotOptimize(topo.submesh_group(16, 8));
}
BENCHMARK(BM_GroupFromGraph);

// Building the graph and its node tables for a 512-node (4096-GPU) DGX H100 cluster.
void BM_BuildTopology512Nodes(benchmark::State& state) {
  auto spec = cluster::make_preset_cluster("dgx-h100", 512).value();
  for (auto _ : state) benchmark::DoNotOptimize(cluster::Topology::build(spec));
}
BENCHMARK(BM_BuildTopology512Nodes)->Unit(benchmark::kMillisecond);

// A 512-node data-parallel group (one GPU per node) on a 2:1 oversubscribed fat tree.
void BM_GroupAcross512Nodes(benchmark::State& state) {
  auto spec = cluster::make_preset_cluster("dgx-h100", 512).value();
  spec.inter_node.topology = "fat_tree";
  spec.inter_node.oversubscription = 2;
  auto topo = cluster::Topology::build(spec).value();
  std::vector<std::int64_t> ids;
  for (std::int64_t n = 0; n < 512; ++n) ids.push_back(n * 8);
  for (auto _ : state) benchmark::DoNotOptimize(topo.group(ids));
}
BENCHMARK(BM_GroupAcross512Nodes)->Unit(benchmark::kMillisecond);

void BM_PointToPoint(benchmark::State& state) {
  auto spec = cluster::make_preset_cluster("dgx-h100", 16).value();
  auto topo = cluster::Topology::build(spec).value();
  std::int64_t i = 0;
  for (auto _ : state) {
    const std::int64_t src = i % 128;
    const std::int64_t dst = (src + 1 + (i * 37) % 127) % 128;  // never src
    benchmark::DoNotOptimize(topo.point_to_point(src, dst));
    ++i;
  }
}
BENCHMARK(BM_PointToPoint);

}  // namespace
}  // namespace alpasim::cost_model

#include "cost_model/compute_cost.h"

#include <doctest/doctest.h>

#include <cmath>

namespace alpasim::cost_model {
namespace {

constexpr double kRel = 1e-9;

cluster::GpuSpec a100() { return *cluster::find_gpu_spec("a100-80gb"); }

ComputeParams flat(double eff, double half_size_flops = 0) {
  ComputeParams p;
  for (auto& g : p.gemm) g = {eff, half_size_flops};
  p.hbm_efficiency = 0.5;
  p.kernel_overhead_s = 2e-6;
  return p;
}

TEST_CASE("roofline: compute-bound and memory-bound GEMMs") {
  ComputeCostModel m(a100(), flat(0.5));
  // 4096^3 bf16: 2*4096^3 = 1.374e11 FLOPs at 0.5 * 312 TFLOP/s.
  GemmShape big{4096, 4096, 4096, 1, core::DType::kBf16};
  const double flops = 2.0 * 4096 * 4096 * 4096;
  ComputeEstimate e = m.gemm(big);
  CHECK(e.source == ComputeSource::kModel);
  CHECK(e.time.value() == doctest::Approx(flops / (0.5 * 312e12)).epsilon(kRel));
  CHECK(core::to_tflops_per_s(e.achieved) == doctest::Approx(156).epsilon(kRel));
  // 8192 x 8192 x 1: 1.34e8 FLOPs (0.86 us of compute) but A, B, C = (8192 + 8192 +
  // 8192^2) * 2 bytes through HBM at 0.5 * 2039 GB/s: memory-bound.
  GemmShape thin{8192, 8192, 1, 1, core::DType::kBf16};
  const double bytes = (8192.0 + 8192.0 + 8192.0 * 8192.0) * 2;
  CHECK(m.gemm(thin).time.value() == doctest::Approx(bytes / (0.5 * 2039e9)).epsilon(kRel));
}

TEST_CASE("size-dependent efficiency: half the maximum at half_size_flops") {
  // 1024^3 = 2.147e9 FLOPs; with half_size_flops equal to it, efficiency = 0.8 / 2.
  const double x = 2.0 * 1024 * 1024 * 1024;
  ComputeCostModel m(a100(), flat(0.8, x));
  ComputeEstimate e = m.gemm({1024, 1024, 1024, 1, core::DType::kFp16});
  CHECK(core::to_tflops_per_s(e.achieved) == doctest::Approx(0.4 * 312).epsilon(kRel));
  // fp8 is unsupported on A100 (peak 0): falls back to the fp32 peak, never divides by 0.
  ComputeEstimate f8 = m.gemm({1024, 1024, 1024, 1, core::DType::kFp8});
  CHECK(core::to_tflops_per_s(f8.achieved) == doctest::Approx(0.4 * 19.5).epsilon(kRel));
}

TEST_CASE("profile rows: exact hits and log-space trilinear interpolation on a grid") {
  // A power law t = c * m * n * k is linear in log space, so trilinear interpolation of
  // log(time) reproduces it exactly between grid points.
  const double c = 1e-15;
  std::vector<schema::GemmEntry> table;
  for (std::int64_t mm : {1024, 4096}) {
    for (std::int64_t nn : {1024, 4096}) {
      for (std::int64_t kk : {1024, 4096}) {
        schema::GemmEntry e;
        e.m = mm;
        e.n = nn;
        e.k = kk;
        e.dtype = core::DType::kBf16;
        e.time_us = c * static_cast<double>(mm * nn * kk) * 1e6;
        table.push_back(e);
      }
    }
  }
  ComputeCostModel m(a100(), flat(0.5), table);
  ComputeEstimate hit = m.gemm({4096, 1024, 4096, 1, core::DType::kBf16});
  CHECK(hit.source == ComputeSource::kTable);
  CHECK(hit.time.value() == doctest::Approx(c * 4096.0 * 1024 * 4096).epsilon(kRel));
  ComputeEstimate mid = m.gemm({2048, 2048, 3000, 1, core::DType::kBf16});
  CHECK(mid.source == ComputeSource::kInterpolated);
  CHECK(mid.time.value() == doctest::Approx(c * 2048.0 * 2048 * 3000).epsilon(1e-9));
  // A batched GEMM runs like one with batch * m rows: 2 x 1024 rows = the 2048 query.
  CHECK(m.gemm({1024, 2048, 3000, 2, core::DType::kBf16}).time.value() ==
        doctest::Approx(mid.time.value()).epsilon(1e-12));
  // Outside the grid, or another dtype: the model.
  CHECK(m.gemm({8192, 2048, 2048, 1, core::DType::kBf16}).source == ComputeSource::kModel);
  CHECK(m.gemm({2048, 2048, 2048, 1, core::DType::kFp16}).source == ComputeSource::kModel);
}

TEST_CASE("convolutions run as their implicit GEMM times conv_slowdown") {
  // 32 x 64 x 56 x 56, 3x3 filter, stride 1, padding 1 -> 128 channels: output 56 x 56, so
  // m = 32 * 56 * 56, n = 128, k = 64 * 9.
  ConvShape conv{32, 64, 128, 56, 56, 3, 3, 1, 1, core::DType::kFp16};
  GemmShape g = conv_as_gemm(conv);
  CHECK(g.m == 32 * 56 * 56);
  CHECK(g.n == 128);
  CHECK(g.k == 64 * 9);
  ComputeParams p = flat(0.5);
  p.conv_slowdown = 1.5;
  ComputeCostModel m(a100(), p);
  CHECK(m.conv(conv).time.value() ==
        doctest::Approx(1.5 * m.gemm_model(g).time.value()).epsilon(kRel));
}

TEST_CASE("memory-bound operators: bytes over effective HBM bandwidth plus overhead") {
  ComputeCostModel m(a100(), flat(0.5));
  // 1 GiB at 0.5 * 2039 GB/s + 2 us.
  CHECK(m.memory_bound(core::gib(1)).value() ==
        doctest::Approx(1073741824.0 / (0.5 * 2039e9) + 2e-6).epsilon(kRel));
}

}  // namespace
}  // namespace alpasim::cost_model

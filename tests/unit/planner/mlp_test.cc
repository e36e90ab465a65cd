// The 2-layer MLP of issue 6: the optimum is the Megatron partition (column- then
// row-parallel) or data parallelism, whichever the costs favour. Every expected cost is
// derived below from the ring alpha-beta model (mesh.h):
//   all-reduce of S bytes over n devices: alpha + 2 (n-1)/n S / bw.
// MLP: x [B, H], W1 [H, F], W2 [F, H], fp16 (2 bytes), forward + backward + Adam update.
//  - Data parallel (batch split over n): the two weight gradients are all-reduced:
//      2 (alpha + 2 (n-1)/n * 2HF / bw).
//  - Megatron (W1 column-parallel, W2 row-parallel): the forward output y [B, H] is
//    all-reduced once; the backward needs no communication because dx of the first layer is
//    not computed (x is an input): alpha + 2 (n-1)/n * 2BH / bw.
// So Megatron wins when 2BH + alpha·bw/… < 2·2HF, i.e. roughly B < 2F.
#include <doctest/doctest.h>

#include <map>

#include "planner/intra_op/intra_op_pass.h"
#include "planner/intra_op/synthetic_graphs.h"

namespace alpasim::planner::intra_op {
namespace {

constexpr double kRel = 1e-9;
constexpr double kAlpha = 1e-6;  // seconds per collective
constexpr double kBw = 100e9;    // bytes per second

std::map<std::string, std::string> specs(const IntraOpPlan& plan) {
  std::map<std::string, std::string> out;
  for (const auto& s : plan.shardings) out[s.op] = s.output.to_string();
  return out;
}

IntraOpPlan plan_mlp(const MlpShape& shape, const LogicalMesh& mesh, double flops_per_s,
                     std::array<double, 2> bw, Algorithm alg = Algorithm::kAuto) {
  AlphaBetaCollectives ab;
  ab.mesh = mesh;
  ab.bandwidth = {core::BytesPerSecond(bw[0]), core::BytesPerSecond(bw[1])};
  ab.latency = {core::seconds(kAlpha), core::seconds(kAlpha)};
  IntraOpOptions o;
  o.algorithm = alg;
  o.weight_update_sharding = false;  // compare the ILP objective itself
  IntraOpPass pass;
  auto plan = pass.run(mlp_graph(shape), mesh, {ab, flops_per_s, {}}, o);
  ALPASIM_CHECK(plan.ok()) << plan.status().to_string();
  return plan.value();
}

TEST_CASE("MLP on 2x1 and 1x2 with a small batch: Megatron column- then row-parallel") {
  // B = 512, H = 256, F = 1024, n = 2:
  //   Megatron: alpha + 2*1/2 * (2*512*256 = 262144 B) / 1e11 = 1 us + 2.62 us = 3.62 us;
  //   data parallel: 2 * (alpha + 524288 / 1e11) = 2 * 6.24 us = 12.49 us.
  const MlpShape shape{512, 256, 1024, 2, 12};
  const double megatron = kAlpha + 262144.0 / kBw;
  for (int axis = 0; axis < 2; ++axis) {
    const LogicalMesh mesh = axis == 0 ? LogicalMesh{2, 1} : LogicalMesh{1, 2};
    CAPTURE(axis);
    for (Algorithm alg : {Algorithm::kDp, Algorithm::kIlp}) {
      const IntraOpPlan plan = plan_mlp(shape, mesh, 0.0, {kBw, kBw}, alg);
      CHECK(plan.proven_optimal);
      CHECK(plan.cost.value() == doctest::Approx(megatron).epsilon(kRel));
      auto s = specs(plan);
      const std::string a = std::to_string(axis);
      CHECK(s["w1"] == "RS" + a);    // column-parallel
      CHECK(s["fc1"] == "RS" + a);   // hidden activation split by columns
      CHECK(s["w2"] == "S" + a + "R");  // row-parallel
      CHECK(s["fc2"] == "RR");       // after the all-reduce
      CHECK(s["x"] == "RR");
    }
  }
}

TEST_CASE("MLP on 2x1 and 1x2 with a large batch: data parallel") {
  // B = 8192: Megatron would all-reduce 2*8192*256 = 4 MiB: 1 us + 41.9 us = 42.9 us, while
  // data parallelism all-reduces the two 512 KiB gradients: 2 * (1 us + 5.24 us) = 12.49 us.
  // (ZeRO-3-like plans, reduce-scatter + all-gather per weight, move the same bytes but pay
  // two latencies per weight: 2 * (2 us + 5.24 us) = 14.49 us.)
  const MlpShape shape{8192, 256, 1024, 2, 12};
  const double data_parallel = 2.0 * (kAlpha + 524288.0 / kBw);
  for (int axis = 0; axis < 2; ++axis) {
    const LogicalMesh mesh = axis == 0 ? LogicalMesh{2, 1} : LogicalMesh{1, 2};
    CAPTURE(axis);
    const IntraOpPlan plan = plan_mlp(shape, mesh, 0.0, {kBw, kBw});
    CHECK(plan.proven_optimal);
    CHECK(plan.cost.value() == doctest::Approx(data_parallel).epsilon(kRel));
    auto s = specs(plan);
    const std::string a = std::to_string(axis);
    // (x itself may stay replicated: slicing an input is free, so RR and S0R tie.)
    CHECK(s["fc1"] == "S" + a + "R");
    CHECK(s["fc2"] == "S" + a + "R");
    CHECK(s["w1"] == "RR");
    CHECK(s["w2"] == "RR");
    CHECK(s["fc1_dw"] == "RR");  // all-reduced gradient
  }
}

TEST_CASE("MLP on 2x2 with a slow axis 0: data parallel across it, Megatron inside axis 1") {
  // Axis 0 at 10 GB/s (between nodes), axis 1 at 100 GB/s (NVLink); B = 8192, H = 256,
  // F = 1024; compute charged at 1e13 FLOP/s so a plan that leaves an axis idle pays for
  // replicated work. Five matmuls of 2*B*H*F = 4.29 GFLOP each, 21.47 GFLOP in all:
  // 536.9 us on 4 devices, 1073.7 us on 2.
  //  - DP on axis 0 + Megatron on axis 1: y tile [B/2, H] all-reduced on axis 1
  //    (1 us + 2097152 B/1e11 = 21.97 us) and the two gradient tiles [F/2, H] (262144 B)
  //    all-reduced on axis 0 (2 * (1 us + 26.21 us) = 54.43 us): 76.40 us + 536.9 us.
  //  - DP over both axes (S01): 2 * (1 us + 1.5 * 524288 / 1e10) = 159.3 us + 536.9 us.
  //  - Megatron on axis 0 + DP on axis 1: 1 us + 209.7 us + 2 * (1 us + 2.6 us) = 218 us + ...
  //  - DP on axis 1 only, axis 0 idle: 12.5 us + 1073.7 us.
  const MlpShape shape{8192, 256, 1024, 2, 12};
  const double flops = 5.0 * 2.0 * 8192.0 * 256.0 * 1024.0;
  const double expected = (kAlpha + 2097152.0 / 100e9) + 2.0 * (kAlpha + 262144.0 / 10e9) +
                          flops / 4.0 / 1e13;
  for (Algorithm alg : {Algorithm::kDp, Algorithm::kIlp}) {
    const IntraOpPlan plan = plan_mlp(shape, {2, 2}, 1e13, {10e9, 100e9}, alg);
    CHECK(plan.proven_optimal);
    CHECK(plan.cost.value() == doctest::Approx(expected).epsilon(kRel));
    auto s = specs(plan);
    CHECK(s["w1"] == "RS1");
    CHECK(s["fc1"] == "S0S1");
    CHECK(s["w2"] == "S1R");
    CHECK(s["fc2"] == "S0R");
  }
}

}  // namespace
}  // namespace alpasim::planner::intra_op

#include "planner/intra_op/resharding.h"

#include <doctest/doctest.h>

namespace alpasim::planner::intra_op {
namespace {

using schema::ShardingSpec;

ShardingSpec spec(const char* text) { return ShardingSpec::parse(text).value(); }

constexpr double kRel = 1e-12;

TEST_CASE("alpha-beta collectives follow the ring formulas") {
  // 2x4 mesh, axis 0 at 10 GB/s and 5 us, axis 1 at 100 GB/s and 1 us.
  AlphaBetaCollectives ab;
  ab.mesh = {2, 4};
  ab.bandwidth = {core::gbyte_per_s(10.0), core::gbyte_per_s(100.0)};
  ab.latency = {core::microseconds(5.0), core::microseconds(1.0)};
  const core::Bytes mb = core::bytes(1'000'000);
  // all-reduce over axis 1 (n = 4): 1 us + 2 * 3/4 * 1e6 / 1e11 = 1 us + 15 us.
  CHECK(ab(Collective::kAllReduce, mb, kAxis1).value() == doctest::Approx(16e-6).epsilon(kRel));
  // all-gather over axis 0 (n = 2): 5 us + 1/2 * 1e6 / 1e10 = 55 us.
  CHECK(ab(Collective::kAllGather, mb, kAxis0).value() == doctest::Approx(55e-6).epsilon(kRel));
  // all-to-all over both (n = 8) at the slower axis: 5 us + 7/8 * 1e6 / 1e10 = 92.5 us.
  CHECK(ab(Collective::kAllToAll, mb, kBothAxes).value() ==
        doctest::Approx(92.5e-6).epsilon(kRel));
  // A group of one device costs nothing.
  AlphaBetaCollectives one;
  one.mesh = {1, 4};
  CHECK(one(Collective::kAllReduce, mb, kAxis0).value() == 0.0);
}

TEST_CASE("spec enumeration: (rank+1)^2 on a 2D mesh, only even splits") {
  const LogicalMesh m22{2, 2};
  // 2D tensor on 2x2: axis0 in {none, t0, t1} x axis1 in {none, t0, t1} = 9 specs, first RR.
  auto specs = enumerate_specs({4, 4}, m22);
  REQUIRE(specs.size() == 9);
  CHECK(specs[0].to_string() == "RR");
  CHECK(specs[4].to_string() == "S01R");  // both mesh axes on tensor axis 0
  // Dim 2 cannot hold S01 (needs 4 parts): the two S01 specs drop out.
  CHECK(enumerate_specs({2, 2}, m22).size() == 7);
  // On 1x4 only mesh axis 1 splits: R, S1 per axis -> 3 specs.
  CHECK(enumerate_specs({4, 4}, {1, 4}).size() == 3);
  // An unsplittable axis stays R.
  CHECK(enumerate_specs({4, 4}, {1, 4}, {false, true}).size() == 2);
}

TEST_CASE("resharding table (Alpa Table 2) with closed-form costs") {
  // Tensor 1024 x 1024 fp16 = 2 MiB on a 2x2 mesh, both axes 100 GB/s, no latency.
  const LogicalMesh mesh{2, 2};
  AlphaBetaCollectives ab;
  ab.mesh = mesh;
  const std::vector<std::int64_t> dims{1024, 1024};
  const double full = 1024.0 * 1024.0 * 2.0;
  auto cost = [&](const char* from, const char* to) {
    return reshard_cost(dims, 2, spec(from), spec(to), mesh, ab).value();
  };
  CHECK(cost("S0R", "S0R") == 0.0);                // same spec
  CHECK(cost("RR", "S0S1") == 0.0);                // #1 replicated -> sharded: local slice
  CHECK(cost("S0R", "S0S1") == 0.0);               // adding a split is a slice
  CHECK(cost("S0R", "S01R") == 0.0);               // S0 -> S01 keeps the major axis: slice
  // #2 S0R -> RR: all-gather over axis 0 of the full tensor: 1/2 * full / 1e11.
  CHECK(cost("S0R", "RR") == doctest::Approx(0.5 * full / 1e11).epsilon(kRel));
  // #3 S01R -> S0R: gather axis 1 to tiles of full/2: 1/2 * (full/2) / 1e11.
  CHECK(cost("S01R", "S0R") == doctest::Approx(0.25 * full / 1e11).epsilon(kRel));
  // #4 S0R -> RS0: all-to-all over axis 0 on the source tile full/2: 1/2 * full/2 / 1e11.
  CHECK(cost("S0R", "RS0") == doctest::Approx(0.25 * full / 1e11).epsilon(kRel));
  // S0S1 -> S1S0: both axes move: one all-to-all over the 4 devices on tiles of full/4.
  CHECK(cost("S0S1", "S1S0") == doctest::Approx(0.75 * (full / 4) / 1e11).epsilon(kRel));
  // S01R -> S10R: same tiles in another device order: all-gather over both + slice.
  CHECK(cost("S01R", "S10R") == doctest::Approx(0.75 * full / 1e11).epsilon(kRel));
  auto steps = reshard_steps(dims, 2, spec("S0S1"), spec("RS0"), mesh);
  // Axis 0 moves from tensor axis 0 to 1 (all-to-all); axis 1 is dropped (all-gather).
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].collective == Collective::kAllToAll);
  CHECK(steps[0].axes == kAxis0);
  CHECK(steps[1].collective == Collective::kAllGather);
  CHECK(steps[1].axes == kAxis1);
  CHECK(steps[1].bytes_per_device.value() == static_cast<std::int64_t>(full / 2));
}

}  // namespace
}  // namespace alpasim::planner::intra_op

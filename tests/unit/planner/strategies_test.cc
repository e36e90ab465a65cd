#include "planner/intra_op/strategies.h"

#include <doctest/doctest.h>

#include <algorithm>

namespace alpasim::planner::intra_op {
namespace {

constexpr double kRel = 1e-12;

const Strategy* find(const std::vector<Strategy>& all, const std::string& name) {
  auto it = std::find_if(all.begin(), all.end(), [&](const Strategy& s) { return s.name == name; });
  return it == all.end() ? nullptr : &*it;
}

CostHooks hooks_for(const LogicalMesh& mesh) {
  AlphaBetaCollectives ab;
  ab.mesh = mesh;
  ab.bandwidth = {core::gbyte_per_s(10.0), core::gbyte_per_s(100.0)};
  return {ab, 0.0};
}

TEST_CASE("batched matmul strategies follow Alpa Table 3") {
  // C[b,i,j] = sum_k A[b,i,k] B[b,k,j], every dim 4, fp16, on a 2x2 mesh.
  GraphBuilder g;
  const int a = g.input("a", {4, 4, 4});
  const int b = g.input("b", {4, 4, 4});
  const int c = g.einsum("c", "bik,bkj->bij", {a, b});
  const LogicalMesh mesh{2, 2};
  const auto all = enumerate_strategies(g.graph(), c, mesh, hooks_for(mesh));
  // #1: i on mesh axis 0, j on axis 1: no communication.
  const Strategy* s1 = find(all, "RS0R x RRS1 -> RS0S1");
  REQUIRE(s1 != nullptr);
  CHECK(s1->communication.value() == 0.0);
  CHECK(s1->memory.value() == 4 * 4 * 4 * 2 / 4);
  // #2: i on axis 0, k on axis 1: partial sums all-reduced over axis 1. Output tile
  // 4*2*4 elements * 2 bytes = 64 bytes; ring all-reduce over 2: 2 * 1/2 * 64 / 1e11.
  const Strategy* s2 = find(all, "RS0S1 x RS1R -> RS0R (all-reduce 1)");
  REQUIRE(s2 != nullptr);
  CHECK(s2->communication.value() == doctest::Approx(64.0 / 1e11).epsilon(kRel));
  CHECK(s2->all_reduce_axes == kAxis1);
  // ... or reduce-scattered onto j instead (half the traffic).
  const Strategy* s2rs = find(all, "RS0S1 x RS1R -> RS0S1 (reduce-scatter 1)");
  REQUIRE(s2rs != nullptr);
  CHECK(s2rs->communication.value() == doctest::Approx(32.0 / 1e11).epsilon(kRel));
  // #3: data parallel on both axes: b on S01.
  CHECK(find(all, "S01RR x S01RR -> S01RR") != nullptr);
  // 4 loops, each mesh axis on one loop or none: 25 maps; 9 of them split k and add one
  // reduce-scatter variant per still-whole output axis.
  CHECK(all.size() > 25);
}

TEST_CASE("embedding lookup is vocabulary-parallel with an all-reduce") {
  // out[b,s,h] = sum_v onehot(ids[b,s])[v] table[v,h]: v is a contraction absent from ids.
  GraphBuilder g;
  const int ids = g.input("ids", {8, 16}, 4);
  const int table = g.parameter("table", {1024, 64});
  const int out = g.einsum("embed", "bs,vh->bsh", {ids, table}, 2);
  const LogicalMesh mesh{1, 2};
  const auto all = enumerate_strategies(g.graph(), out, mesh, hooks_for(mesh));
  const Strategy* vocab = find(all, "RR x S1R -> RRR (all-reduce 1)");
  REQUIRE(vocab != nullptr);
  // Output 8*16*64 fp16 = 16384 bytes of partial sums, all-reduced over 2 devices at
  // 100 GB/s: 2 * 1/2 * 16384 / 1e11.
  CHECK(vocab->communication.value() == doctest::Approx(16384.0 / 1e11).epsilon(kRel));
}

TEST_CASE("MoE dispatch and combine have expert-parallel all-to-all strategies") {
  GraphBuilder g;
  const int weights = g.input("combine_weights", {4, 8, 4, 2});  // g, s, e, c
  const int tokens = g.input("tokens", {4, 8, 16});              // g, s, m
  const int dispatched = g.moe_dispatch("dispatch", weights, tokens);  // e, g, c, m
  const int expert_out = g.elementwise("expert", {dispatched});
  const int combined = g.moe_combine("combine", expert_out, weights);  // g, s, m
  const LogicalMesh mesh{1, 2};
  const auto d = enumerate_strategies(g.graph(), dispatched, mesh, hooks_for(mesh));
  const Strategy* ep = find(d, "S1RRR x S1RR -> S1RRR (expert-parallel all-to-all 1)");
  REQUIRE(ep != nullptr);
  // Output e*g*c*m = 4*4*2*16 = 512 elements * 2 bytes / 2 devices = 512 bytes per device;
  // all-to-all over 2 devices moves half of it: 1/2 * 512 / 1e11.
  CHECK(ep->communication.value() == doctest::Approx(256.0 / 1e11).epsilon(kRel));
  const auto c = enumerate_strategies(g.graph(), combined, mesh, hooks_for(mesh));
  const Strategy* ep2 = find(c, "S1RRR x S1RRR -> S1RR (expert-parallel all-to-all 1)");
  REQUIRE(ep2 != nullptr);
  CHECK(ep2->communication.value() == doctest::Approx(256.0 / 1e11).epsilon(kRel));
}

TEST_CASE("softmax split along its row costs an all-reduce of two fp32 stats per row") {
  GraphBuilder g;
  const int x = g.input("x", {8, 64});
  const int p = g.softmax("p", x, 1);
  const LogicalMesh mesh{1, 2};
  const auto all = enumerate_strategies(g.graph(), p, mesh, hooks_for(mesh));
  const Strategy* rows = find(all, "S1R -> S1R");
  REQUIRE(rows != nullptr);
  CHECK(rows->communication.value() == 0.0);
  // RS1: 8 rows per device, 8 bytes each = 64 bytes all-reduced over 2 devices.
  const Strategy* cols = find(all, "RS1 -> RS1 (all-reduce 1 of row statistics)");
  REQUIRE(cols != nullptr);
  CHECK(cols->communication.value() == doctest::Approx(64.0 / 1e11).epsilon(kRel));
}

TEST_CASE("elementwise ops follow their operands; broadcast operands stay replicated") {
  GraphBuilder g;
  const int x = g.input("x", {8, 64});
  const int bias = g.parameter("bias", {64});
  const int y = g.elementwise("add", {x, bias});
  const LogicalMesh mesh{2, 1};
  const auto all = enumerate_strategies(g.graph(), y, mesh, hooks_for(mesh));
  REQUIRE(all.size() == 3);  // RR, S0R, RS0
  CHECK(all[1].name == "S0R x R -> S0R");
  CHECK(all[2].name == "RS0 x S0 -> RS0");
  CHECK(all[2].memory.value() == 8 * 32 * 2);
}

}  // namespace
}  // namespace alpasim::planner::intra_op

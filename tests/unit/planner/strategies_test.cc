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
  return {ab, 0.0, {}};
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

TEST_CASE("a memory-bound operator pays for the work its layout adds to an even split") {
  // y = x + 1 over [8, 64] on a 2x2 mesh, reading and writing 4,096 bytes in all; the
  // memory-bound hook charges 1 ns per byte. Split over both axes: nothing beyond the even
  // split (1,024 bytes per device); over one axis: 2,048 - 1,024; replicated: 4,096 - 1,024.
  GraphBuilder g;
  const int x = g.input("x", {8, 64});
  const int y = g.elementwise("y", {x});
  IntraOpGraph graph = g.take();
  graph.nodes[static_cast<std::size_t>(y)].bytes_accessed = 4096;
  const LogicalMesh mesh{2, 2};
  CostHooks hooks = hooks_for(mesh);
  hooks.memory_bound = [](core::Bytes b) { return core::seconds(1e-9 * static_cast<double>(b.value())); };
  const auto all = enumerate_strategies(graph, y, mesh, hooks);
  int checked = 0;
  for (const Strategy& s : all) {
    const std::int64_t shards = s.output.num_shards(2, 2);
    const double expected = shards == 4 ? 0.0 : 1e-9 * (4096.0 / static_cast<double>(shards) - 1024.0);
    CHECK(s.compute.value() == doctest::Approx(expected).epsilon(kRel));
    CHECK(s.cost().value() == doctest::Approx(s.communication.value() + expected).epsilon(kRel));
    ++checked;
  }
  CHECK(checked == static_cast<int>(all.size()));
  // Replicated, one axis, both axes all appear.
  bool replicated = false, one_axis = false, both = false;
  for (const Strategy& s : all) {
    const std::int64_t shards = s.output.num_shards(2, 2);
    replicated = replicated || shards == 1;
    one_axis = one_axis || shards == 2;
    both = both || shards == 4;
  }
  CHECK((replicated && one_axis && both));
  // Without the hook (or without bytes) the same strategies cost no compute.
  for (const Strategy& s : enumerate_strategies(graph, y, mesh, hooks_for(mesh))) CHECK(s.compute.value() == 0.0);
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

TEST_CASE("MoE on a 2D mesh: data x expert parallelism, all-to-all within axis 1") {
  // Same shapes as above on a 2x2 mesh (axis 0 at 1e10 B/s, axis 1 at 1e11 B/s): groups
  // split over all 4 devices, experts over axis 1, the buffers keep g split over axis 0.
  GraphBuilder g;
  const int weights = g.input("combine_weights", {4, 8, 4, 2});  // g, s, e, c
  const int tokens = g.input("tokens", {4, 8, 16});              // g, s, m
  const int dispatched = g.moe_dispatch("dispatch", weights, tokens);  // e, g, c, m
  const int expert_out = g.elementwise("expert", {dispatched});
  const int combined = g.moe_combine("combine", expert_out, weights);  // g, s, m
  const LogicalMesh mesh{2, 2};
  const auto d = enumerate_strategies(g.graph(), dispatched, mesh, hooks_for(mesh));
  const Strategy* ep = find(d, "S01RRR x S01RR -> S1S0RR (expert-parallel all-to-all 1)");
  REQUIRE(ep != nullptr);
  // Buffer tile 512 elements · 2 B / 4 devices = 256 B; all-to-all over axis 1 (2 devices)
  // sends half: 128 / 1e11 s.
  CHECK(ep->communication.value() == doctest::Approx(128.0 / 1e11).epsilon(kRel));
  CHECK(ep->memory.value() == 256);
  CHECK(ep->parallel_devices == 4);
  // The 1D expert-parallel strategies leave an axis idle: dropped (compute not priced).
  CHECK(find(d, "S1RRR x S1RR -> S1RRR (expert-parallel all-to-all 1)") == nullptr);
  const auto c = enumerate_strategies(g.graph(), combined, mesh, hooks_for(mesh));
  const Strategy* ep2 = find(c, "S1S0RR x S01RRR -> S01RR (expert-parallel all-to-all 1)");
  REQUIRE(ep2 != nullptr);
  CHECK(ep2->communication.value() == doctest::Approx(128.0 / 1e11).epsilon(kRel));
}

TEST_CASE("MoE with fewer token groups than devices splits each group's tokens instead") {
  // 2 groups of 8 tokens, 4 experts on a 2x2 mesh: g splits over axis 0 only, s over axis
  // 1; the buffers [e,g,c,m] keep g on axis 0 and put e on axis 1. Buffer tile
  // 4·2·2·16 elements · 2 B / 4 = 128 B; all-to-all over axis 1 sends half: 64 / 1e11 s.
  GraphBuilder g;
  const int weights = g.input("combine_weights", {2, 8, 4, 2});  // g, s, e, c
  const int tokens = g.input("tokens", {2, 8, 16});              // g, s, m
  const int dispatched = g.moe_dispatch("dispatch", weights, tokens);
  const LogicalMesh mesh{2, 2};
  const auto d = enumerate_strategies(g.graph(), dispatched, mesh, hooks_for(mesh));
  const Strategy* ep = find(d, "S0S1RR x S0S1R -> S1S0RR (expert-parallel all-to-all 1)");
  REQUIRE(ep != nullptr);
  CHECK(ep->communication.value() == doctest::Approx(64.0 / 1e11).epsilon(kRel));
  CHECK(ep->parallel_devices == 4);
  // On a 1x4 mesh: 2 groups cannot split 4 ways, the 8 tokens of each group can.
  const LogicalMesh row{1, 4};
  const auto r = enumerate_strategies(g.graph(), dispatched, row, hooks_for(row));
  const Strategy* ep1 = find(r, "RS1RR x RS1R -> S1RRR (expert-parallel all-to-all 1)");
  REQUIRE(ep1 != nullptr);
  // Buffer 256 elements · 2 B / 4 = 128 B; all-to-all over 4 sends 3/4: 96 / 1e11 s.
  CHECK(ep1->communication.value() == doctest::Approx(96.0 / 1e11).epsilon(kRel));
}

TEST_CASE("MoE combine with the IR's operand order (weights first) is expert-parallel too") {
  // The model builders write combine as "xyec,exch->xyh": weights [g,s,e,c] first.
  GraphBuilder g;
  const int weights = g.input("combine_weights", {4, 8, 4, 2});  // g, s, e, c
  const int tokens = g.input("tokens", {4, 8, 16});              // g, s, m
  const int dispatched = g.moe_dispatch("dispatch", weights, tokens);
  const int expert_out = g.elementwise("expert", {dispatched});
  IntraOpGraph graph = g.take();
  IntraOpNode combine;
  combine.name = "combine";
  combine.kind = OpKind::kMoeCombine;
  combine.operands = {weights, expert_out};
  combine.operand_loops = {{0, 1, 2, 3}, {2, 0, 3, 4}};  // x y e c, e x c h
  combine.output_loops = {0, 1, 4};                       // x y h
  combine.shape = {4, 8, 16};
  graph.nodes.push_back(combine);
  REQUIRE(graph.validate().ok());
  const int c = static_cast<int>(graph.nodes.size()) - 1;
  const LogicalMesh mesh{1, 2};
  const auto all = enumerate_strategies(graph, c, mesh, hooks_for(mesh));
  // The buffer (operand 1) split by experts, the weights and output by groups; the
  // all-to-all moves the buffer tile: 512 elements · 2 B / 2 = 512 B, half sent: 256 / 1e11.
  const Strategy* ep = find(all, "S1RRR x S1RRR -> S1RR (expert-parallel all-to-all 1)");
  REQUIRE(ep != nullptr);
  CHECK(ep->inputs[1].mesh_axes(0) == std::vector<int>{1});  // buffer axis e
  CHECK(ep->communication.value() == doctest::Approx(256.0 / 1e11).epsilon(kRel));
  // A combine whose loops are not GShard's is rejected.
  graph.nodes.back().output_loops = {1, 0, 4};
  CHECK(graph.validate().message() ==
        "node 4 (\"combine\"): loops do not have the MoE dispatch / combine structure");
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

TEST_CASE("elementwise ops follow their operands, broadcast operands stay replicated") {
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

// A strided 3x3 convolution, fp16: x [4,8,8,8] (n,h,w,ci), f [3,3,8,16] (kh,kw,ci,co),
// stride 2 -> y [4,4,4,16]; dy like y, dx like x, df like f. Mesh 1x2, axis 1 at 1e11 B/s
// (hooks_for): a ring all-reduce of B bytes over 2 devices costs 2·(1/2)·B/1e11 = B/1e11, a
// reduce-scatter half of that.
struct StridedConv {
  ConvDims d{4, 8, 8, 8, 16, 3, 3, 2};
  GraphBuilder g;
  int x, f, dy, y, dx, df;
  StridedConv() {
    x = g.input("x", {4, 8, 8, 8});
    f = g.parameter("f", {3, 3, 8, 16});
    dy = g.input("dy", {4, 4, 4, 16});
    y = g.conv2d("y", ConvPass::kForward, d, x, f);
    dx = g.conv2d("dx", ConvPass::kDataGradient, d, dy, f);
    df = g.conv2d("df", ConvPass::kFilterGradient, d, x, dy);
  }
};

TEST_CASE("convolution passes are loop nests with strided spatial loops") {
  StridedConv c;
  const IntraOpGraph& g = c.g.graph();
  REQUIRE(g.validate().ok());
  CHECK(g.nodes[static_cast<std::size_t>(c.y)].shape == std::vector<std::int64_t>{4, 4, 4, 16});
  CHECK(g.nodes[static_cast<std::size_t>(c.dx)].shape == std::vector<std::int64_t>{4, 8, 8, 8});
  CHECK(g.nodes[static_cast<std::size_t>(c.df)].shape == std::vector<std::int64_t>{3, 3, 8, 16});
  // Loops n, ho, wo, ci, kh, kw, co: the spatial loops count output rows (8 / stride 2).
  CHECK(g.loop_sizes(c.df) == std::vector<std::int64_t>{4, 4, 4, 8, 3, 3, 16});
  // 2 · (4·4·4 output pixels) · 16 · (3·3·8) multiply-adds = 147456, for every pass.
  CHECK(g.nodes[static_cast<std::size_t>(c.dx)].flops == 147456.0);
  // A loop without an extent, or a splittable list of the wrong length, is reported.
  IntraOpGraph bad = g;
  bad.nodes[static_cast<std::size_t>(c.y)].loop_extents.pop_back();
  CHECK(bad.validate().message() ==
        "node 3 (\"y\"): operand 1 axis 3 has loop 6 without an extent");
  bad = g;
  bad.nodes[static_cast<std::size_t>(c.y)].loop_splittable.pop_back();
  CHECK(bad.validate().message() ==
        "node 3 (\"y\"): loop_splittable has 6 entries for 7 loops");
}

TEST_CASE("strided forward convolution: batch, output-channel and input-channel splits") {
  StridedConv c;
  const LogicalMesh mesh{1, 2};
  const auto all = enumerate_strategies(c.g.graph(), c.y, mesh, hooks_for(mesh));
  // Batch split (data parallel) and output-channel split: no communication; y tile
  // 4·4·4·16·2 B / 2 = 1024 B.
  const Strategy* batch = find(all, "S1RRR x RRRR -> S1RRR");
  REQUIRE(batch != nullptr);
  CHECK(batch->communication.value() == 0.0);
  CHECK(batch->memory.value() == 1024);
  const Strategy* out_ch = find(all, "RRRR x RRRS1 -> RRRS1");
  REQUIRE(out_ch != nullptr);
  CHECK(out_ch->communication.value() == 0.0);
  // Input-channel split: partial sums of the whole y (2048 B) all-reduced: 2048/1e11 s, or
  // reduce-scattered onto the batch axis: 1024/1e11 s.
  const Strategy* in_ch = find(all, "RRRS1 x RRS1R -> RRRR (all-reduce 1)");
  REQUIRE(in_ch != nullptr);
  CHECK(in_ch->communication.value() == doctest::Approx(2048.0 / 1e11).epsilon(kRel));
  CHECK(in_ch->all_reduce_axes == kAxis1);
  const Strategy* in_ch_rs = find(all, "RRRS1 x RRS1R -> S1RRR (reduce-scatter 1)");
  REQUIRE(in_ch_rs != nullptr);
  CHECK(in_ch_rs->communication.value() == doctest::Approx(1024.0 / 1e11).epsilon(kRel));
  // The 3x3 window keeps its spatial loops whole (a split needs a halo exchange) and the
  // kernel taps are never split: batch 1 + in-channel (all-reduce + 4 reduce-scatters) 5 +
  // out-channel 1 = 7 strategies (the replicated one is dropped: compute is not priced).
  CHECK(find(all, "RS1RR x RRRR -> RS1RR") == nullptr);
  CHECK(all.size() == 7);
}

TEST_CASE("convolution gradients: out-channel split all-reduces dx, batch split the filter's") {
  StridedConv c;
  const LogicalMesh mesh{1, 2};
  const auto data = enumerate_strategies(c.g.graph(), c.dx, mesh, hooks_for(mesh));
  // Output-channel split: dx [4,8,8,8] fp16 = 4096 B of partial sums, all-reduced.
  const Strategy* co = find(data, "RRRS1 x RRRS1 -> RRRR (all-reduce 1)");
  REQUIRE(co != nullptr);
  CHECK(co->communication.value() == doctest::Approx(4096.0 / 1e11).epsilon(kRel));
  CHECK(find(data, "S1RRR x RRRR -> S1RRR") != nullptr);   // batch: free
  CHECK(find(data, "RRRR x RRS1R -> RRRS1") != nullptr);   // input channel: free
  const auto filter = enumerate_strategies(c.g.graph(), c.df, mesh, hooks_for(mesh));
  // Batch split: each device sums its images' filter gradient; df [3,3,8,16] fp16 = 2304 B
  // all-reduced (data parallelism's gradient synchronisation).
  const Strategy* dp = find(filter, "S1RRR x S1RRR -> RRRR (all-reduce 1)");
  REQUIRE(dp != nullptr);
  CHECK(dp->communication.value() == doctest::Approx(2304.0 / 1e11).epsilon(kRel));
  const Strategy* fco = find(filter, "RRRR x RRRS1 -> RRRS1");  // output channel: free
  REQUIRE(fco != nullptr);
  CHECK(fco->memory.value() == 2304 / 2);
  CHECK(find(filter, "RRRS1 x RRRR -> RRS1R") != nullptr);  // input channel: free
}

TEST_CASE("1x1 strided convolutions may split rows, compute is priced per split") {
  // x [2,8,8,4], f [1,1,4,8], stride 2 -> y [2,4,4,8]: input rows 8 and output rows 4 both
  // halve, no halo for a 1x1 window.
  GraphBuilder g;
  const ConvDims d{2, 8, 8, 4, 8, 1, 1, 2};
  const int x = g.input("x", {2, 8, 8, 4});
  const int f = g.parameter("f", {1, 1, 4, 8});
  const int y = g.conv2d("y", ConvPass::kForward, d, x, f);
  const LogicalMesh mesh{1, 2};
  CostHooks hooks = hooks_for(mesh);
  hooks.device_flops_per_s = 1e12;
  const auto all = enumerate_strategies(g.graph(), y, mesh, hooks);
  const Strategy* rows = find(all, "RS1RR x RRRR -> RS1RR");
  REQUIRE(rows != nullptr);
  CHECK(rows->communication.value() == 0.0);
  // FLOPs 2 · (2·4·4) · 8 · 4 = 2048, halved over 2 devices at 1e12 FLOP/s.
  CHECK(rows->compute.value() == doctest::Approx(1024.0 / 1e12).epsilon(kRel));
  // With compute priced the replicated strategy stays and pays for all of it.
  const Strategy* rep = find(all, "RRRR x RRRR -> RRRR");
  REQUIRE(rep != nullptr);
  CHECK(rep->compute.value() == doctest::Approx(2048.0 / 1e12).epsilon(kRel));
}

}  // namespace
}  // namespace alpasim::planner::intra_op

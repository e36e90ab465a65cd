// planner/search/layer_boundary: which tensors cross a layer boundary, and what moving them
// between the two layers' layouts costs (issue 15 #2: the boundary is not free).
#include <doctest/doctest.h>

#include <cstdlib>
#include <tuple>
#include <vector>

#include "ir/autodiff.h"
#include "ir/builders.h"
#include "planner/adapters/ir_adapter.h"
#include "planner/search/layer_boundary.h"
#include "tests/support/tiny_models.h"

using namespace alpasim;
namespace intra_op = alpasim::planner::intra_op;

namespace {

ir::Graph tiny_gpt_training(ir::RecomputePolicy recompute) {
  ir::BuildOptions bo;
  bo.microbatch_size = 2;
  ir::TrainingOptions to;
  to.recompute = recompute;
  return ir::derive_training_graph(ir::build_forward_graph(::alpasim::testing::tiny_gpt_hidden256(3), bo).value(), to);
}

schema::ShardingSpec spec(const char* text) { return schema::ShardingSpec::parse(text).value(); }

}  // namespace

TEST_CASE("between two transformer blocks cross the residual stream and its gradient, nothing else") {
  for (const auto recompute : {ir::RecomputePolicy::kNone, ir::RecomputePolicy::kFull}) {
    CAPTURE(static_cast<int>(recompute));
    const ir::Graph g = tiny_gpt_training(recompute);
    const int layers = g.num_layers();
    std::vector<std::vector<ir::OpId>> nodes(static_cast<std::size_t>(layers));
    std::vector<intra_op::IntraOpGraph> graphs;
    for (int l = 0; l < layers; ++l) {
      graphs.push_back(planner::adapters::layer_range_graph(g, l, l + 1, &nodes[static_cast<std::size_t>(l)], false).value());
    }
    const auto edges = planner::layer_boundary_edges(g, nodes);
    REQUIRE(edges.size() == static_cast<std::size_t>(layers));
    CHECK(edges[0].empty());
    // Layers: the embedding, three blocks, the head. Between blocks b and b + 1 (layers 2
    // and 3): the block output [b, s, h] forward, its gradient backward.
    const auto& between_blocks = edges[2];
    REQUIRE(between_blocks.size() == 2);
    int forward = 0, backward = 0;
    for (const planner::BoundaryEdge& e : between_blocks) {
      const auto& consumer = graphs[static_cast<std::size_t>(e.consumer_layer)].nodes[static_cast<std::size_t>(e.consumer_node)];
      const auto& producer = graphs[static_cast<std::size_t>(e.producer_layer)].nodes[static_cast<std::size_t>(e.producer_node)];
      CHECK(consumer.kind == intra_op::OpKind::kInput);
      CHECK(producer.kind != intra_op::OpKind::kInput);
      CHECK(consumer.shape == producer.shape);
      // The consumer's input node stands for the producer's operator.
      CHECK(nodes[static_cast<std::size_t>(e.consumer_layer)][static_cast<std::size_t>(e.consumer_node)] ==
            nodes[static_cast<std::size_t>(e.producer_layer)][static_cast<std::size_t>(e.producer_node)]);
      std::int64_t elements = 1;
      for (auto d : consumer.shape) elements *= d;
      CHECK(elements == 2 * 128 * 256);
      if (e.phase == ir::Phase::kForward) {
        ++forward;
        CHECK(e.producer_layer == 1);
        CHECK(e.consumer_layer == 2);
      } else {
        ++backward;
        CHECK(e.phase == ir::Phase::kBackward);
        CHECK(e.producer_layer == 2);
        CHECK(e.consumer_layer == 1);
      }
    }
    CHECK(forward == 1);
    CHECK(backward == 1);
    // The head reads the tied word embedding of layer 0: a weight, never a boundary edge.
    for (const auto& list : edges) {
      for (const auto& e : list) CHECK(std::abs(e.producer_layer - e.consumer_layer) == 1);
    }
  }
}

TEST_CASE("a boundary tensor pays the resharding between the two layouts, in its producer's phase") {
  // A [4, 128, 256] fp16 tensor (262,144 bytes) on a 4x1 mesh. Sequence-split -> replicated
  // all-gathers the whole tensor along axis 0 (the golden GPT-3 39B plan's RS0R -> RRR);
  // equal layouts cost nothing; batch-split -> sequence-split is an all-to-all of the
  // 65,536-byte source tile. The hook charges 1 ns per byte, times 1, 2, 3 for all-gather,
  // all-to-all and anything else.
  std::vector<std::tuple<intra_op::Collective, std::int64_t, intra_op::MeshAxes>> calls;
  const intra_op::CollectiveCostFn hook = [&](intra_op::Collective c, core::Bytes bytes, intra_op::MeshAxes axes) {
    calls.emplace_back(c, bytes.value(), axes);
    const double factor = c == intra_op::Collective::kAllGather ? 1 : c == intra_op::Collective::kAllToAll ? 2 : 3;
    return core::seconds(factor * 1e-9 * static_cast<double>(bytes.value()));
  };
  const std::vector<std::int64_t> dims = {4, 128, 256};
  std::vector<planner::BoundaryTransfer> transfers = {
      {dims, 2, spec("RS0R"), spec("RRR"), ir::Phase::kForward},
      {dims, 2, spec("RS0R"), spec("RS0R"), ir::Phase::kBackward},
      {dims, 2, spec("S0RR"), spec("RS0R"), ir::Phase::kRecompute},
  };
  const planner::BoundaryCost b = planner::price_boundary(transfers, {4, 1}, hook);
  CHECK(b.forward_s == doctest::Approx(262144e-9).epsilon(1e-12));
  CHECK(b.backward_s == 0);
  CHECK(b.recompute_s == doctest::Approx(2 * 65536e-9).epsilon(1e-12));
  CHECK(b.total_s() == doctest::Approx(b.forward_s + b.recompute_s));
  REQUIRE(calls.size() == 2);
  CHECK(calls[0] == std::make_tuple(intra_op::Collective::kAllGather, std::int64_t{262144}, intra_op::kAxis0));
  CHECK(calls[1] == std::make_tuple(intra_op::Collective::kAllToAll, std::int64_t{65536}, intra_op::kAxis0));
}

#include "ir/graph.h"

#include <doctest/doctest.h>

#include "ir/accounting.h"
#include "ir/autodiff.h"

namespace alpasim::ir {
namespace {

// x[b=4, h=8] -> fc1 [8, 16] -> gelu -> fc2 [16, 8] -> mean loss.
Graph mlp() {
  Graph g;
  g.meta.dtype = core::DType::kFp16;
  g.meta.samples_per_microbatch = 4;
  g.layers = {{"layer0", "block"}};
  OpId x = g.add_input("x", {4, 8}, false, 0);
  OpId w1 = g.add_parameter("w1", {8, 16}, 0);
  OpId b1 = g.add_parameter("b1", {16}, 0);
  OpId h = g.add_dot("fc1", "bh,hf->bf", x, w1, 0, b1);
  OpId a = g.add_elementwise("gelu", "gelu", {h}, 8, 0);
  OpId w2 = g.add_parameter("w2", {16, 8}, 0);
  OpId y = g.add_dot("fc2", "bf,fh->bh", a, w2, 0);
  g.meta.loss = g.add_reduce("loss", "mean", {y}, {1}, 1, 0);
  return g;
}

TEST_CASE("einsum specs classify dims and give (batch, M, N, K)") {
  auto spec = parse_dot_spec("bskgd,btkd->bkgst");
  REQUIRE(spec.has_value());
  CHECK(dot_dim_class(*spec, 'b') == DotDimClass::kBatch);
  CHECK(dot_dim_class(*spec, 'k') == DotDimClass::kBatch);
  CHECK(dot_dim_class(*spec, 's') == DotDimClass::kLhsFree);
  CHECK(dot_dim_class(*spec, 'g') == DotDimClass::kLhsFree);
  CHECK(dot_dim_class(*spec, 't') == DotDimClass::kRhsFree);
  CHECK(dot_dim_class(*spec, 'd') == DotDimClass::kContracting);
  CHECK_FALSE(parse_dot_spec("ab,bc").has_value());      // no output
  CHECK_FALSE(parse_dot_spec("abz,bc->ac").has_value()); // z summed in one operand only
  CHECK_FALSE(parse_dot_spec("aa,ab->b").has_value());   // repeated letter

  Graph g;
  OpId q = g.add_input("q", {2, 5, 3, 4, 8}, false, 0);  // [b, s, kv, group, d]
  OpId k = g.add_input("k", {2, 5, 3, 8}, false, 0);     // [b, t, kv, d]
  OpId s = g.add_dot("scores", "bskgd,btkd->bkgst", q, k, 0);
  const Op& o = g.op(s);
  CHECK(o.out.shape == std::vector<std::int64_t>{2, 3, 4, 5, 5});
  // batch = b·k = 6, M = g·s = 20, N = t = 5, K = d = 8; FLOPs = 2·6·20·5·8.
  CHECK(o.dot_dims == DotDims{6, 20, 5, 8});
  CHECK(o.flops == 2 * 6 * 20 * 5 * 8);
  CHECK(o.bytes_read == (2 * 5 * 3 * 4 * 8 + 2 * 5 * 3 * 8) * 2);
  CHECK(o.bytes_written == 2 * 3 * 4 * 5 * 5 * 2);
}

TEST_CASE("conv2d has implicit-GEMM dims and SAME output size") {
  Graph g;
  OpId x = g.add_input("x", {2, 9, 9, 3}, false, 0);
  OpId w = g.add_parameter("w", {3, 3, 3, 16}, 0);
  OpId y = g.add_conv2d("conv", x, w, 2, 0);
  // ceil(9 / 2) = 5; M = 2·5·5, N = 16, K = 3·3·3.
  CHECK(g.op(y).out.shape == std::vector<std::int64_t>{2, 5, 5, 16});
  CHECK(g.op(y).dot_dims == DotDims{1, 50, 16, 27});
  CHECK(g.op(y).flops == 2 * 50 * 16 * 27);
}

TEST_CASE("Boost.Graph algorithms: topological order, BFS depth, reachability") {
  const Graph g = mlp();
  const auto order = g.topological_order();
  REQUIRE(order.size() == g.size());
  std::vector<std::size_t> position(g.size());
  for (std::size_t i = 0; i < order.size(); ++i) position[static_cast<std::size_t>(order[i])] = i;
  for (const Op& o : g.ops()) {
    for (OpId in : o.inputs) CHECK(position[static_cast<std::size_t>(in)] < position[static_cast<std::size_t>(o.id)]);
  }
  // Sources 0; fc1 reads sources (1); gelu 2; fc2 reads gelu (3) and w2 (source): 1 + min = 1.
  const auto depth = g.bfs_depth();
  CHECK(depth[0] == 0);
  CHECK(depth[3] == 1);  // fc1
  CHECK(depth[4] == 2);  // gelu
  CHECK(depth[6] == 1);  // fc2: one hop from w2
  CHECK(depth[7] == 2);  // loss
  CHECK(g.is_reachable(0, 7));
  CHECK(g.is_reachable(5, 6));
  CHECK_FALSE(g.is_reachable(5, 4));  // w2 does not feed gelu
  CHECK_FALSE(g.is_reachable(7, 0));
  CHECK(g.reachable_from(4) == std::vector<OpId>{4, 6, 7});
}

TEST_CASE("backward derives dX and dW dots for every dot, FLOPs are 3x forward") {
  const Graph fwd = mlp();
  const Graph g = derive_training_graph(fwd, {});
  int dw = 0, dx = 0;
  for (const Op& o : g.ops()) {
    if (o.phase != Phase::kBackward || o.kind != OpKind::kDot) continue;
    (o.grad_role == GradRole::kWeightGrad ? dw : dx)++;
  }
  CHECK(dw == 2);  // dW1, dW2
  CHECK(dx == 1);  // dX of fc2 (fc1's input x needs no gradient)
  const PhaseFlops p = phase_flops(g);
  // fc1: 2·4·8·16, fc2: 2·4·16·8; backward: dW1 + dW2 + dX2 = 3 of the same size.
  CHECK(p.matmul_forward == 2 * 2 * 4 * 8 * 16);
  CHECK(p.matmul_backward == 3 * 2 * 4 * 8 * 16);
  // One update per parameter; Adam mixed precision reads grad (2 B) + master, m, v (12 B).
  int updates = 0;
  for (const Op& o : g.ops()) {
    if (o.kind != OpKind::kOptimizer) continue;
    ++updates;
    const std::int64_t n = g.op(o.source).out.num_elements();
    CHECK(o.bytes_read == 14 * n);
    CHECK(o.bytes_written == 14 * n);
  }
  CHECK(updates == 3);
  CHECK(g.meta.has_backward);
  CHECK(g.meta.optimizer == "adam");
}

// A table [10, 4] looked up by ids [2, 3] and, when `tied`, read again as the logits'
// weight (GPT's tied embedding); the loss is a mean.
Graph table_graph(bool tied, OpId* table) {
  Graph g;
  g.layers = {{"l", "block"}};
  OpId ids = g.add_input("ids", {2, 3}, true, 0);
  *table = g.add_parameter("table", {10, 4}, 0);
  OpId e = g.add_embedding("lookup", *table, ids, 0);
  const OpId out = tied ? g.add_dot("logits", "bsh,vh->bsv", e, *table, 0) : e;
  g.meta.loss = g.add_reduce("loss", "mean", {out}, {1}, 1, 0);
  return g;
}

TEST_CASE("a parameter used twice gets its gradients summed (tied embeddings)") {
  OpId table = kNoOp;
  const Graph t = derive_training_graph(table_graph(true, &table), {});
  int sums = 0;
  OpId update_grad = kNoOp;
  for (const Op& o : t.ops()) {
    if (o.function == "add" && o.phase == Phase::kBackward) ++sums;
    if (o.kind == OpKind::kOptimizer) update_grad = o.inputs[1];
  }
  CHECK(sums == 1);
  REQUIRE(update_grad != kNoOp);
  CHECK(t.op(update_grad).function == "add");
  CHECK(t.op(update_grad).grad_role == GradRole::kWeightGrad);
}

TEST_CASE("weight_gradient_parameters: every gradient on the path into a parameter's update names it") {
  // The tied table's two gradients (the lookup's scatter-add, the logits' dW) and their sum
  // are the table's; an input gradient is nobody's. Op::source of a weight gradient is the
  // forward op it differentiates, not the parameter.
  OpId table = kNoOp;
  const Graph g = table_graph(true, &table);
  const Graph t = derive_training_graph(g, {});
  const std::vector<OpId> param = weight_gradient_parameters(t);
  REQUIRE(param.size() == t.size());
  int table_gradients = 0;
  for (const Op& o : t.ops()) {
    CAPTURE(o.name);
    if (o.grad_role == GradRole::kWeightGrad) {
      CHECK(param[static_cast<std::size_t>(o.id)] == table);
      CHECK(o.source != table);
      ++table_gradients;
    } else {
      CHECK(param[static_cast<std::size_t>(o.id)] == kNoOp);
    }
  }
  CHECK(table_gradients == 3);  // grad_table, the logits' dW, their sum
  // A forward graph has no update to find them from.
  for (OpId p : weight_gradient_parameters(g)) CHECK(p == kNoOp);
}

TEST_CASE("split_memory_traffic_bytes splits reads and writes separately, rounding up") {
  OpId table = kNoOp;
  const Graph t = derive_training_graph(table_graph(false, &table), {});
  int scatters = 0;
  for (const Op& o : t.ops()) {
    if (o.function != "scatter_add") continue;
    ++scatters;
    CHECK(o.bytes_read > 0);
    CHECK(o.bytes_written > 0);
    CHECK(split_memory_traffic_bytes(t, o, 1, 1) == memory_traffic_bytes(t, o));
    CHECK(split_memory_traffic_bytes(t, o, 1, 4) == o.bytes_read + (o.bytes_written + 3) / 4);
    CHECK(split_memory_traffic_bytes(t, o, 3, 4) == (o.bytes_read + 2) / 3 + (o.bytes_written + 3) / 4);
  }
  CHECK(scatters == 1);
}

}  // namespace
}  // namespace alpasim::ir

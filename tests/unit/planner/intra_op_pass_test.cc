#include "planner/intra_op/intra_op_pass.h"

#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planner/intra_op/resharding.h"
#include "planner/intra_op/synthetic_graphs.h"

namespace alpasim::planner::intra_op {
namespace {

CostHooks hooks_for(const LogicalMesh& mesh) {
  AlphaBetaCollectives ab;
  ab.mesh = mesh;
  ab.bandwidth = {core::gbyte_per_s(100.0), core::gbyte_per_s(100.0)};
  ab.latency = {core::microseconds(1.0), core::microseconds(1.0)};
  return {ab, 0.0, {}};
}

bool any_weight_sharded(const IntraOpPlan& plan) {
  for (const auto& s : plan.shardings) {
    if ((s.op == "w1" || s.op == "w2") && !s.output.is_replicated()) return true;
  }
  return false;
}

TEST_CASE("a memory limit below the data-parallel footprint gives a sharded plan") {
  // Large batch: unconstrained, data parallelism wins (mlp_test.cc) and replicates both
  // weights and their 12-byte/element optimizer states.
  const MlpShape shape{8192, 256, 1024, 2, 12};
  const LogicalMesh mesh{1, 2};
  IntraOpPass pass;
  IntraOpOptions o;
  auto dp = pass.run(mlp_graph(shape), mesh, hooks_for(mesh), o);
  REQUIRE(dp.ok());
  REQUIRE_FALSE(any_weight_sharded(*dp));
  // Data-parallel footprint per device on 1x2: the batch-split activations x, fc2, loss_grad
  // [B,H] and fc1, relu, fc2_dx, relu_grad [B,F] at half, weights and gradients [H,F] whole
  // (2 bytes) and both weights' Adam states whole (12 bytes/element).
  const std::int64_t b = 8192, h = 256, f = 1024;
  const std::int64_t data_parallel = (3 * b * h + 4 * b * f) * 2 / 2 + 4 * h * f * 2 + 24 * h * f;
  CHECK(dp->memory.value() >= data_parallel);
  for (Algorithm alg : {Algorithm::kAuto, Algorithm::kIlp}) {
    o.algorithm = alg;
    o.memory_limit = core::bytes(data_parallel - 1);
    auto tight = pass.run(mlp_graph(shape), mesh, hooks_for(mesh), o);
    REQUIRE(tight.ok());
    CHECK(tight->feasibility == Feasibility::kFeasible);
    CHECK(tight->proven_optimal);
    CHECK(tight->memory <= *o.memory_limit);
    CHECK(any_weight_sharded(*tight));
    // Never cheaper; equal is possible: the data-parallel cost already includes the
    // weight-update rewrite (reduce-scatter + all-gather), which a ZeRO-3-like plan matches.
    CHECK(tight->cost >= dp->cost);
  }
}

TEST_CASE("users of one tensor in one pass share its resharding copy in the charged costs, another pass pays again") {
  // x [b, h] split over the rows of a 1x2 mesh feeds a layer norm kept split (as under
  // sequence parallelism), read whole by three column-parallel projections q, k, v of the
  // forward (pass 0) and by one operator of the backward (pass 1). The solver's objective
  // (`cost`) prices a gather per user; the charged costs (node_cost_s) one per pass: the
  // difference is exactly two gathers.
  const std::int64_t b = 64, h = 128, f = 256;
  GraphBuilder gb;
  const int x = gb.input("x", {b, h});
  const int ln = gb.layer_norm("ln", x, 1);
  std::vector<int> users;
  for (const char* name : {"q", "k", "v"}) {
    const int w = gb.parameter(std::string(name) + "_weight", {h, f});
    users.push_back(gb.einsum(name, "bh,hf->bf", {ln, w}));
  }
  const int wb = gb.parameter("bwd_weight", {h, f});
  users.push_back(gb.einsum("bwd", "bh,hf->bf", {ln, wb}));
  IntraOpGraph g = gb.graph();
  g.nodes[static_cast<std::size_t>(users.back())].pass = 1;
  const LogicalMesh mesh{1, 2};
  auto spec = [](const char* text) { return *schema::ShardingSpec::parse(text); };
  IntraOpOptions o;
  o.required.assign(g.nodes.size(), std::nullopt);
  o.required[static_cast<std::size_t>(ln)] = schema::OperatorSharding{"ln", "", {}, spec("S1R")};
  for (int u : users) {
    o.required[static_cast<std::size_t>(u)] =
        schema::OperatorSharding{g.nodes[static_cast<std::size_t>(u)].name, "", {spec("RR"), spec("RS1")}, spec("RS1")};
  }
  IntraOpPass pass;
  auto plan = pass.run(g, mesh, hooks_for(mesh), o);
  REQUIRE_MESSAGE(plan.ok(), plan.status().message());
  const double gather =
      reshard_cost({b, h}, 2, spec("S1R"), spec("RR"), mesh, hooks_for(mesh).collective).value();
  REQUIRE(gather > 0);
  double charged = 0;
  for (double c : plan->node_cost_s) charged += c;
  CHECK(charged == doctest::Approx(plan->cost.value() - 2 * gather).epsilon(1e-12));
  // The copy is charged to the first forward user and to the backward user.
  const auto at = [&](int v) { return plan->node_cost_s[static_cast<std::size_t>(v)]; };
  CHECK(at(users[0]) == doctest::Approx(at(users[1]) + gather).epsilon(1e-12));
  CHECK(at(users[1]) == doctest::Approx(at(users[2])).epsilon(1e-12));
  CHECK(at(users[3]) == doctest::Approx(at(users[1]) + gather).epsilon(1e-12));
}

TEST_CASE("all-reduces (reduce-scatters) of partial sums that are only added together are charged once") {
  // The input gradient of Q, K and V under tensor parallelism: dy [b, f] and each weight
  // [h, f] split over f on a 1x2 mesh, so each dx = dy . w^T holds partial sums reduced over
  // axis 1: all-reduced (output RR), or reduce-scattered onto b (output S1R, as under
  // sequence parallelism); (q + k) + v sums them. Charged: one reduction of the sum
  // (Megatron's fused QKV, XLA's AllReduceReassociate), i.e. the objective less two. A
  // partial with a second reader keeps its reduction.
  const std::int64_t b = 64, h = 128, f = 256;
  auto spec = [](const char* text) { return *schema::ShardingSpec::parse(text); };
  const LogicalMesh mesh{1, 2};
  auto run = [&](const char* out, bool second_reader) {
    GraphBuilder gb;
    const int dy = gb.input("dy", {b, f});
    std::vector<int> partial;
    for (const char* name : {"q", "k", "v"}) {
      const int w = gb.parameter(std::string(name) + "_weight", {h, f});
      partial.push_back(gb.einsum(std::string(name) + "_dx", "bf,hf->bh", {dy, w}));
    }
    const int qk = gb.elementwise("qk", {partial[0], partial[1]});
    const int qkv = gb.elementwise("qkv", {qk, partial[2]});
    if (second_reader) gb.elementwise("reads_v_dx", {partial[2]});
    IntraOpGraph g = gb.graph();
    for (int v : {qk, qkv}) g.nodes[static_cast<std::size_t>(v)].sums_operands = true;
    IntraOpOptions o;
    o.weight_update_sharding = false;
    o.required.assign(g.nodes.size(), std::nullopt);
    o.required[static_cast<std::size_t>(dy)] = schema::OperatorSharding{"dy", "", {}, spec("RS1")};
    for (int v : partial) {
      o.required[static_cast<std::size_t>(v)] =
          schema::OperatorSharding{g.nodes[static_cast<std::size_t>(v)].name, "", {spec("RS1"), spec("RS1")}, spec(out)};
    }
    for (int v : {qk, qkv}) {
      o.required[static_cast<std::size_t>(v)] =
          schema::OperatorSharding{g.nodes[static_cast<std::size_t>(v)].name, "", {spec(out), spec(out)}, spec(out)};
    }
    IntraOpPass pass;
    auto plan = pass.run(g, mesh, hooks_for(mesh), o);
    REQUIRE_MESSAGE(plan.ok(), plan.status().message());
    double charged = 0;
    for (double c : plan->node_cost_s) charged += c;
    return std::make_tuple(charged, plan->cost.value(), plan->node_cost_s, partial);
  };
  for (const auto& [out, collective] : {std::pair<const char*, Collective>{"RR", Collective::kAllReduce},
                                        {"S1R", Collective::kReduceScatter}}) {
    CAPTURE(out);
    const double reduction = hooks_for(mesh).collective(collective, core::bytes(b * h * 2), kAxis1).value();
    REQUIRE(reduction > 0);
    const auto [charged, cost, node_cost, partial] = run(out, false);
    CHECK(charged == doctest::Approx(cost - 2 * reduction).epsilon(1e-12));
    // The first operand keeps the one reduction.
    CHECK(node_cost[static_cast<std::size_t>(partial[0])] ==
          doctest::Approx(node_cost[static_cast<std::size_t>(partial[1])] + reduction).epsilon(1e-12));
    // v's partial sums read elsewhere too: only q's and k's combine.
    const auto [charged2, cost2, node_cost2, partial2] = run(out, true);
    CHECK(charged2 == doctest::Approx(cost2 - reduction).epsilon(1e-12));
  }
}

TEST_CASE("an impossible memory limit says how many bytes are missing") {
  // On 1x2 every tensor can be split in half, so the smallest plan holds half of every
  // tensor: activations x, fc2, loss_grad [B,H]; fc1, relu, fc2_dx, relu_grad [B,F];
  // w1, w2, fc1_dw, fc2_dw [H,F] at 2 bytes, plus 12 bytes/element of Adam state per weight.
  const MlpShape shape{512, 256, 1024, 2, 12};
  const std::int64_t b = 512, h = 256, f = 1024;
  const std::int64_t smallest = (2 * (3 * b * h + 4 * b * f + 4 * h * f) + 24 * h * f) / 2;
  const LogicalMesh mesh{1, 2};
  IntraOpPass pass;
  IntraOpOptions o;
  o.memory_limit = core::mib(1);
  auto plan = pass.run(mlp_graph(shape), mesh, hooks_for(mesh), o);
  REQUIRE(plan.ok());
  CHECK(plan->feasibility == Feasibility::kOutOfMemory);
  CHECK(plan->missing.value() == smallest - (1 << 20));
  CHECK(plan->shardings.empty());
  CHECK(describe_memory(*plan, o.memory_limit) ==
        "does not fit: the smallest plan needs 6.38 MiB per device, 5.38 MiB (5636096 bytes) "
        "more than the limit of 1.00 MiB");
}

TEST_CASE("weight-update sharding rewrites the data-parallel gradient all-reduces") {
  // Data parallel on 1x2: both gradients are all-reduced and only feed their updates, which
  // are replicated: each becomes reduce-scatter + all-gather, halving the Adam states
  // (256*1024*12 bytes -> half) at one extra latency (1 us) per weight.
  const MlpShape shape{8192, 256, 1024, 2, 12};
  const LogicalMesh mesh{1, 2};
  IntraOpPass pass;
  IntraOpOptions o;
  o.weight_update_sharding = false;
  auto plain = pass.run(mlp_graph(shape), mesh, hooks_for(mesh), o);
  o.weight_update_sharding = true;
  auto zero = pass.run(mlp_graph(shape), mesh, hooks_for(mesh), o);
  REQUIRE(plain.ok());
  REQUIRE(zero.ok());
  REQUIRE(zero->weight_update_sharding.size() == 2);
  const auto& w = zero->weight_update_sharding[0];
  CHECK(w.update == "w1_update");
  CHECK(w.gradient == "fc1_dw");
  CHECK(w.axes == kAxis1);
  CHECK(w.state_bytes_before.value() == 256 * 1024 * 12);
  CHECK(w.state_bytes_after.value() == 256 * 1024 * 6);
  CHECK(zero->memory_after_rewrite.value() == plain->memory.value() - 2 * 256 * 1024 * 6);
  CHECK(zero->cost.value() == doctest::Approx(plain->cost.value() + 2e-6).epsilon(1e-9));
  // Into plan.json: every operator's layouts and the stage's flag.
  schema::PlanStage stage;
  write_to_stage(*zero, &stage);
  CHECK(stage.weight_update_sharding);
  REQUIRE(stage.shardings.size() == 13);
  CHECK(stage.shardings[3].op == "fc1");
  CHECK(stage.shardings[3].strategy == "S1R x RR -> S1R");
  write_to_stage(*plain, &stage);
  CHECK_FALSE(stage.weight_update_sharding);
}

TEST_CASE("identical stages cost one solve, a renamed copy reports its own names") {
  GptShape gpt;
  gpt.batch = 4;
  gpt.seq = 64;
  gpt.hidden = 64;
  gpt.heads = 4;
  gpt.ffn = 256;
  gpt.layers = 1;
  IntraOpGraph g = gpt_graph(gpt);
  IntraOpGraph renamed = g;
  for (auto& n : renamed.nodes) n.name = "copy." + n.name;
  const LogicalMesh mesh{2, 2};
  IntraOpPass pass;
  auto first = pass.run(g, mesh, hooks_for(mesh), {}, "alpha-beta 100/100 GB/s");
  auto second = pass.run(renamed, mesh, hooks_for(mesh), {}, "alpha-beta 100/100 GB/s");
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(pass.solves() == 1);
  CHECK(pass.cache_hits() == 1);
  CHECK(second->from_cache);
  CHECK(second->cost == first->cost);
  CHECK(second->shardings.front().op == "copy.x");
  REQUIRE(second->weight_update_sharding.size() == first->weight_update_sharding.size());
  if (!second->weight_update_sharding.empty()) {
    CHECK(second->weight_update_sharding[0].update.rfind("copy.", 0) == 0);
  }
  // Another mesh is another question.
  auto other = pass.run(g, {1, 4}, hooks_for({1, 4}), {}, "alpha-beta 100/100 GB/s");
  REQUIRE(other.ok());
  CHECK(pass.solves() == 2);
}

TEST_CASE("a GPT layer plans the same with auto (DP, ILP fallback) and ILP, deterministically") {
  GptShape gpt;
  gpt.batch = 4;
  gpt.seq = 64;
  gpt.hidden = 64;
  gpt.heads = 4;
  gpt.ffn = 256;
  gpt.layers = 1;
  const IntraOpGraph g = gpt_graph(gpt);
  REQUIRE(g.validate().ok());
  const LogicalMesh mesh{2, 2};
  IntraOpPass pass;
  IntraOpOptions o;
  // On a 2D mesh the layer's forward+backward graph is too wide for the DP's table limit,
  // so kAuto hands it to the ILP; on 1x8 the DP alone suffices (see the benchmark).
  o.algorithm = Algorithm::kAuto;
  auto dp = pass.run(g, mesh, hooks_for(mesh), o);
  auto dp_again = pass.run(g, mesh, hooks_for(mesh), o);
  INFO(dp.status().to_string());
  o.algorithm = Algorithm::kIlp;
  auto ilp = pass.run(g, mesh, hooks_for(mesh), o);
  REQUIRE(dp.ok());
  REQUIRE(ilp.ok());
  REQUIRE(dp_again.ok());
  CHECK(dp->proven_optimal);
  CHECK(ilp->proven_optimal);
  CHECK(dp->cost.value() == doctest::Approx(ilp->cost.value()).epsilon(1e-9));
  CHECK(dp->shardings == dp_again->shardings);
}

TEST_CASE("invalid input is an error that names the node") {
  IntraOpGraph g;
  IntraOpNode n;
  n.name = "bad";
  n.kind = OpKind::kElementwise;
  n.shape = {4};
  n.operands = {3};
  g.nodes.push_back(n);
  IntraOpPass pass;
  auto r = pass.run(g, {1, 2}, hooks_for({1, 2}), {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "node 0 (\"bad\"): operand 3 is not an earlier node");
  auto m = pass.run(mlp_graph({}), {0, 2}, hooks_for({1, 2}), {});
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().message() == "logical mesh 0x2: expected positive rows and cols");
}

}  // namespace
}  // namespace alpasim::planner::intra_op

namespace alpasim::planner::intra_op {
namespace {

TEST_CASE("the cheap-operator merge (heuristic) shrinks the problem and is never better") {
  GptShape gpt;
  gpt.batch = 4;
  gpt.seq = 64;
  gpt.hidden = 64;
  gpt.heads = 4;
  gpt.ffn = 256;
  const IntraOpGraph g = gpt_graph(gpt);
  const LogicalMesh mesh{2, 2};
  IntraOpPass pass;
  IntraOpOptions o;
  auto exact = pass.run(g, mesh, hooks_for(mesh), o);
  o.simplify.merge_cheap_operators = true;
  auto merged = pass.run(g, mesh, hooks_for(mesh), o);
  REQUIRE(exact.ok());
  REQUIRE(merged.ok());
  // 29 elementwise / layer-norm / softmax / reduce / update operators of the layer are cheap.
  CHECK(merged->simplify_stats.merged_nodes > 20);
  CHECK(merged->reduced_nodes < exact->reduced_nodes);
  CHECK_FALSE(merged->proven_optimal);  // a heuristic answer is never called optimal
  CHECK(merged->objective >= exact->objective);
  CHECK(merged->shardings.size() == g.nodes.size());
}

}  // namespace
}  // namespace alpasim::planner::intra_op

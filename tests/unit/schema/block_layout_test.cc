// schema::BlockLayouts: the layout rules the executor's lowering and the planner's memory
// walk share (schema/block_layout.h), on a tiny GPT.
#include <doctest/doctest.h>

#include "ir/autodiff.h"
#include "ir/builders.h"
#include "schema/block_layout.h"
#include "tests/support/tiny_models.h"

namespace alpasim::schema {
namespace {

ir::Graph training_graph(std::int64_t samples) {
  ir::BuildOptions bo;
  bo.microbatch_size = samples;
  bo.dtype = core::DType::kFp16;
  ir::Graph fwd = ir::build_forward_graph(::alpasim::testing::tiny_gpt_hidden16(), bo).value();
  ir::TrainingOptions to;
  to.optimizer = ir::OptimizerKind::kAdam;
  return ir::derive_training_graph(fwd, to);
}

ir::OpId op_named(const ir::Graph& g, const std::string& name) {
  for (const ir::Op& o : g.ops()) {
    if (o.name == name) return o.id;
  }
  FAIL("no op " << name);
  return ir::kNoOp;
}

TEST_CASE("block layouts: key text, batch classification, data-parallel layout and block sizes") {
  CHECK(block_layout_key({{{0}, {}, {0, 1}}, 2}) == "S0RS01P2");
  const ir::Graph g = training_graph(8), one = training_graph(1), two = training_graph(2);
  auto batch = classify_batch_layouts(g, one, two);
  REQUIRE_MESSAGE(batch.ok(), batch.status().message());
  const ir::OpId ids = op_named(g, "embedding/token_ids");
  const ir::OpId table = op_named(g, "embedding/word_embeddings");
  const ir::OpId loss = g.meta.loss;
  CHECK((*batch)[static_cast<std::size_t>(ids)] == BatchLayout::kBatch);        // [8 samples, 8 tokens]
  CHECK((*batch)[static_cast<std::size_t>(table)] == BatchLayout::kReplicated);  // a weight
  CHECK((*batch)[static_cast<std::size_t>(loss)] == BatchLayout::kPartial);      // a mean over the rows
  // One stage over the 4 layers on a 2x2 logical mesh, no shardings.
  Plan plan;
  PlanStage st;
  st.layer_begin = 0;
  st.layer_end = g.num_layers();
  st.logical_rows = st.logical_cols = 2;
  plan.stages.push_back(st);
  std::vector<std::int32_t> op_stage(g.size(), 0);
  std::vector<char> per_iter(g.size(), 0);
  for (const ir::Op& o : g.ops()) per_iter[static_cast<std::size_t>(o.id)] = o.kind == ir::OpKind::kParameter;
  auto match = match_operator_shardings(plan, g, *batch, op_stage);
  REQUIRE(match.ok());
  CHECK(match->sharded == std::vector<char>{0});
  BlockLayouts blocks(plan, g, *batch, per_iter, op_stage, match->hint);
  CHECK(blocks.live_axes(0) == 3u);
  // token_ids [8, 8] int: rows over both mesh axes, a quarter per device.
  const BlockLayout ids_layout = blocks.def_layout(ids, 0);
  CHECK(ids_layout == BlockLayout{{{0, 1}, {}}, 0});
  CHECK(blocks.block_bytes(ids, ids_layout, 0) * 4 == g.op(ids).out.bytes());
  std::vector<std::int64_t> off, local;
  blocks.block_of(ids, ids_layout, 0, {1, 1}, off, local);  // device (1, 1): rank 3 of 4
  CHECK(off == std::vector<std::int64_t>{6, 0});
  CHECK(local == std::vector<std::int64_t>{2, 8});
  // The word embeddings are whole (a weight) and the loss a partial sum over both axes.
  CHECK(blocks.def_layout(table, 0) == BlockLayout{{{}, {}}, 0});
  CHECK(blocks.def_layout(loss, 0).partial == 3u);
  // normalize: mesh axis 0, already splitting tensor axis 0, is dropped from tensor axis 1
  // (which keeps mesh axis 1); partial sums over mesh axes that split (both) are dropped.
  const BlockLayout n = blocks.normalize({{{0}, {0, 1}}, 3}, ids, 0);
  CHECK(n == BlockLayout{{{0}, {1}}, 0});
  // Parameters without a spec are stored whole.
  CHECK(blocks.param_layout(table, 0) == BlockLayout{{{}, {}}, 0});
}

TEST_CASE("block layouts: a sharding entry naming no operator is an error naming its JSON path") {
  const ir::Graph g = training_graph(2), one = training_graph(1), two = training_graph(2);
  auto batch = classify_batch_layouts(g, one, two);
  REQUIRE(batch.ok());
  Plan plan;
  PlanStage st;
  st.layer_end = g.num_layers();
  st.logical_rows = 1;
  st.logical_cols = 2;
  st.shardings.push_back({"block0/no_such_op", "", {}, ShardingSpec::replicated(2)});
  plan.stages.push_back(st);
  auto match = match_operator_shardings(plan, g, *batch, std::vector<std::int32_t>(g.size(), 0));
  REQUIRE(!match.ok());
  CHECK(match.status().message() ==
        "plan: /stages/0/shardings/0/op: expected an operator of the model graph, got \"block0/no_such_op\"");
}

TEST_CASE("block layouts: duplicate entries, another stage's operators and specs of the wrong rank are errors") {
  const ir::Graph g = training_graph(2), one = training_graph(1), two = training_graph(2);
  auto batch = classify_batch_layouts(g, one, two);
  REQUIRE(batch.ok());
  // Two stages: layers [0, 2) and [2, L).
  Plan plan;
  PlanStage st;
  st.logical_rows = 1;
  st.logical_cols = 2;
  st.layer_end = 2;
  plan.stages.push_back(st);
  st.layer_begin = 2;
  st.layer_end = g.num_layers();
  plan.stages.push_back(st);
  std::vector<std::int32_t> op_stage(g.size(), 0);
  for (const ir::Op& o : g.ops()) op_stage[static_cast<std::size_t>(o.id)] = o.layer >= 2 ? 1 : 0;
  // A forward matmul of the last layer: stage 1 runs it, stage 0 never reads it.
  const ir::Op* last = nullptr;
  for (const ir::Op& o : g.ops()) {
    if (last == nullptr && o.layer == g.num_layers() - 1 && o.is_matmul() && o.phase == ir::Phase::kForward) last = &o;
  }
  REQUIRE(last != nullptr);
  const auto rank = static_cast<int>(last->out.shape.size());
  const OperatorSharding good{last->name, "", {}, ShardingSpec::replicated(rank)};
  auto match = [&](const Plan& p) { return match_operator_shardings(p, g, *batch, op_stage); };
  {
    Plan p = plan;
    p.stages[1].shardings = {good};
    CHECK(match(p).ok());
    p.stages[1].shardings = {good, good};
    auto r = match(p);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "plan: /stages/1/shardings/1/op: expected each operator once per stage, got \"" +
                                      last->name + "\" 2 times (the model has 1 of that name)");
  }
  {
    Plan p = plan;
    p.stages[0].shardings = {good};
    auto r = match(p);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "plan: /stages/0/shardings/0/op: expected an operator of stage 0 or a tensor it "
                                  "reads, got \"" + last->name + "\" of stage 1");
  }
  {
    Plan p = plan;
    OperatorSharding wrong = good;
    wrong.output = ShardingSpec::replicated(rank + 1);
    p.stages[1].shardings = {wrong};
    auto r = match(p);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("plan: /stages/1/shardings/0/output: expected a spec of rank " +
                                    std::to_string(rank)) == 0);
    wrong = good;
    wrong.inputs = {ShardingSpec::replicated(1)};  // operand 0 of a matmul has rank >= 2
    p.stages[1].shardings = {wrong};
    r = match(p);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("plan: /stages/1/shardings/0/inputs/0: expected a spec of rank") == 0);
    wrong.inputs.assign(last->inputs.size() + 1, ShardingSpec::replicated(2));
    p.stages[1].shardings = {wrong};
    r = match(p);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message().find("plan: /stages/1/shardings/0/inputs: expected at most") == 0);
  }
}

}  // namespace
}  // namespace alpasim::schema

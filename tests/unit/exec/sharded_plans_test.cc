// Plans with intra-operator shardings (not data parallel) run operator by operator on their
// shards and reproduce the unsharded reference: the search's own intra-op plans (2x1 on one
// node, 2x2 on two nodes), the search's Megatron MLP plans, a
// hand-written Megatron GPT (column-parallel q/k/v and fc1, row-parallel attention output
// and fc2, vocabulary-parallel head) on 1x2, 2x2 and two 1x2 stages, and the search's
// Wide-ResNet plans. Tolerance and its reason: cpu_backend_test.cc (|sharded − reference| ≤
// 1e-4 · max|reference| + 1e-6 per tensor; sharded runs differ only in the order of sums).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/json_reader.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/verify.h"
#include "ir/graph_json.h"
#include "planner/search/search.h"
#include "tests/unit/exec/exec_fixtures.h"
#include "tests/unit/exec/search_fixtures.h"
#include "tests/support/shipped_calibration.h"

namespace alpasim::exec {
namespace {

constexpr double kRelTol = 1e-4;
constexpr double kAbsTol = 1e-6;

using testing::run_on_cpu;
using testing::sequence_parallel_plan_file;
using testing::small_search;
using testing::unsharded_reference;

/// Updated weights are compared only for SGD (`weights`): Adam's first step moves every
/// weight by about lr · g/|g|, so a gradient that is zero up to rounding (GPT's k bias: it
/// shifts every score of a row equally, which the softmax ignores) gets a ±lr update whose
/// sign is the rounding's, in the reference as in the sharded run.
void compare(const ExecutionResult& got, const ExecutionResult& ref, bool weights = false, double rel_tol = kRelTol) {
  const testing::Comparison loss = testing::compare_scalar(got.loss, ref.loss, {kRelTol, kRelTol});
  CHECK_MESSAGE(loss.ok, "loss: " << loss.message);
  REQUIRE(got.gradients.size() == ref.gradients.size());
  for (const auto& [name, g] : got.gradients) {
    REQUIRE(ref.gradients.count(name));
    REQUIRE(g.size() == ref.gradients.at(name).size());
    const testing::Comparison c = testing::compare_values(g, ref.gradients.at(name), {rel_tol, kAbsTol});
    CHECK_MESSAGE(c.ok, "gradient of " << name << ": " << c.message);
  }
  for (const auto& [name, w] : got.parameters) {
    if (!weights) break;
    REQUIRE(ref.parameters.count(name));
    const testing::Comparison c = testing::compare_values(w, ref.parameters.at(name), {rel_tol, kAbsTol});
    CHECK_MESSAGE(c.ok, "updated parameter " << name << ": " << c.message);
  }
}

/// Operators whose specs split something other than the batch: the plan is not data parallel.
int non_data_parallel(const schema::Plan& plan) {
  int n = 0;
  for (const auto& st : plan.stages) {
    for (const auto& sh : st.shardings) {
      for (int a = 1; a < sh.output.rank(); ++a) n += sh.output.mesh_axes(a).empty() ? 0 : 1;
    }
  }
  return n;
}

/// RUNs whose output block is split on a non-batch axis (axis > 0 smaller than the tensor's):
/// the executor ran those operators on their shards, not on data-parallel copies.
int runs_on_non_batch_shards(const schema::Plan& plan, const LowerOptions& options = {}) {
  auto p = lower_plan(plan, options);
  REQUIRE_MESSAGE(p.ok(), p.status().message());
  int n = 0;
  for (const auto& code : p->code) {
    for (const Instruction& in : code) {
      if (in.kind != InstrKind::kRun) continue;
      const Buffer& b = p->buffers[static_cast<std::size_t>(in.buffer)];
      for (std::size_t a = 1; a < b.global_shape.size(); ++a) {
        if (b.shape[a] < b.global_shape[a]) {
          ++n;
          break;
        }
      }
    }
  }
  return n;
}

TEST_CASE("tiny GPT: the search's intra-op plans on 2 GPUs (2x1) and 2 nodes of 2 GPUs (2x2) match the reference") {
  const ir::ModelConfig gpt = testing::tiny_gpt(2);
  for (std::int64_t nodes : {1, 2}) {
    const std::int64_t gpus = nodes == 1 ? 2 : 4;
    CAPTURE(gpus);
    auto r = planner::search(small_search(gpt, "intra_op_only", 8, gpus, nodes));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const schema::Plan& plan = r->plan;
    MESSAGE(gpus << " GPUs: " << plan.stages.size() << " stage(s), mesh " << plan.stages[0].logical_rows << "x"
                 << plan.stages[0].logical_cols << ", " << plan.num_microbatches << " microbatches, "
                 << non_data_parallel(plan) << " operator outputs split on a non-batch axis");
    if (non_data_parallel(plan) > 0) CHECK(runs_on_non_batch_shards(plan) > 0);
    compare(run_on_cpu(plan), run_on_cpu(unsharded_reference(plan)));
  }
}

}  // namespace
}  // namespace alpasim::exec

namespace alpasim::exec {
namespace {

ir::ModelConfig mlp3() {
  ir::ModelFileConfig f;
  f.format = "graph_json";
  f.path = ALPASIM_SOURCE_DIR "/tests/unit/exec/data/mlp3_graph.json";
  f.path_as_written = "mlp3_graph.json";
  return {"mlp3", f};
}

/// The MLP file has static shapes (batch 8); the executor builds it at other batch sizes
/// (to find the batch axis, and per device) by rewriting the batch in the file's text.
LowerOptions mlp3_at_any_batch() {
  LowerOptions o;
  o.build_forward = [](std::int64_t batch) -> core::Result<ir::Graph> {
    std::ifstream f(ALPASIM_SOURCE_DIR "/tests/unit/exec/data/mlp3_graph.json");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    const std::string b = std::to_string(batch);
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"\"batch_size\": 8", "\"batch_size\": " + b}, {"[8, 64]", "[" + b + ", 64]"}, {"[8]", "[" + b + "]"}}) {
      const auto at = text.find(from);
      if (at != std::string::npos) text.replace(at, from.size(), to);
    }
    ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::parse_json_text(text, "mlp3_graph.json"));
    return ir::parse_graph_json(core::JsonValue::root(doc), {batch, core::DType::kFp16});
  };
  return o;
}

TEST_CASE("3-layer MLP: the search's plans (2 stages, 2x1, 4x1 and 2x2 Megatron meshes) match the reference") {
  struct Case {
    std::string mode;
    std::int64_t gpus;
    std::int64_t nodes;
  };
  for (const Case& c : {Case{"alpa", 2, 1}, Case{"intra_op_only", 2, 1}, Case{"alpa", 4, 1}, Case{"intra_op_only", 4, 2}}) {
    CAPTURE(c.mode);
    CAPTURE(c.gpus);
    CAPTURE(c.nodes);
    auto r = planner::search(small_search(mlp3(), c.mode, 8, c.gpus, c.nodes));
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const schema::Plan& plan = r->plan;
    MESSAGE(c.mode << " on " << c.gpus << " GPUs: " << plan.stages.size() << " stage(s), first mesh "
                   << plan.stages[0].logical_rows << "x" << plan.stages[0].logical_cols << ", "
                   << plan.num_microbatches << " microbatches, " << non_data_parallel(plan)
                   << " operator outputs split on a non-batch axis");
    if (non_data_parallel(plan) > 0) CHECK(runs_on_non_batch_shards(plan, mlp3_at_any_batch()) > 0);
    compare(run_on_cpu(plan, mlp3_at_any_batch()), run_on_cpu(unsharded_reference(plan), mlp3_at_any_batch()));
  }
}

}  // namespace
}  // namespace alpasim::exec

namespace alpasim::exec {
namespace {

/// Megatron-LM's tensor parallelism for the GPT blocks in [first, last) (Shoeybi et al.
/// 2019, §3): q/k/v and fc1 column-parallel (heads / ffn columns split over mesh axis 1),
/// the attention core per head, the attention output and fc2 row-parallel (a partial sum,
/// all-reduced before the residual); the batch over mesh axis 0. With `vocab` the LM head
/// is vocabulary-parallel (the tied embedding's rows split over mesh axis 1).
std::vector<schema::OperatorSharding> megatron(int first, int last, bool vocab) {
  auto spec = [](const char* text) { return *schema::ShardingSpec::parse(text); };
  std::vector<schema::OperatorSharding> out;
  auto add = [&](const std::string& op, std::vector<const char*> in, const char* o) {
    schema::OperatorSharding s;
    s.op = op;
    s.strategy = "megatron";
    for (const char* t : in) s.inputs.push_back(spec(t));
    s.output = spec(o);
    out.push_back(s);
  };
  for (int l = first; l < last; ++l) {
    const std::string p = "block" + std::to_string(l) + "/";
    add(p + "attn/q", {"S0RR", "RS1RR", "S1RR"}, "S0RS1RR");
    add(p + "attn/k", {"S0RR", "RS1R", "S1R"}, "S0RS1R");
    add(p + "attn/v", {"S0RR", "RS1R", "S1R"}, "S0RS1R");
    add(p + "attn/scores", {"S0RS1RR", "S0RS1R"}, "S0S1RRR");
    add(p + "attn/softmax", {"S0S1RRR"}, "S0S1RRR");
    add(p + "attn/context", {"S0S1RRR", "S0RS1R"}, "S0RS1RR");
    add(p + "attn/out", {"S0RS1RR", "S1RRR", "R"}, "S0RR");
    add(p + "mlp/fc1", {"S0RR", "RS1", "S1"}, "S0RS1");
    add(p + "mlp/gelu", {"S0RS1"}, "S0RS1");
    add(p + "mlp/fc2", {"S0RS1", "S1R", "R"}, "S0RR");
  }
  if (vocab) add("head/logits", {"S0RR", "S1R"}, "S0RS1");
  return out;
}

TEST_CASE("tiny GPT, Megatron tensor parallelism (column/row-parallel, per-head attention, vocab-parallel head) "
          "on 1x2, 2x2, two 1x2 stages and interleaved chunks, and 2-D tiles, match the reference") {
  using testing::make_plan;
  const ir::ModelConfig gpt = testing::tiny_gpt(2);  // layers: embedding, block0, block1, head
  struct Case {
    std::string name;
    schema::Plan plan;
  };
  std::vector<Case> cases;
  {
    auto p = make_plan(gpt, {{0, 4, 1, 2, {0, 1}}}, schema::Schedule::kGpipe, 1, 4);
    p.stages[0].shardings = megatron(0, 2, true);
    cases.push_back({"1x2, tensor parallel only", p});
  }
  {
    auto p = make_plan(gpt, {{0, 4, 2, 2, {0, 1, 2, 3}}}, schema::Schedule::kOneFOneB, 2, 8);
    p.stages[0].shardings = megatron(0, 2, true);
    cases.push_back({"2x2, batch over axis 0, tensor over axis 1, 2 microbatches", p});
  }
  {
    auto p = make_plan(gpt, {{0, 2, 1, 2, {0, 1}}, {2, 4, 1, 2, {2, 3}}}, schema::Schedule::kOneFOneB, 2, 8);
    p.stages[0].shardings = megatron(0, 1, false);
    p.stages[1].shardings = megatron(1, 2, true);
    cases.push_back({"two 1x2 stages, 1F1B, tied embedding across stages", p});
    p.recompute = schema::Recompute::kFull;
    cases.push_back({"two 1x2 stages with full recomputation", p});
  }
  {
    // 4 model chunks on 2 meshes (interleaved 1F1B): embedding, block0 | block1, head.
    auto p = make_plan(gpt, {{0, 1, 1, 2, {0, 1}}, {1, 2, 1, 2, {2, 3}}, {2, 3, 1, 2, {0, 1}}, {3, 4, 1, 2, {2, 3}}},
                       schema::Schedule::kInterleavedOneFOneB, 2, 8, 2);
    p.stages[1].shardings = megatron(0, 1, false);
    p.stages[2].shardings = megatron(1, 2, false);
    p.stages[3].shardings = megatron(2, 2, true);
    cases.push_back({"4 chunks on two 1x2 meshes, interleaved 1F1B", p});
  }
  {
    // 2-D tiles on a 2x2 mesh: fc1's weight split over both mesh axes (rows over axis 0, a
    // contracted dimension: partial sums over axis 0; columns over axis 1), fc2's the other
    // way round.
    auto spec = [](const char* text) { return *schema::ShardingSpec::parse(text); };
    auto p = make_plan(gpt, {{0, 4, 2, 2, {0, 1, 2, 3}}}, schema::Schedule::kGpipe, 1, 8);
    for (int l = 0; l < 2; ++l) {
      const std::string b = "block" + std::to_string(l) + "/";
      p.stages[0].shardings.push_back({b + "mlp/fc1", "2d", {spec("RRS0"), spec("S0S1"), spec("S1")}, spec("RRS1")});
      p.stages[0].shardings.push_back({b + "mlp/fc2", "2d", {spec("RRS1"), spec("S1S0"), spec("S0")}, spec("RRS0")});
    }
    cases.push_back({"2-D weight tiles on 2x2", p});
  }
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK(runs_on_non_batch_shards(c.plan) > 0);
    compare(run_on_cpu(c.plan), run_on_cpu(unsharded_reference(c.plan)));
  }
}

TEST_CASE("a Megatron plan file as alpa-sim --out writes it (specs on every operator's output, none on its "
          "inputs) stores each weight in its own spec's layout and matches the reference") {
  // tp 2, pp 2, dp 2 on 8 GPUs, microbatch 2 (tiny GPT, fp32), written by
  // `alpa-sim tiny.json --out` (sim::lowering::megatron_plan_file). Before the executor
  // read a parameter's own spec, every weight of such a file was stored replicated and
  // sliced into its layout before each reader: twice the weight bytes, and its gradient
  // all-gathered to the replicated layout at the optimizer.
  auto plan = schema::read_plan_file(std::string(ALPASIM_SOURCE_DIR) +
                                     "/tests/unit/exec/data/tiny_gpt_megatron_plan_file_tp2_pp2_dp2.json");
  REQUIRE_MESSAGE(plan.ok(), plan.status().message());
  for (const auto& st : plan->stages) {
    for (const auto& sh : st.shardings) REQUIRE(sh.inputs.empty());
  }
  auto prog = lower_plan(*plan);
  REQUIRE_MESSAGE(prog.ok(), prog.status().message());
  REQUIRE(verify_program(*prog).ok());
  int split_weights = 0;
  for (std::size_t s = 0; s < plan->stages.size(); ++s) {
    const auto& st = plan->stages[s];
    std::map<std::string, const schema::ShardingSpec*> spec_of;
    for (const auto& sh : st.shardings) spec_of[sh.op] = &sh.output;
    const ir::Graph& g = prog->graph_of_stage(static_cast<std::int32_t>(s));
    for (const Buffer& b : prog->buffers) {
      if (b.stage != static_cast<std::int32_t>(s) || b.received || b.superseded || b.role != BufferRole::kParameter) {
        continue;
      }
      const ir::Op& op = g.op(b.tensor);
      if (op.kind != ir::OpKind::kParameter) continue;
      CAPTURE(op.name);
      auto it = spec_of.find(op.name);
      REQUIRE(it != spec_of.end());
      // Elements of the block: the global count over the sizes of the mesh axes the spec
      // splits (logical mesh rows x columns; every split here divides).
      std::int64_t global = 1, ways = 1;
      for (std::int64_t v : b.global_shape) global *= v;
      for (int a = 0; a < it->second->rank(); ++a) {
        for (int m : it->second->mesh_axes(a)) ways *= m == 0 ? st.logical_rows : st.logical_cols;
      }
      CHECK(b.elements * ways == global);
      if (ways > 1) ++split_weights;
    }
    // No weight is copied into another layout in the forward or backward.
    for (const auto& code : prog->code) {
      for (const Instruction& in : code) {
        if (in.kind != InstrKind::kAllGather || in.stage != static_cast<std::int32_t>(s)) continue;
        if (in.task == TaskKind::kOptimizer) continue;
        const ir::Op& op = g.op(in.op);
        CAPTURE(op.name);
        // The word embedding is split over the vocabulary and gathered whole for the lookup
        // (docs/executor.md: the lookup reads the whole table).
        if (op.name != "embedding/word_embeddings") CHECK(op.kind != ir::OpKind::kParameter);
      }
    }
  }
  // Column- and row-parallel weights on 4 devices of 2 blocks and the vocabulary-split
  // tables: most weights are split.
  CHECK(split_weights >= 16);
  // The cross entropy runs on each device's block of the vocabulary-split logits
  // (Megatron's vocab_parallel_cross_entropy): per-row statistics are gathered, once per
  // microbatch on each device of the head's mesh, and neither the logits nor their
  // gradient is ever gathered (before 2026-11-28 the logits were, whole, for the loss, and
  // held to the backward); the gradient is written over the logits.
  int statistics_gathers = 0, class_block_gradients = 0;
  for (const auto& code : prog->code) {
    for (const Instruction& in : code) {
      const ir::Op& op = prog->graph_of_stage(in.stage).op(in.op);
      if (in.kind == InstrKind::kRun && in.loss_step == LossStep::kGradient) {
        ++class_block_gradients;
        // Written over the logits block, their last reader (as Megatron writes it over its
        // saved softmax): no second buffer of the logits' size.
        CHECK(in.buffer == in.inputs.at(1));
      }
      if (in.kind != InstrKind::kAllGather) continue;
      CAPTURE(op.name);
      CHECK(op.name != "head/logits");
      CHECK(op.name != "head/cross_entropy/grad_logits");
      if (op.function == "softmax_cross_entropy" && in.inputs.empty()) ++statistics_gathers;
    }
  }
  // The input gradients of Q, K and V (partial sums over the tensor-parallel axis) are summed
  // before one all-reduce, as Megatron's fused QKV linear reduces its input gradient once.
  int qkv_reduced_apart = 0, sum_reduced = 0;
  for (const auto& code : prog->code) {
    for (const Instruction& in : code) {
      if (in.kind != InstrKind::kAllReduce || in.task != TaskKind::kBackward) continue;
      const std::string& name = prog->graph_of_stage(in.stage).op(in.op).name;
      if (name.ends_with("/attn/q/grad_lhs") || name.ends_with("/attn/k/grad_lhs") ||
          name.ends_with("/attn/v/grad_lhs")) {
        ++qkv_reduced_apart;
      }
      if (name.ends_with("/attn_norm/grad_sum")) ++sum_reduced;
      // The position table's gradient is summed over the batch rows each device holds and
      // scattered as that partial sum: reduced once, at the optimizer, not per microbatch.
      CHECK(name != "embedding/add_positions/grad_in1_reduce");
      CHECK(name != "embedding/position_lookup/grad_table");
    }
  }
  CHECK(qkv_reduced_apart == 0);
  CHECK(sum_reduced > 0);
  const auto head_devices = static_cast<int>(plan->stages.back().device_ids.size());
  CHECK(statistics_gathers == head_devices * static_cast<int>(plan->num_microbatches));
  CHECK(class_block_gradients == head_devices * static_cast<int>(plan->num_microbatches));
  compare(run_on_cpu(*plan), run_on_cpu(unsharded_reference(*plan)));
}

}  // namespace
}  // namespace alpasim::exec

namespace alpasim::exec {
namespace {

// Wide-ResNet: batch-norm uses the statistics of the rows a device holds (docs/executor.md),
// so the reference runs the batch in groups of the plans' per-device batch (which must then
// be the same on every stage). Updated weights are compared too (SGD, see compare()).
// Tolerance 1e-3 per tensor instead of 1e-4: the backward pass through 16 bottleneck blocks
// of 2-channel batch norms amplifies rounding. Measured on the intra-op plan (its dense
// head row-parallel, the rest data parallel): the head's gradients agree with the reference
// to 1.1e-7 relative, the stem's to 1.6e-5 and block0/conv2_bn_scale's to 5.9e-4, growing
// block by block towards the input; the same plan without its head shardings agrees to
// 1e-4. A lost microbatch or a wrong 1/k still moves gradients by 10 % or more.
// (planner::search on Wide-ResNet works since the planner's convolution fix, commit 7b10c59.)
TEST_CASE("tiny Wide-ResNet: the search's plans (alpa on 2 and 4 GPUs, intra-op on 2) match the reference") {
  const ir::ModelConfig w = testing::tiny_wide_resnet();
  struct Case {
    std::string mode;
    std::int64_t gpus;
    std::int64_t nodes;
  };
  for (const Case& c : {Case{"alpa", 2, 1}, Case{"alpa", 4, 1}, Case{"intra_op_only", 2, 1}}) {
    const std::int64_t gpus = c.gpus;
    CAPTURE(c.mode);
    CAPTURE(gpus);
    CAPTURE(c.nodes);
    planner::SearchInput in = small_search(w, c.mode, 8, gpus, c.nodes);
    in.optimizer = "sgd";  // the executor trains Wide-ResNet with SGD + momentum
    auto r = planner::search(in);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const schema::Plan& plan = r->plan;
    const std::int64_t mb = plan.global_batch_size / plan.num_microbatches;
    const std::int64_t per_device = mb / static_cast<std::int64_t>(plan.stages[0].device_ids.size());
    for (const auto& st : plan.stages) REQUIRE(mb / static_cast<std::int64_t>(st.device_ids.size()) == per_device);
    MESSAGE(c.mode << " on " << gpus << " GPUs: " << plan.stages.size() << " stage(s), first mesh " << plan.stages[0].logical_rows << "x"
                 << plan.stages[0].logical_cols << ", " << plan.num_microbatches << " microbatches, "
                 << non_data_parallel(plan) << " operator outputs split on a non-batch axis");
    schema::Plan ref = unsharded_reference(plan);
    ref.num_microbatches = plan.global_batch_size / per_device;
    compare(run_on_cpu(plan), run_on_cpu(ref), true, 1e-3);
  }
}

// The same file with Megatron's sequence parallelism: column-parallel linears gather their
// sequence-split input (and, for their weight's gradient, gather it again), row-parallel ones
// sum partial products and reduce-scatter them onto the sequence; no weight is gathered in a
// forward or backward task (schema::BlockLayouts' dot rule; before 2026-11-27, stop 40, the
// column-parallel GEMMs took their input's sequence split and gathered the weight).
TEST_CASE("a sequence-parallel Megatron plan file gathers activations, never a weight, and matches the reference") {
  const schema::Plan plan = sequence_parallel_plan_file();
  auto prog = lower_plan(plan);
  REQUIRE_MESSAGE(prog.ok(), prog.status().message());
  REQUIRE(verify_program(*prog).ok());
  int activation_gathers = 0;
  for (const auto& code : prog->code) {
    for (const Instruction& in : code) {
      if (in.kind != InstrKind::kAllGather || in.task == TaskKind::kOptimizer) continue;
      const ir::Op& op = prog->graph_of_stage(in.stage).op(in.op);
      CAPTURE(op.name);
      // The word embedding's table is split over the vocabulary and each device looks up
      // its rows (before 2026-11-27, stop 41, it was gathered whole for the lookup). Only
      // the head's copy of this tied table is still gathered: whole at init on the first
      // stage, for the send to the last stage, which slices it into the head's layout
      // (docs/executor.md; Megatron keeps a block of it on each of the two stages).
      if (op.kind == ir::OpKind::kParameter) {
        CHECK(op.name == "embedding/word_embeddings");
        CHECK((in.task == TaskKind::kInit || in.stage == static_cast<std::int32_t>(plan.stages.size()) - 1));
        continue;
      }
      ++activation_gathers;
    }
  }
  CHECK(activation_gathers > 0);
  // As Megatron keeps a sequence-parallel activation as its shard and gathers it again in
  // the backward for the weight gradient: every activation a forward gathers (a copy larger
  // than its source) that the backward reads only in weight gradients is freed in that
  // forward, and the backward gathers it again. (Others, such as the labels the loss's
  // gradient reads, are kept.)
  auto weight_gradients_only = [&](std::int32_t stage, ir::OpId t) {
    const ir::Graph& g = prog->graph_of_stage(stage);
    bool any = false;
    for (ir::OpId r : g.consumers(t)) {
      if (g.op(r).phase != ir::Phase::kBackward) continue;
      if (g.op(r).kind != ir::OpKind::kDot || g.op(r).grad_role != ir::GradRole::kWeightGrad) return false;
      any = true;
    }
    return any;
  };
  int forward_gathers = 0, gathered_again = 0;
  for (const auto& code : prog->code) {
    std::map<BufferId, TaskKind> freed_in;
    std::set<std::pair<ir::OpId, std::int32_t>> backward_gathers;  // (tensor, microbatch)
    for (const Instruction& in : code) {
      if (in.kind == InstrKind::kFree) freed_in[in.buffer] = in.task;
      if (in.kind == InstrKind::kAllGather && in.inputs.size() == 1 && in.task == TaskKind::kBackward) {
        backward_gathers.insert({in.op, in.microbatch});
      }
    }
    for (const Instruction& in : code) {
      if (in.kind != InstrKind::kAllGather || in.inputs.size() != 1 || in.task != TaskKind::kForward) continue;
      const Buffer& copy = prog->buffers[static_cast<std::size_t>(in.buffer)];
      const Buffer& source = prog->buffers[static_cast<std::size_t>(in.inputs[0])];
      if (copy.microbatch < 0 || copy.elements <= source.elements || !weight_gradients_only(in.stage, in.op)) continue;
      CAPTURE(prog->graph_of_stage(in.stage).op(in.op).name);
      ++forward_gathers;
      REQUIRE(freed_in.count(in.buffer) == 1);
      CHECK(freed_in.at(in.buffer) == TaskKind::kForward);
      if (backward_gathers.count({in.op, in.microbatch})) ++gathered_again;
    }
  }
  CHECK(forward_gathers > 0);
  CHECK(gathered_again > 0);
  compare(run_on_cpu(plan), run_on_cpu(unsharded_reference(plan)));
}

}  // namespace
}  // namespace alpasim::exec

#include "sim/lowering/megatron_lowering.h"

#include <doctest/doctest.h>

#include <cmath>
#include <utility>
#include <string>

#include "cluster/cluster_spec.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "ir/accounting.h"
#include "ir/autodiff.h"
#include "ir/builders.h"
#include "sim/pipeline_sim.h"
#include "sim/problem_json.h"
#include "tests/unit/sim_lowering/lowering_fixtures.h"

namespace alpasim::sim::lowering {
namespace {

using testing::gpt_model;
using testing::preset_cost_model;

// A tiny GPT: 4 blocks, hidden 64, 4 heads, 32 tokens, vocabulary 128.
ir::ModelConfig tiny_gpt(std::int64_t layers = 4, std::int64_t hidden = 64) {
  ir::ModelConfig m = gpt_model(layers, hidden, 4, 32, 128);
  m.name = "tiny";
  return m;
}

// Default (documented) parameters: the closed forms below do not depend on calibration.
using testing::dgx;

TrainingSetup training(std::int64_t batch) { return testing::training_setup(batch, core::DType::kFp16); }

// The training graph the lowering builds for tiny_gpt() in fp16 at `microbatch` samples
// (Adam, no recomputation).
ir::Graph fp16_training_graph(std::int64_t microbatch) {
  ir::BuildOptions b;
  b.microbatch_size = microbatch;
  b.dtype = core::DType::kFp16;
  auto fwd = ir::build_forward_graph(tiny_gpt(), b);
  REQUIRE(fwd.ok());
  return ir::derive_training_graph(*fwd, {});
}

TEST_CASE("tp=pp=dp=1: the iteration is B x (forward + backward) + optimizer, GEMMs from ir dims") {
  // tp·pp·dp must equal the cluster's GPUs: a one-GPU machine (the preset's node with
  // one GPU) so that nothing but compute and the optimizer runs.
  auto spec = cluster::make_preset_cluster("dgx-a100-80gb", 1);
  REQUIRE(spec.ok());
  spec->gpus_per_node = 1;
  auto cm_or = cost_model::CostModel::create(*spec, cost_model::default_params());
  REQUIRE(cm_or.ok());
  const auto& cm = *cm_or;
  MegatronPlan plan;  // all 1, no recompute
  auto lowered = lower_megatron_plan(tiny_gpt(), training(4), plan, cm);
  REQUIRE(lowered.ok());
  CHECK(lowered->num_microbatches == 4);
  CHECK(lowered->layers.size() == 6);  // embedding, 4 blocks, head

  // Independent sum of every matmul of the training graph as ir's dot_dims give it.
  ir::BuildOptions b;
  auto fwd = ir::build_forward_graph(tiny_gpt(), b);
  REQUIRE(fwd.ok());
  const ir::Graph g = ir::derive_training_graph(*fwd, {});
  double gemm_fwd = 0;
  double gemm_bwd = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const ir::Op& op = g.op(static_cast<ir::OpId>(i));
    if (!op.is_einsum()) continue;
    cost_model::GemmShape s{op.dot_dims.m, op.dot_dims.n, op.dot_dims.k, op.dot_dims.batch,
                            op.out.dtype};
    (op.phase == ir::Phase::kForward ? gemm_fwd : gemm_bwd) += cm.gemm(s).time.value();
  }
  double lowered_fwd = 0;
  double lowered_bwd = 0;
  double step = 0;
  double per_microbatch = 0;
  for (const auto& l : lowered->layers) {
    lowered_fwd += l.gemm_forward_s.value();
    lowered_bwd += l.gemm_backward_s.value();
    step += l.costs.optimizer_step_s.value();
    per_microbatch += l.costs.forward_s.value() + l.costs.backward_s.value();
    CHECK(l.costs.forward_tp_comm_s.value() == 0);  // tp = 1: no collectives
  }
  CHECK(lowered_fwd == doctest::Approx(gemm_fwd).epsilon(1e-12));
  CHECK(lowered_bwd == doctest::Approx(gemm_bwd).epsilon(1e-12));

  // One stage, no p2p, no gradient sync: compute back to back, then the optimizer. The
  // engine rounds each task to whole nanoseconds (<= 0.5 ns each, 2·B + 1 tasks).
  auto simulated = simulate_pipeline(lowered->problem);
  REQUIRE(simulated.ok());
  const double expected = 4 * per_microbatch + step;
  CHECK(std::abs(simulated->report.iteration_time.value() - expected) <= 10e-9);
  CHECK(simulated->report.bubble_fraction == doctest::Approx(0.0).epsilon(1e-6));
}

TEST_CASE("a Megatron plan file blocks on its pipeline sends unless they overlap (interleaved)") {
  const auto cm = dgx(1);
  const auto model = gpt_model(4, 256, 8, 128, 1024);
  MegatronPlan plan;
  plan.tp = 2;
  plan.pp = 2;
  plan.dp = 2;
  plan.interleave = 2;
  const TrainingSetup bf16 = testing::training_setup(8, core::DType::kBf16);
  auto blocking = megatron_plan_file(model, bf16, plan, cm.spec());
  REQUIRE(blocking.ok());
  CHECK(blocking->p2p == schema::P2pMode::kBlocking);
  plan.overlap_p2p_comm = true;
  auto overlapped = megatron_plan_file(model, bf16, plan, cm.spec());
  REQUIRE(overlapped.ok());
  CHECK(overlapped->p2p == schema::P2pMode::kAsync);
  // The lowering itself agrees.
  CHECK(lower_megatron_plan(model, bf16, plan, cm)->problem.blocking_p2p == false);
}

// gemm() seconds of one attention core's two products, QK^T ((s x d) x (d x s)) and
// attention x V ((s x s) x (s x d)), batched over microbatch x heads, fp16, every tile.
double attention_gemms_s(const cost_model::CostModel& cm, std::int64_t batch_heads, std::int64_t s,
                         std::int64_t d) {
  cost_model::GemmShape scores;
  scores.batch = batch_heads;
  scores.m = s;
  scores.n = s;
  scores.k = d;
  scores.dtype = core::DType::kFp16;
  cost_model::GemmShape context = scores;
  context.n = d;
  context.k = s;
  return cm.gemm(scores).time.value() + cm.gemm(context).time.value();
}

TEST_CASE("a flash kernel's GEMMs cost the causal share of their tiles, its softmax nothing") {
  // One GPT block at sequence 1,024 (8 key tiles: the kernel computes 9 of 16 halves,
  // (8+1)/16 = 0.5625), microbatch 2, 8 heads of 32, tp 1, dp 8: the fused block's forward GEMMs
  // are the unfused block's minus 0.4375 of QK^T's and attention x V's, priced by gemm().
  const auto cm = dgx(1);
  ir::ModelConfig unfused = gpt_model(1, 256, 8, 1024, 1024);
  ir::ModelConfig fused = unfused;
  std::get<ir::TransformerConfig>(fused.spec).fused_attention = true;
  MegatronPlan plan;  // data parallel over the node's 8 GPUs
  plan.dp = 8;
  plan.microbatch_size = 2;
  const TrainingSetup setup = testing::training_setup(16, core::DType::kFp16);
  auto a = lower_megatron_plan(unfused, setup, plan, cm);
  auto f = lower_megatron_plan(fused, setup, plan, cm);
  REQUIRE_MESSAGE(a.ok(), a.status().message());
  REQUIRE_MESSAGE(f.ok(), f.status().message());
  const LoweredLayer* la = nullptr;
  const LoweredLayer* lf = nullptr;
  for (std::size_t i = 0; i < a->layers.size(); ++i) {
    if (a->layers[i].kind == "transformer") {
      la = &a->layers[i];
      lf = &f->layers[i];
    }
  }
  REQUIRE(la != nullptr);
  const double attention_s = attention_gemms_s(cm, 2 * 8, 1024, 32);
  CHECK(ir::causal_tile_fraction(1024) == 0.5625);
  CHECK(la->gemm_forward_s.value() - lf->gemm_forward_s.value() ==
        doctest::Approx((1 - 0.5625) * attention_s).epsilon(1e-9));
  // The unfused softmax streams 2 x b·a·s² fp16 values; the fused one moves nothing.
  CHECK(la->memory_bound_forward_s.value() > lf->memory_bound_forward_s.value());
}

TEST_CASE("a sliding window: the flash GEMMs cost the band's share of their tiles, on its layers only") {
  // Two GPT blocks at sequence 1,024, window 256, every 2nd block full (sliding_window_pattern
  // 2): block 0's QK^T and attention x V cost attention_tile_fraction(1024, 256) = 21/64 of
  // their tiles (tile 0: 1, tile 1: 2, tiles 2..7: 3 each: the diagonal and the two before,
  // which the window's 255 earlier keys reach), block 1's the causal 36/64: the lowered
  // block-0 forward GEMMs are block 1's minus 15/64 of the two products' gemm() time.
  const auto cm = dgx(1);
  ir::ModelConfig model = gpt_model(2, 256, 8, 1024, 1024);
  auto& t = std::get<ir::TransformerConfig>(model.spec);
  t.fused_attention = true;
  t.sliding_window = 256;
  t.sliding_window_pattern = 2;
  CHECK(ir::attention_tile_fraction(1024, 256) == 21.0 / 64.0);
  MegatronPlan plan;
  plan.dp = 8;
  plan.microbatch_size = 2;
  const TrainingSetup setup = testing::training_setup(16, core::DType::kFp16);
  auto lowered = lower_megatron_plan(model, setup, plan, cm);
  REQUIRE_MESSAGE(lowered.ok(), lowered.status().message());
  std::vector<const LoweredLayer*> blocks;
  for (const auto& l : lowered->layers) {
    if (l.kind == "transformer") blocks.push_back(&l);
  }
  REQUIRE(blocks.size() == 2);
  const double attention_s = attention_gemms_s(cm, 2 * 8, 1024, 32);
  CHECK(blocks[1]->gemm_forward_s.value() - blocks[0]->gemm_forward_s.value() ==
        doctest::Approx((ir::causal_tile_fraction(1024) - 21.0 / 64.0) * attention_s).epsilon(1e-9));
  // Without the window both blocks cost the same.
  t.sliding_window = 0;
  t.sliding_window_pattern = 0;
  auto full = lower_megatron_plan(model, setup, plan, cm);
  REQUIRE(full.ok());
  std::vector<double> full_gemm;
  for (const auto& l : full->layers) {
    if (l.kind == "transformer") full_gemm.push_back(l.gemm_forward_s.value());
  }
  REQUIRE(full_gemm.size() == 2);
  CHECK(full_gemm[0] == full_gemm[1]);
  CHECK(full_gemm[1] == blocks[1]->gemm_forward_s.value());
}

TEST_CASE("context parallelism with a sliding window is refused, naming both") {
  const auto cm = dgx(1);
  ir::ModelConfig model = gpt_model(2, 256, 8, 1024, 1024);
  auto& t = std::get<ir::TransformerConfig>(model.spec);
  t.builtin = "llama";
  ir::set_architecture_defaults(t);
  t.fused_attention = true;
  t.sliding_window = 256;
  MegatronPlan plan;
  plan.dp = 4;
  plan.cp = 2;
  auto lowered = lower_megatron_plan(model, testing::training_setup(8, core::DType::kBf16), plan, cm);
  REQUIRE_FALSE(lowered.ok());
  CHECK(lowered.status().message().find("context parallelism with sliding-window attention is not modelled "
                                        "(model.sliding_window 256 < seq_len 1024)") != std::string::npos);
  t.sliding_window = 1024;  // as wide as the sequence: causal, allowed
  CHECK(lower_megatron_plan(model, testing::training_setup(8, core::DType::kBf16), plan, cm).ok());
}

TEST_CASE("a Megatron plan whose stage spans part of a node has no plan file, with the reason") {
  // tp 4 x dp 3 = 12 GPUs per stage on 8-GPU nodes: a node and a half; a plan file's submesh
  // (nodes x GPUs per node) cannot hold it. Before, --out wrote a 1 x 8 submesh under a 3 x 4
  // mesh, a plan.json that validate_plan rejects.
  const auto cm = dgx(3);
  const auto model = gpt_model(4, 256, 8, 128, 1024);
  MegatronPlan plan;
  plan.tp = 4;
  plan.pp = 2;
  plan.dp = 3;
  auto file = megatron_plan_file(model, testing::training_setup(12, core::DType::kBf16), plan, cm.spec());
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().code() == core::StatusCode::kUnimplemented);
  CHECK(file.status().message() ==
        "search.megatron: a stage of tp·dp = 12 GPUs spans part of a node, which a plan file's submesh "
        "(nodes x GPUs per node) cannot describe");
  plan.dp = 4;  // 16 GPUs: two whole nodes
  plan.pp = 1;
  auto whole = megatron_plan_file(model, testing::training_setup(16, core::DType::kBf16), plan, cm.spec());
  REQUIRE_MESSAGE(whole.ok(), whole.status().message());
  CHECK(whole->stages.at(0).submesh_nodes == 2);
  CHECK(whole->stages.at(0).submesh_gpus_per_node == 8);
}

TEST_CASE("tensor parallelism: the vocabulary-parallel table's gradient is written as its split") {
  // t = 2 without sequence parallelism, one stage (the tied table's two gradients are summed
  // on it). Every backward operator of the embedding layer works on replicated tensors
  // (whole bytes on each GPU) except the word table's gradients: the lookup's scatter-add
  // reads the whole s x b x h gradient and writes its V / t rows, and the sum of the two
  // table gradients reads and writes split tables. Before, both were priced whole.
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.microbatch_size = 2;
  const TrainingSetup setup = training(16);
  auto lowered = lower_megatron_plan(tiny_gpt(), setup, plan, cm);
  REQUIRE_MESSAGE(lowered.ok(), lowered.status().message());
  const ir::Graph g = fp16_training_graph(plan.microbatch_size);
  const std::vector<ir::OpId> param = ir::weight_gradient_parameters(g);
  double expected = 0;
  int table_gradients = 0;
  for (const ir::Op& op : g.ops()) {
    if (op.layer != 0 || op.phase != ir::Phase::kBackward) continue;
    REQUIRE_FALSE(op.is_einsum());
    const ir::OpId p = param[static_cast<std::size_t>(op.id)];
    std::int64_t bytes = ir::memory_traffic_bytes(g, op);
    if (p != ir::kNoOp && g.op(p).name == "embedding/word_embeddings") {
      ++table_gradients;
      const bool sum = op.function == "add";
      bytes = ir::split_memory_traffic_bytes(g, op, sum ? 2 : 1, 2);
    }
    expected += cm.memory_bound(core::Bytes(bytes)).value();
  }
  CHECK(table_gradients == 2);  // the lookup's scatter-add, the sum with the head's dW
  const LoweredLayer& embedding = lowered->layers.front();
  REQUIRE(embedding.kind == "prologue");
  CHECK((embedding.memory_bound_backward_s - embedding.grad_accumulation_s).value() ==
        doctest::Approx(expected).epsilon(1e-12));
}

TEST_CASE("tensor parallelism: the embedding layer stores its replicated tensors whole, split under SP") {
  // t = 2. Without sequence parallelism the embedding layer's stored tensors (its dropout
  // mask, ...) are replicated: whole bytes on each GPU; its output is the first block's
  // input, which the block's closed form (Korthikanti) holds, so it is not counted twice.
  // With sequence parallelism every one is split. Before: all of it / t, the output included.
  const auto cm = dgx(1);
  const ir::Graph g = fp16_training_graph(2);
  std::int64_t whole = 0;
  for (const ir::Op& op : g.ops()) {
    if (op.layer != 0 || op.phase != ir::Phase::kForward || op.kind == ir::OpKind::kParameter) continue;
    bool read_here = false;
    for (ir::OpId c : g.consumers(op.id)) {
      const ir::Op& user = g.op(c);
      read_here |= user.layer == 0 && (user.phase == ir::Phase::kBackward || user.phase == ir::Phase::kRecompute);
    }
    if (read_here) whole += op.out.bytes();
  }
  REQUIRE(whole > 0);
  for (bool sp : {false, true}) {
    CAPTURE(sp);
    MegatronPlan plan;
    plan.tp = 2;
    plan.dp = 4;
    plan.microbatch_size = 2;
    plan.sequence_parallel = sp;
    auto lowered = lower_megatron_plan(tiny_gpt(), training(16), plan, cm);
    REQUIRE_MESSAGE(lowered.ok(), lowered.status().message());
    const LoweredLayer& embedding = lowered->layers.front();
    REQUIRE(embedding.kind == "prologue");
    CHECK(embedding.costs.activation_bytes.value() == (sp ? (whole + 1) / 2 : whole));
  }
}

TEST_CASE("the head stores the last block's output, its layer norm's input") {
  // The final layer norm's backward reads its input, the last block's output, and the
  // block's closed form (Korthikanti) does not hold the block's own output: the head stores
  // it. Before, it was counted nowhere (SC'21 7.5B: 16.8 MB per GPU, Korthikanti's 22B
  // without SP 3 % of the peak). Exact with t = 1 (nothing split): the head's stored bytes
  // are its own saved tensors plus the last block's tensors only the head's backward reads.
  const auto cm = dgx(1);
  const ir::Graph g = fp16_training_graph(2);
  const std::int32_t head = g.num_layers() - 1;
  std::int64_t expected = 0, from_block = 0;
  for (const ir::Op& op : g.ops()) {
    if (op.phase != ir::Phase::kForward || op.kind == ir::OpKind::kParameter) continue;
    if (op.layer != head && op.layer != head - 1) continue;
    bool read_by_head = false, read_by_own = false;
    for (ir::OpId c : g.consumers(op.id)) {
      const ir::Op& user = g.op(c);
      if (user.phase != ir::Phase::kBackward && user.phase != ir::Phase::kRecompute) continue;
      if (user.layer == head) read_by_head = true;
      if (user.layer == op.layer) read_by_own = true;
    }
    if (op.layer == head && read_by_head) expected += op.out.bytes();
    if (op.layer == head - 1 && read_by_head && !read_by_own) from_block += op.out.bytes();
  }
  CHECK(from_block == 2 * 32 * 64 * 2);  // the block's output: mbs · s · h · fp16
  MegatronPlan plan;
  plan.tp = 1;
  plan.dp = 8;
  plan.microbatch_size = 2;
  auto lowered = lower_megatron_plan(tiny_gpt(), training(16), plan, cm);
  REQUIRE_MESSAGE(lowered.ok(), lowered.status().message());
  const LoweredLayer& last = lowered->layers.back();
  REQUIRE(last.kind == "epilogue");
  CHECK(last.costs.activation_bytes.value() == expected + from_block);
}

TEST_CASE("tensor parallelism: 2 forward + 2 backward all-reduces per block of mbs·s·h bytes") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.microbatch_size = 2;
  auto lowered = lower_megatron_plan(tiny_gpt(), training(16), plan, cm);
  REQUIRE(lowered.ok());
  const std::int64_t bytes = 2 * 32 * 64 * 2;  // mbs · s · h · fp16
  auto group = cm.group(std::vector<std::int64_t>{0, 1});
  REQUIRE(group.ok());
  const double ar = cm.collective(cost_model::Collective::kAllReduce, core::Bytes(bytes), *group)
                        .time.value();
  const auto& block = lowered->layers[1];
  CHECK(block.kind == "transformer");
  CHECK(block.tp_collectives.forward_all_reduce == 2);   // attention out, fc2
  CHECK(block.tp_collectives.backward_all_reduce == 2);  // QKV input, fc1 input
  CHECK(block.tp_collectives.bytes_each.value() == bytes);
  CHECK(block.costs.forward_tp_comm_s.value() == doctest::Approx(2 * ar).epsilon(1e-12));
  CHECK(block.costs.backward_tp_comm_s.value() == doctest::Approx(2 * ar).epsilon(1e-12));
  // Vocab-parallel embedding all-reduces its output; the LM head its input gradient.
  CHECK(lowered->layers.front().tp_collectives.forward_all_reduce == 1);
  CHECK(lowered->layers.back().tp_collectives.backward_all_reduce == 1);

  plan.sequence_parallel = true;
  auto sp = lower_megatron_plan(tiny_gpt(), training(16), plan, cm);
  REQUIRE(sp.ok());
  const auto& c = sp->layers[1].tp_collectives;
  CHECK(c.forward_all_reduce == 0);
  CHECK(c.forward_all_gather == 2);
  CHECK(c.forward_reduce_scatter == 2);
  CHECK(c.backward_all_gather == 2);
  CHECK(c.backward_reduce_scatter == 2);
}

TEST_CASE("memory per GPU: Megatron's split of a block's parameters, ZeRO-1 states / dp") {
  // A GPT block has 12h² + 13h parameters. Split over tp: Q, K, V weights and biases
  // (3h² + 3h), the attention output weight (h²), fc1 weight and bias (4h² + 4h) and fc2
  // weight (4h²) = 12h² + 7h; replicated: the output and fc2 biases and both layer norms
  // (6h). h = 64, tp = 2: (49152 + 448) / 2 + 384 = 25184 parameters per GPU.
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.zero_stage = 1;
  auto lowered = lower_megatron_plan(tiny_gpt(), training(4), plan, cm);
  REQUIRE(lowered.ok());
  const auto& block = lowered->layers[1].costs;
  CHECK(block.parameter_bytes.value() == 25184 * 2);       // fp16
  CHECK(block.gradient_bytes.value() == 25184 * 2);        // ZeRO-1 keeps full gradients
  CHECK(block.optimizer_state_bytes.value() == 25184 * 12 / 4);  // fp32 master + 2 moments, / dp
  CHECK(block.grad_sync_bytes.value() == 25184 * 2);
  CHECK(lowered->problem.grad_sync_mode == GradSyncMode::kReduceScatterAllGather);
}

TEST_CASE("selective recomputation re-runs only the attention core") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.recompute = ir::RecomputePolicy::kSelective;
  auto lowered = lower_megatron_plan(tiny_gpt(), training(4), plan, cm);
  REQUIRE(lowered.ok());
  const auto& block = lowered->layers[1];
  // Recomputed matmuls: QK^T and attention x V, 2·2·b·s²·h / tp FLOPs = 2·2·32²·64 / 2.
  CHECK(block.recompute_flops.value() == doctest::Approx(2.0 * 2 * 32 * 32 * 64 / 2));
  CHECK(block.recompute_s.value() > 0);
  CHECK(block.recompute_s.value() < block.costs.forward_s.value());
  CHECK(lowered->problem.stages.front().recompute_s.value() ==
        doctest::Approx(block.recompute_s.value() * 4));  // one chunk: 4 blocks
}

TEST_CASE("fused attention: selective's activations, QK^T recomputed, no recompute policy needed") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  ir::ModelConfig fused = tiny_gpt();
  std::get<ir::TransformerConfig>(fused.spec).fused_attention = true;
  auto unfused_lowered = lower_megatron_plan(tiny_gpt(), training(4), plan, cm);
  auto lowered = lower_megatron_plan(fused, training(4), plan, cm);
  REQUIRE(unfused_lowered.ok());
  REQUIRE(lowered.ok());
  const auto& block = lowered->layers[1];
  // Only QK^T is recomputed: 2·b·s²·h / tp FLOPs = 2·32²·64 / 2 (selective also redoes x V).
  CHECK(block.recompute_flops.value() == doctest::Approx(2.0 * 32 * 32 * 64 / 2));
  CHECK(unfused_lowered->layers[1].recompute_flops.value() == 0);
  // Stored activations: Korthikanti's selective-recomputation formula for s = 32, b = 1,
  // h = 64, t = 2 without sequence parallelism: 10sbh + 24sbh/t.
  CHECK(block.costs.activation_bytes.value() == 10 * 32 * 64 + 24 * 32 * 64 / 2);
  CHECK(unfused_lowered->layers[1].costs.activation_bytes.value() ==
        ir::korthikanti_activation_bytes_per_layer(32, 1, 64, 4, 2, false, ir::RecomputePolicy::kNone));
}

TEST_CASE("--pipeline-model-parallel-layout: layers per chunk, its grammar's errors, the even split it can write") {
  // DeepSeek-V3's 61 blocks on 16 stages: E + 3, fourteen of 4, 2 + L (layers per chunk
  // count the embedding and the head).
  auto dsv3 = parse_pipeline_layout("Et*3|(t*4|)*14t*2L", 16, 61);
  REQUIRE_MESSAGE(dsv3.ok(), dsv3.status().message());
  std::vector<int> expected(16, 4);
  expected.back() = 3;
  CHECK(*dsv3 == expected);
  CHECK(*parse_pipeline_layout("EtL", 1, 1) == std::vector<int>{3});
  CHECK(*parse_pipeline_layout("E|t t|((t)*2)*1|L", 4, 4) == std::vector<int>{1, 2, 2, 1});
  auto error = [](std::string_view layout, std::int64_t chunks, std::int64_t blocks) {
    return parse_pipeline_layout(layout, chunks, blocks).status().message();
  };
  const std::string key = "/search/megatron/pipeline_model_parallel_layout: ";
  CHECK(error("Ett|ttL", 4, 4) == key + "2 stages, expected pp·interleave = 4 (in \"Ett|ttL\")");
  CHECK(error("Ett|tmL", 2, 4) == key + "multi-token-prediction layers ('m') are not modelled (in \"Ett|tmL\")");
  CHECK(error("tEt|ttL", 2, 4) == key + "the embedding 'E' must open the first stage, once (in \"tEt|ttL\")");
  CHECK(error("Ett|tLt", 2, 4) == key + "the loss 'L' must close the last stage, once (in \"Ett|tLt\")");
  CHECK(error("Ett|tL", 2, 4) == key + "3 transformer blocks 't', the model has 4 (in \"Ett|tL\")");
  CHECK(error("E(tt|ttL", 2, 4) == key + "'(' without ')' (in \"E(tt|ttL\")");
  CHECK(error("Ett)|ttL", 2, 4) == key + "')' without '(' (in \"Ett)|ttL\")");
  CHECK(error("Et*0t|ttL", 2, 4) == key + "'*' needs a positive count (in \"Et*0t|ttL\")");
  CHECK(error("E||ttttL", 3, 4) ==
        key + "stage 1 holds no layer (legal in Megatron-Core, not modelled here) (in \"E||ttttL\")");
  CHECK(*parse_pipeline_layout("Et*3|(tt|)*29,t|L", 32, 62) == parse_pipeline_layout("Et*3|(tt|)*29t|L", 32, 62).value());
  CHECK(error("Et*999999999|L", 2, 4) == key + "longer than the model's layers (in \"Et*999999999|L\")");
  CHECK(parse_pipeline_layout("E(()*1000000)*1000000tttt|L", 2, 4).ok());  // empty groups add nothing

  // A layout that writes the even split lowers to the same iteration as the plan without it;
  // an uneven one moves two blocks to the second stage and changes it.
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.pp = 2;
  plan.dp = 4;
  const auto model = tiny_gpt(4);
  auto even = lower_megatron_plan(model, training(8), plan, cm);
  plan.pipeline_layout = "Ett|ttL";
  auto written = lower_megatron_plan(model, training(8), plan, cm);
  plan.pipeline_layout = "E|ttttL";
  auto skewed = lower_megatron_plan(model, training(8), plan, cm);
  for (const auto* r : {&even, &written, &skewed}) REQUIRE_MESSAGE(r->ok(), r->status().message());
  auto time_of = [](const LoweredPlan& p) { return simulate_pipeline(p.problem).value().report.iteration_time.value(); };
  CHECK(time_of(*written) == time_of(*even));
  CHECK(time_of(*skewed) > time_of(*even));
  plan.first_stage_layers = 1;
  CHECK(lower_megatron_plan(model, training(8), plan, cm).status().message() ==
        "/search/megatron/pipeline_model_parallel_layout: cannot be combined with first_stage_layers, "
        "last_stage_layers or the account_for_* splits");
}

TEST_CASE("pipeline sends share the NICs they leave a node through: 1 NIC vs 8") {
  // tp = 8, pp = 2 on two p3.16xlarge-like nodes: each stage's 8 GPUs send their 1/8
  // shards at once. One 25 Gb/s NIC per node carries all 8 (each at 1/8 of it); with 8
  // NICs each flow has its own, so the transfer takes 1/8 of the time, latency aside.
  auto send_s = [](std::int64_t nics) {
    auto spec = cluster::make_preset_cluster("aws-p3.16xlarge", 2);
    REQUIRE(spec.ok());
    spec->inter_node.nics_per_node = nics;
    auto cm = cost_model::CostModel::create(*spec, cost_model::default_params());
    REQUIRE(cm.ok());
    MegatronPlan plan;
    plan.tp = 8;
    plan.pp = 2;
    plan.microbatch_size = 16;  // 16·32 tokens · 8192 · 2 B / 8 = 1 MiB per flow
    auto lowered = lower_megatron_plan(tiny_gpt(4, 8192), training(32), plan, *cm);
    REQUIRE_MESSAGE(lowered.ok(), lowered.status().message());
    return lowered->p2p_send_s.value();
  };
  const double one = send_s(1);
  const double eight = send_s(8);
  MESSAGE("send 1 NIC " << one << " s, 8 NICs " << eight << " s");
  CHECK(one > 6 * eight);  // 8x the wire time; the latency is paid once in both
  CHECK(one < 8 * eight);
}

TEST_CASE("pipeline: p2p carries 1/tp of the boundary tensor, layers split evenly") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.pp = 2;
  plan.dp = 2;
  plan.interleave = 2;
  auto lowered = lower_megatron_plan(tiny_gpt(), training(8), plan, cm);
  REQUIRE(lowered.ok());
  CHECK(lowered->p2p_bytes.value() == 32 * 64 * 2 / 2);  // s·h·fp16 / tp
  CHECK(lowered->layers_per_chunk == std::vector<int>{2, 1, 1, 2});
  CHECK(lowered->problem.schedule == PipelineSchedule::kInterleaved1F1B);
  CHECK(lowered->problem.stages.front().output_reshard == ReshardMode::kLocalAllGather);
  CHECK(lowered->problem.stages.front().reshard_group == 2);
  // Stage 0 (GPUs 0..3) sends to stage 1 (GPUs 4..7) over NVSwitch.
  CHECK(lowered->p2p_send_s.value() ==
        doctest::Approx(cm.send_recv(core::Bytes(32 * 64), 0, 4).time.value()));
  CHECK(lowered->problem.stages.front().grad_sync_s.has_value());
}

TEST_CASE("uneven pipeline split: first and last stage blocks as Megatron-LM's flags say") {
  // 10 blocks on 4 stages: 2 first, 2 last, the middle two stages 3 each; embedding on the
  // first chunk, head on the last.
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.pp = 4;
  plan.dp = 2;
  plan.first_stage_layers = 2;
  plan.last_stage_layers = 2;
  auto lowered = lower_megatron_plan(tiny_gpt(10), training(8), plan, cm);
  REQUIRE_MESSAGE(lowered.ok(), lowered.status().message());
  CHECK(lowered->layers_per_chunk == std::vector<int>{3, 3, 3, 3});
  plan.first_stage_layers = 4;
  plan.last_stage_layers = 0;
  lowered = lower_megatron_plan(tiny_gpt(10), training(8), plan, cm);
  REQUIRE(lowered.ok());
  CHECK(lowered->layers_per_chunk == std::vector<int>{5, 2, 2, 3});
  plan.first_stage_layers = 3;
  auto bad = lower_megatron_plan(tiny_gpt(10), training(8), plan, cm);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "/search/megatron/first_stage_layers: the other 3 stages cannot split the remaining 7 layers evenly");
  plan.first_stage_layers = 2;
  plan.interleave = 2;
  bad = lower_megatron_plan(tiny_gpt(10), training(8), plan, cm);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "/search/megatron/first_stage_layers: needs pp > 1 and interleave 1 (as Megatron-LM's uneven pipeline split)");
  // Embedding and loss counted as blocks: 14 + 2 = 8 chunks (pp 4, interleave 2) of 2; the
  // first and last chunks hold one block beside the embedding / the head.
  plan.first_stage_layers = 0;
  plan.last_stage_layers = 0;
  plan.account_for_embedding = true;
  plan.account_for_loss = true;
  auto accounted = lower_megatron_plan(tiny_gpt(14), training(8), plan, cm);
  REQUIRE_MESSAGE(accounted.ok(), accounted.status().message());
  CHECK(accounted->layers_per_chunk == std::vector<int>{2, 2, 2, 2, 2, 2, 2, 2});
  plan.account_for_loss = false;
  bad = lower_megatron_plan(tiny_gpt(14), training(8), plan, cm);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "/search/megatron/account_for_embedding_in_pipeline_split: 14 layers + 1 do not split evenly "
        "into pp·interleave = 8 model chunks");
  plan.first_stage_layers = 2;
  plan.interleave = 1;
  bad = lower_megatron_plan(tiny_gpt(10), training(8), plan, cm);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "/search/megatron/account_for_embedding_in_pipeline_split: cannot be combined with "
        "first_stage_layers / last_stage_layers");
}

// A 2-block GPT of real GEMM sizes (sequence 2,048, hidden 4,096, 32 heads) on tp 2 x dp 4
// with sequence parallelism: at the tiny GPT's 32 tokens the low-precision GEMM curves'
// larger half-efficiency sizes make their GEMMs no faster, as on real GPUs.
constexpr std::int64_t kGemmSizedHidden = 4096;
std::pair<ir::ModelConfig, MegatronPlan> gemm_sized_gpt() {
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.sequence_parallel = true;
  auto model = tiny_gpt(2, kGemmSizedHidden);
  std::get<ir::TransformerConfig>(model.spec).seq_len = 2048;
  std::get<ir::TransformerConfig>(model.spec).num_heads = 32;
  std::get<ir::TransformerConfig>(model.spec).num_kv_heads = 32;
  return {model, plan};
}

TEST_CASE("fp8: block linears' GEMMs at the fp8 rate, fp8 weight copies, bf16 everywhere else") {
  const auto cm = preset_cost_model("dgx-h100", 1);
  const auto [model, plan] = gemm_sized_gpt();
  const std::int64_t hidden = kGemmSizedHidden;
  const TrainingSetup bf16 = testing::training_setup(4, core::DType::kBf16);
  TrainingSetup fp8 = bf16;
  fp8.dtype = core::DType::kFp8;
  auto a = lower_megatron_plan(model, bf16, plan, cm);
  auto b = lower_megatron_plan(model, fp8, plan, cm);
  REQUIRE_MESSAGE(a.ok(), a.status().message());
  REQUIRE_MESSAGE(b.ok(), b.status().message());
  const auto& ba = a->layers[1];
  const auto& bb = b->layers[1];
  // The linears run at up to 2x the rate (H100: 1,979 vs 989 TFLOP/s dense); the attention
  // core stays bf16, so the block's GEMMs speed up by less than 2x.
  CHECK(bb.gemm_forward_s.value() < ba.gemm_forward_s.value());
  CHECK(bb.gemm_forward_s.value() > ba.gemm_forward_s.value() / 2);
  CHECK(bb.gemm_backward_s.value() < ba.gemm_backward_s.value());
  // Casts: forward inputs and backward output gradients are extra memory-bound work.
  CHECK(bb.memory_bound_forward_s.value() > ba.memory_bound_forward_s.value());
  CHECK(bb.memory_bound_backward_s.value() > ba.memory_bound_backward_s.value());
  // Embedding and LM head: bf16 GEMMs, untouched.
  CHECK(b->layers.back().gemm_forward_s.value() == a->layers.back().gemm_forward_s.value());
  CHECK(b->layers.front().costs.forward_s.value() == a->layers.front().costs.forward_s.value());
  // Memory: the fp8 weight and its transpose, 1 byte each, of the block's 12·h^2 linear
  // weights (QKV 3h^2, out h^2, fc1 4h^2, fc2 4h^2) split tp ways; nothing else changes.
  CHECK(bb.costs.parameter_bytes.value() - ba.costs.parameter_bytes.value() ==
        2 * 12 * hidden * hidden / 2);
  CHECK(bb.costs.gradient_bytes.value() == ba.costs.gradient_bytes.value());
  CHECK(bb.costs.optimizer_state_bytes.value() == ba.costs.optimizer_state_bytes.value());
  CHECK(bb.costs.activation_bytes.value() == ba.costs.activation_bytes.value());
  CHECK(bb.costs.forward_tp_comm_s.value() == ba.costs.forward_tp_comm_s.value());
  // The weight casts run once per iteration, with the optimizer step.
  CHECK(bb.costs.optimizer_step_s.value() > ba.costs.optimizer_step_s.value());
  auto ta = simulate_pipeline(a->problem);
  auto tb = simulate_pipeline(b->problem);
  REQUIRE(ta.ok());
  REQUIRE(tb.ok());
  CHECK(tb->report.iteration_time.value() < ta->report.iteration_time.value());
  // A GPU without fp8 tensor cores is an error naming it.
  auto on_a100 = lower_megatron_plan(model, fp8, plan, dgx(1));
  REQUIRE_FALSE(on_a100.ok());
  CHECK(on_a100.status().message() ==
        "/training/dtype: fp8 needs fp8 tensor cores (Hopper or later); the NVIDIA A100-SXM4-80GB has none");
}

TEST_CASE("mxfp8 and nvfp4 (Blackwell): fp8's GEMMs at the fp8 and fp4 rates, block-scaled casts and copies") {
  const auto cm = preset_cost_model("dgx-b200", 1);
  const auto [model, plan] = gemm_sized_gpt();
  const std::int64_t hidden = kGemmSizedHidden;
  const TrainingSetup bf16 = testing::training_setup(4, core::DType::kBf16);
  TrainingSetup fp8 = bf16;
  fp8.dtype = core::DType::kFp8;
  TrainingSetup mx = bf16;
  mx.block_scaled = BlockScaled::kMxfp8;
  TrainingSetup nv = bf16;
  nv.block_scaled = BlockScaled::kNvfp4;
  auto a = lower_megatron_plan(model, bf16, plan, cm);
  auto f = lower_megatron_plan(model, fp8, plan, cm);
  auto m = lower_megatron_plan(model, mx, plan, cm);
  auto n = lower_megatron_plan(model, nv, plan, cm);
  for (const auto* r : {&a, &f, &m, &n}) REQUIRE_MESSAGE(r->ok(), r->status().message());
  const auto& la = a->layers[1];
  const auto& lf = f->layers[1];
  const auto& lm = m->layers[1];
  const auto& ln = n->layers[1];
  // MXFP8 GEMMs run at the fp8 rate: the same GEMM time as per-tensor fp8.
  CHECK(lm.gemm_forward_s.value() == lf.gemm_forward_s.value());
  CHECK(lm.gemm_backward_s.value() == lf.gemm_backward_s.value());
  // NVFP4: the linears at the fp4 peak (B200: 10,000 vs 4,500 TFLOP/s), the attention core
  // still bf16: faster than fp8, by less than 2x.
  CHECK(ln.gemm_forward_s.value() < lf.gemm_forward_s.value());
  CHECK(ln.gemm_forward_s.value() > lf.gemm_forward_s.value() / 2);
  CHECK(ln.gemm_backward_s.value() < lf.gemm_backward_s.value());
  // Casts: two block-scaled copies per input (rowwise and columnwise) cost more than fp8's
  // one fused copy; NVFP4 re-reads the input for its Hadamard-transformed copy.
  CHECK(lm.memory_bound_forward_s.value() > lf.memory_bound_forward_s.value());
  CHECK(ln.memory_bound_forward_s.value() > lm.memory_bound_forward_s.value());
  // Weight copies of the block's 12·h^2 linear weights split tp ways: two of 1 + 1/32 bytes
  // per weight (MXFP8), two of 0.5 + 1/16 (NVFP4), against fp8's one byte: Blackwell's fp8
  // GEMMs take any layout, so Transformer Engine keeps no transpose there (Hopper: below).
  const double weights = 12.0 * hidden * hidden / 2;
  CHECK(lf.costs.parameter_bytes.value() - la.costs.parameter_bytes.value() == weights);
  CHECK(lm.costs.parameter_bytes.value() - la.costs.parameter_bytes.value() ==
        static_cast<std::int64_t>(std::ceil(2 * (1 + 1.0 / 32) * weights)));
  CHECK(ln.costs.parameter_bytes.value() - la.costs.parameter_bytes.value() ==
        static_cast<std::int64_t>(std::ceil(2 * (0.5 + 1.0 / 16) * weights)));
  // The embedding and LM head stay bf16.
  CHECK(n->layers.back().gemm_forward_s.value() == a->layers.back().gemm_forward_s.value());
  auto tf = simulate_pipeline(f->problem);
  auto tn = simulate_pipeline(n->problem);
  REQUIRE(tf.ok());
  REQUIRE(tn.ok());
  CHECK(tn->report.iteration_time.value() < tf->report.iteration_time.value());
  // Hopper runs fp8 GEMMs in the TN layout only: the weight's fp8 copy and its transpose,
  // two bytes per weight.
  const auto h100 = preset_cost_model("dgx-h100", 1);
  auto a_h = lower_megatron_plan(model, bf16, plan, h100);
  auto f_h = lower_megatron_plan(model, fp8, plan, h100);
  REQUIRE(a_h.ok());
  REQUIRE(f_h.ok());
  CHECK(f_h->layers[1].costs.parameter_bytes.value() - a_h->layers[1].costs.parameter_bytes.value() ==
        2 * weights);
  // Hopper has no block-scaled formats: an error naming the GPU.
  auto on_h100 = lower_megatron_plan(model, mx, plan, h100);
  REQUIRE_FALSE(on_h100.ok());
  CHECK(on_h100.status().message() ==
        "/training/dtype: mxfp8 needs Blackwell tensor cores (block-scaled formats: B200, B300, GB200, GB300); the "
        "NVIDIA H100 "
        "80GB HBM3 (SXM5) has none");
  // No plan-file form yet.
  auto file = megatron_plan_file(model, nv, plan, cm.spec());
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().message() == "training.dtype: mxfp8 and nvfp4 have no plan-file form yet");
}

// A two-block LLaMA-style model (`builtin` "llama" or "mixtral"), 4 heads, fused attention;
// with `experts` > 0 every block is MoE (top-2, capacity factor 1, one group of all tokens).
ir::ModelConfig two_block_model(const std::string& builtin, std::int64_t hidden, std::int64_t ffn,
                                std::int64_t seq_len, std::int64_t vocab, std::int64_t experts = 0) {
  ir::TransformerConfig t;
  t.builtin = builtin;
  t.num_layers = 2;
  t.hidden_size = hidden;
  t.num_heads = 4;
  t.num_kv_heads = 4;
  t.ffn_hidden_size = ffn;
  t.seq_len = seq_len;
  t.vocab_size = vocab;
  if (experts > 0) {
    t.num_experts = experts;
    t.top_k = 2;
    t.moe_layer_interval = 1;
    t.capacity_factor = 1.0;
  }
  ir::set_architecture_defaults(t);
  t.fused_attention = true;
  return {"two blocks", t};
}

TEST_CASE("low precision saves the linears' quantized inputs for the backward (Llama)") {
  // A Llama block saves, per token, the inputs of its four linears: the two RMSNorm outputs
  // (h each: only the QKV and fc1 weight gradients read them), the flash-attention output O
  // (h: the attention backward reads it too) and the SwiGLU output (ffn: only fc2's weight
  // gradient reads it). Transformer Engine keeps the quantized copy for the weight gradient:
  // fp8 saves 1 byte instead of 2 on the linear-only inputs (h + h + ffn) and adds a 1-byte
  // copy of O (h), so the block stores s·b·(h + ffn) bytes less than in bf16; NVFP4 stores
  // 0.5625 bytes instead of 2 on the linear-only inputs and adds 0.5625 for O.
  const auto cm = preset_cost_model("dgx-b200", 1);
  MegatronPlan plan;
  plan.dp = 8;
  const ir::ModelConfig model = two_block_model("llama", 256, 704, 128, 512);
  const TrainingSetup bf16 = testing::training_setup(8, core::DType::kBf16);
  TrainingSetup fp8 = bf16;
  fp8.dtype = core::DType::kFp8;
  TrainingSetup nv = bf16;
  nv.block_scaled = BlockScaled::kNvfp4;
  auto a = lower_megatron_plan(model, bf16, plan, cm);
  auto f = lower_megatron_plan(model, fp8, plan, cm);
  auto n = lower_megatron_plan(model, nv, plan, cm);
  for (const auto* r : {&a, &f, &n}) REQUIRE_MESSAGE(r->ok(), r->status().message());
  const std::int64_t tokens = 128, h = 256, ffn = 704;
  const std::int64_t bf16_saved = a->layers[1].costs.activation_bytes.value();
  CHECK(bf16_saved - f->layers[1].costs.activation_bytes.value() == tokens * (h + ffn));
  const double nvfp4_expected = static_cast<double>(bf16_saved) -
                                tokens * ((2 - 0.5625) * (2 * h + ffn) - 0.5625 * h);
  CHECK(static_cast<double>(n->layers[1].costs.activation_bytes.value()) ==
        doctest::Approx(nvfp4_expected).epsilon(1e-12));
  // The embedding and LM head are not Transformer Engine linears: unchanged.
  CHECK(f->layers.front().costs.activation_bytes.value() == a->layers.front().costs.activation_bytes.value());
  CHECK(f->layers.back().costs.activation_bytes.value() == a->layers.back().costs.activation_bytes.value());
}

TEST_CASE("expert parallelism: experts split ep ways, token all-to-alls over the ep group") {
  // A Mixtral-style model: 8 experts, top-2, one group of all 64 tokens, capacity factor 1:
  // each expert takes 64·2/8 = 16 token slots, so the dispatched tensor is 8 x 16 x 64
  // elements, 16,384 bytes in bf16 (tp 1: one GPU sends all of it).
  const ir::ModelConfig model = two_block_model("mixtral", 64, 128, 64, 128, /*experts=*/8);
  const auto cm = preset_cost_model("dgx-h100", 1);
  const TrainingSetup bf16 = testing::training_setup(8, core::DType::kBf16);
  MegatronPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  auto dense_experts = lower_megatron_plan(model, bf16, plan, cm);
  plan.ep = 8;
  auto ep8 = lower_megatron_plan(model, bf16, plan, cm);
  REQUIRE_MESSAGE(dense_experts.ok(), dense_experts.status().message());
  REQUIRE_MESSAGE(ep8.ok(), ep8.status().message());
  const auto& a = dense_experts->layers[1];
  const auto& b = ep8->layers[1];
  CHECK(a.ep_all_to_all_bytes.value() == 0);
  CHECK(a.ep_comm_forward_s.value() == 0);
  CHECK(b.ep_all_to_all_bytes.value() == 8 * 16 * 64 * 2);
  const std::vector<std::int64_t> ep_ids = {0, 1, 2, 3, 4, 5, 6, 7};
  const double one = cm.collective(cost_model::Collective::kAllToAll, core::Bytes(8 * 16 * 64 * 2),
                                   cm.group(ep_ids).value())
                         .time.value();
  CHECK(b.ep_comm_forward_s.value() == doctest::Approx(2 * one).epsilon(1e-12));
  CHECK(b.ep_comm_backward_s.value() == doctest::Approx(2 * one).epsilon(1e-12));
  CHECK(b.costs.forward_s.value() ==
        doctest::Approx(b.gemm_forward_s.value() + b.memory_bound_forward_s.value() +
                        b.costs.forward_tp_comm_s.value() + b.ep_comm_forward_s.value())
            .epsilon(1e-12));
  // Trace events: the two all-to-alls after the layer's (here: no) tp collectives, and first
  // in the backward.
  REQUIRE(b.costs.forward_collectives.size() == 2);
  CHECK(b.costs.forward_collectives[0].collective == "all_to_all");
  CHECK(b.costs.forward_collectives[0].category == "ep_collective");
  CHECK(b.costs.forward_collectives[0].group_size == 8);
  CHECK(b.costs.forward_collectives[0].bytes == 8 * 16 * 64 * 2);
  CHECK(b.costs.forward_collectives[1].time.value() == doctest::Approx(one).epsilon(1e-12));
  REQUIRE(b.costs.backward_collectives.size() == 2);
  CHECK(a.costs.forward_collectives.empty());
  auto sim8 = simulate_pipeline(ep8->problem);
  REQUIRE(sim8.ok());
  // Parameters: 8 experts x 3 x 64 x 128 weights, one per GPU under ep 8 (bf16 bytes).
  const std::int64_t experts = 8 * 3 * 64 * 128;
  CHECK(a.costs.parameter_bytes.value() - b.costs.parameter_bytes.value() == 2 * experts * 7 / 8);
  // Optimizer states: the dense weights shard over dp = 8; the experts over the expert-data-
  // parallel group, tp·dp / ep = 1 GPU: one expert unsharded = all eight sharded 8 ways.
  CHECK(a.costs.optimizer_state_bytes.value() == b.costs.optimizer_state_bytes.value());
  // Errors name the key.
  plan.ep = 3;
  auto bad = lower_megatron_plan(model, bf16, plan, cm);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "/search/megatron/ep: expected a divisor of num_experts 8, got 3");
  plan.ep = 8;
  plan.etp = 2;
  bad = lower_megatron_plan(model, bf16, plan, cm);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "/search/megatron/ep: ep·etp = 8·2 = 16 does not divide tp·cp·dp = 8 (Megatron-Core folds "
        "the expert ranks into those GPUs)");
  plan.etp = 0;
  auto dense = lower_megatron_plan(tiny_gpt(2), bf16, plan, cm);
  REQUIRE_FALSE(dense.ok());
  CHECK(dense.status().message() == "/search/megatron/ep: needs a mixture-of-experts model (num_experts > 0)");
}

TEST_CASE("a shared expert is a dense MLP of the MoE block: split tp ways, not ep ways, its GEMMs priced") {
  // The Mixtral-style model above with a shared expert of width 96 (3 x 64 x 96 weights per
  // block), on 8 GPUs as tp 2 x dp 4 with ep 4: the shared expert's weights split over tp
  // (Megatron's column/row split of a dense MLP), not over ep like the routed experts.
  ir::ModelConfig model = two_block_model("mixtral", 64, 128, 64, 128, /*experts=*/8);
  ir::ModelConfig shared = model;
  std::get<ir::TransformerConfig>(shared.spec).shared_expert_ffn_hidden_size = 96;
  const auto cm = preset_cost_model("dgx-h100", 1);
  const TrainingSetup bf16 = testing::training_setup(8, core::DType::kBf16);
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.ep = 4;
  plan.sequence_parallel = true;
  auto a = lower_megatron_plan(model, bf16, plan, cm);
  auto b = lower_megatron_plan(shared, bf16, plan, cm);
  REQUIRE_MESSAGE(a.ok(), a.status().message());
  REQUIRE_MESSAGE(b.ok(), b.status().message());
  const auto& la = a->layers[1];
  const auto& lb = b->layers[1];
  CHECK(lb.costs.parameter_bytes.value() - la.costs.parameter_bytes.value() == 2 * 3 * 64 * 96 / 2);
  // Its three GEMMs forward (gate, up, down on the tp-local width 48), two per GEMM backward.
  cost_model::GemmShape gate;  // [b·s, h] x [h, 96 / tp]
  gate.m = 64;
  gate.n = 48;
  gate.k = 64;
  gate.dtype = core::DType::kBf16;
  cost_model::GemmShape down = gate;  // [b·s, 96 / tp] x [96 / tp, h]
  down.n = 64;
  down.k = 48;
  const double shared_forward_s = 2 * cm.gemm(gate).time.value() + cm.gemm(down).time.value();
  CHECK(lb.gemm_forward_s.value() - la.gemm_forward_s.value() == doctest::Approx(shared_forward_s).epsilon(1e-9));
  CHECK(lb.gemm_backward_s.value() > la.gemm_backward_s.value());
  // The routed experts' all-to-all is the same: the shared expert reads the tokens in place.
  CHECK(lb.ep_all_to_all_bytes.value() == la.ep_all_to_all_bytes.value());
}

TEST_CASE("expert gradients synchronise over the expert-data-parallel group, dense ones over dp") {
  // 16 H100 (2 nodes), dp 16, ep 8: each GPU holds one of the 8 experts of a layer, and the
  // 16 / 8 = 2 GPUs holding the same expert (GPUs e and 8 + e: one per node) all-reduce its
  // gradient; the dense weights' gradients go over all 16 (Megatron-Core's expert DDP).
  const ir::ModelConfig model = two_block_model("mixtral", 64, 128, 64, 128, /*experts=*/8);
  const auto cm = preset_cost_model("dgx-h100", 2);
  const TrainingSetup bf16 = testing::training_setup(16, core::DType::kBf16);
  MegatronPlan plan;
  plan.dp = 16;
  plan.ep = 8;
  auto lowered = lower_megatron_plan(model, bf16, plan, cm);
  REQUIRE_MESSAGE(lowered.ok(), lowered.status().message());
  const sim::StageCosts& st = lowered->problem.stages.at(0);
  REQUIRE(st.grad_sync_collectives.size() == 2);
  const auto& dense = st.grad_sync_collectives[0];
  const auto& experts = st.grad_sync_collectives[1];
  // Per GPU: one expert of each of the 2 MoE layers, 3 x 64 x 128 weights, bf16.
  const std::int64_t expert_bytes = 2 * 3 * 64 * 128 * 2;
  CHECK(experts.where == "expert gradients");
  CHECK(experts.group_size == 2);
  CHECK(experts.bytes == expert_bytes);
  CHECK(dense.where == "gradients");
  CHECK(dense.group_size == 16);
  CHECK(dense.bytes + experts.bytes == st.grad_sync_bytes.value());
  const std::vector<std::vector<std::int64_t>> pairs = {{0, 8}, {1, 9}, {2, 10}, {3, 11},
                                                        {4, 12}, {5, 13}, {6, 14}, {7, 15}};
  const double pair_s = cm.collective(cost_model::Collective::kAllReduce, core::Bytes(expert_bytes),
                                      cm.concurrent_groups(pairs).value().front())
                            .time.value();
  CHECK(experts.time.value() == doctest::Approx(pair_s).epsilon(1e-12));
  CHECK(st.grad_sync_s->value() == doctest::Approx(dense.time.value() + experts.time.value()).epsilon(1e-12));
  // Without expert parallelism the two groups are the same GPUs: one all-reduce of all.
  plan.ep = 1;
  auto folded = lower_megatron_plan(model, bf16, plan, cm);
  REQUIRE(folded.ok());
  REQUIRE(folded->problem.stages.at(0).grad_sync_collectives.size() == 1);
  CHECK(folded->problem.stages.at(0).grad_sync_collectives[0].bytes ==
        folded->problem.stages.at(0).grad_sync_bytes.value());
  // ep = dp = 8 on one node: every expert shard lives on one GPU, nothing to synchronise;
  // the dense gradients alone go over the 8 GPUs.
  const auto node = preset_cost_model("dgx-h100", 1);
  const TrainingSetup eight = testing::training_setup(8, core::DType::kBf16);
  plan.dp = 8;
  plan.ep = 8;
  auto full_ep = lower_megatron_plan(model, eight, plan, node);
  REQUIRE(full_ep.ok());
  const sim::StageCosts& f = full_ep->problem.stages.at(0);
  REQUIRE(f.grad_sync_collectives.size() == 1);
  CHECK(f.grad_sync_collectives[0].where == "gradients");
  CHECK(f.grad_sync_collectives[0].bytes == f.grad_sync_bytes.value() - expert_bytes);
  // tp 2, etp 1, ep 1, no data parallelism: each GPU holds every expert whole, so the tp
  // group's 2 GPUs are the experts' data-parallel group and all-reduce their gradients; the
  // dense weights are split by tp and have no replica to synchronise with.
  plan.dp = 1;
  plan.ep = 1;
  plan.tp = 2;
  plan.etp = 1;
  auto tp2 = lower_megatron_plan(model, training(2), plan, preset_cost_model("dgx-h100", 1, /*gpus_per_node=*/2));
  REQUIRE_MESSAGE(tp2.ok(), tp2.status().message());
  const sim::StageCosts& t2 = tp2->problem.stages.at(0);
  REQUIRE(t2.grad_sync_collectives.size() == 1);
  CHECK(t2.grad_sync_collectives[0].where == "expert gradients");
  CHECK(t2.grad_sync_collectives[0].group_size == 2);
  CHECK(t2.grad_sync_s->value() > 0);
}

TEST_CASE("experts kept whole (etp 1) need no tensor-parallel collective, and under userbuffers the expert side stays blocking") {
  const ir::ModelConfig model = two_block_model("mixtral", 64, 128, 64, 128, /*experts=*/8);
  const auto pair = preset_cost_model("dgx-h100", 1, /*gpus_per_node=*/2);
  MegatronPlan plan;
  plan.tp = 2;
  plan.sequence_parallel = true;
  auto lower = [&](std::int64_t etp, bool overlap) {
    MegatronPlan p = plan;
    p.etp = etp;
    p.tp_comm_overlap = overlap;
    auto r = lower_megatron_plan(model, training(2), p, pair);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    return std::move(r).value();
  };
  const LoweredPlan whole = lower(1, false), split = lower(2, false);
  // A MoE block: QKV's input gathered and proj's output scattered; with etp 2 the experts'
  // fc1 input (the dispatched tokens) and fc2 output too; with etp 1 not.
  const TpCollectives& w = whole.layers[1].tp_collectives;
  const TpCollectives& x = split.layers[1].tp_collectives;
  CHECK(w.forward_all_gather == 1);
  CHECK(w.forward_reduce_scatter == 1);
  CHECK(x.forward_all_gather == 2);
  CHECK(x.forward_reduce_scatter == 2);
  // Under userbuffers the attention's collectives are priced the same in both; the expert
  // side's, which only etp 2 has, stays exposed in full.
  const LoweredPlan whole_ub = lower(1, true), split_ub = lower(2, true);
  const auto& wb = whole_ub.layers[1];
  const auto& xb = split_ub.layers[1];
  CHECK(wb.tp_comm_hidden_forward_s.value() > 0);
  CHECK(xb.tp_comm_hidden_forward_s.value() == doctest::Approx(wb.tp_comm_hidden_forward_s.value()).epsilon(1e-12));
  CHECK(xb.costs.forward_tp_comm_s.value() - wb.costs.forward_tp_comm_s.value() ==
        doctest::Approx(split.layers[1].costs.forward_tp_comm_s.value() -
                        whole.layers[1].costs.forward_tp_comm_s.value())
            .epsilon(1e-9));
}

TEST_CASE("full recomputation re-runs each block's forward with its collectives") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.recompute = ir::RecomputePolicy::kFull;
  auto lowered = lower_megatron_plan(tiny_gpt(), training(4), plan, cm);
  REQUIRE(lowered.ok());
  const auto& block = lowered->layers[1];
  CHECK(block.recompute_s.value() == doctest::Approx(block.costs.forward_s.value()).epsilon(1e-9));
  CHECK(lowered->layers.front().recompute_s.value() == 0);  // embedding not recomputed
  // Stored: the block inputs only, 2·s·b·h bytes each (Korthikanti Table 2, "full").
  CHECK(block.costs.activation_bytes.value() == 2 * 32 * 64);
}

TEST_CASE("errors name the field") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.pp = 2;
  auto r = lower_megatron_plan(tiny_gpt(), training(8), plan, cm);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "/search/megatron/tp: tp·pp·dp = 4 GPUs but the cluster has 8");
  plan.dp = 2;
  plan.interleave = 3;
  r = lower_megatron_plan(tiny_gpt(), training(8), plan, cm);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "/search/megatron/interleave: 4 layers do not split evenly into pp·interleave = 6 "
        "model chunks");
}

TEST_CASE("a plan that does not fit names the device, the excess and the component") {
  // 16 blocks of hidden 8192 (12·16·8192² ~ 12.9B parameters) with mixed-precision Adam
  // (2 + 2 + 12 bytes per parameter ~ 206 GB) on one 80 GB GPU.
  auto spec = cluster::make_preset_cluster("dgx-a100-80gb", 1);
  REQUIRE(spec.ok());
  spec->gpus_per_node = 1;
  auto cm = cost_model::CostModel::create(*spec, cost_model::default_params());
  REQUIRE(cm.ok());
  MegatronPlan plan;
  auto lowered = lower_megatron_plan(tiny_gpt(16, 8192), training(1), plan, *cm);
  REQUIRE(lowered.ok());
  auto sim = simulate_pipeline(lowered->problem);
  REQUIRE(sim.ok());
  REQUIRE(sim->report.overflows.size() == 1);
  const auto& o = sim->report.overflows.front();
  CHECK(o.device == 0);
  CHECK(o.excess_bytes == o.peak_bytes - o.limit_bytes);
  CHECK(o.excess_bytes > 0);
  CHECK(o.largest == MemoryComponent::kOptimizerStates);  // 12 of 16 bytes per parameter
  // The limit is the usable memory: 80 GiB less the preset's 5 GiB reserve.
  CHECK(o.limit_bytes == core::gib(75).value());

  spec->reserved_memory = core::gib(1);
  auto cm1 = cost_model::CostModel::create(*spec, cost_model::default_params());
  REQUIRE(cm1.ok());
  auto sim1 = simulate_pipeline(lower_megatron_plan(tiny_gpt(16, 8192), training(1), plan, *cm1)->problem);
  REQUIRE(sim1.ok());
  REQUIRE(sim1->report.overflows.size() == 1);
  CHECK(sim1->report.overflows.front().limit_bytes == core::gib(79).value());
}

TEST_CASE("determinism: the same plan lowers and simulates to identical text") {
  const auto cm = dgx(2);
  MegatronPlan plan;
  plan.tp = 4;
  plan.pp = 2;
  plan.dp = 2;
  plan.interleave = 2;
  plan.recompute = ir::RecomputePolicy::kSelective;
  plan.zero_stage = 1;
  auto a = lower_megatron_plan(tiny_gpt(), training(16), plan, cm);
  auto b = lower_megatron_plan(tiny_gpt(), training(16), plan, cm);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto ja = problem_to_json(a->problem);
  auto jb = problem_to_json(b->problem);
  REQUIRE(ja.ok());
  REQUIRE(jb.ok());
  CHECK(*ja == *jb);
  auto sa = simulate_pipeline(a->problem);
  auto sb = simulate_pipeline(b->problem);
  REQUIRE(sa.ok());
  REQUIRE(sb.ok());
  CHECK(report_json(sa->report) == report_json(sb->report));
  CHECK(a->problem.grad_sync_mode == GradSyncMode::kReduceScatterAllGather);
}

// A plan file equivalent to tp 2, pp 2, dp 2 on one 8-GPU node: two stages on 2 x 2
// logical meshes (rows data parallel, cols tensor parallel), the equal split of 4 blocks.
schema::Plan megatron_like_plan(const cost_model::CostModel& cm) {
  schema::Plan plan;
  plan.model = tiny_gpt();
  plan.cluster = cm.spec();
  plan.global_batch_size = 8;
  plan.num_microbatches = 4;  // microbatch = 8 / (dp 2 · 4) = 1
  for (int s = 0; s < 2; ++s) {
    schema::PlanStage st;
    st.layer_begin = s == 0 ? 0 : 3;  // embedding + 2 blocks | 2 blocks + head
    st.layer_end = s == 0 ? 3 : 6;
    st.submesh_nodes = 1;
    st.submesh_gpus_per_node = 4;
    st.logical_rows = 2;
    st.logical_cols = 2;
    for (int d = 0; d < 4; ++d) st.device_ids.push_back(4 * s + d);
    plan.stages.push_back(st);
  }
  return plan;
}

TEST_CASE("plan files: a Megatron-like plan lowers like the Megatron plan, others are unimplemented") {
  const auto cm = dgx(1);
  schema::Plan plan = megatron_like_plan(cm);
  auto from_file = lower_plan_file(plan, cm);
  REQUIRE(from_file.ok());
  MegatronPlan m;
  m.tp = 2;
  m.pp = 2;
  m.dp = 2;
  auto direct = lower_megatron_plan(tiny_gpt(), training(8), m, cm);
  REQUIRE(direct.ok());
  CHECK(*problem_to_json(from_file->problem) == *problem_to_json(direct->problem));

  plan.stages[1].layer_begin = 4;
  auto bad_range = lower_plan_file(plan, cm);
  REQUIRE_FALSE(bad_range.ok());
  CHECK(bad_range.status().message() ==
        "plan: /stages/1: layer range [4, 6) is not the equal Megatron split; expected [3, 6)");

  plan = megatron_like_plan(cm);
  schema::OperatorSharding sharding;
  sharding.op = "block1/attn/q";
  plan.stages[0].shardings.push_back(sharding);
  auto custom = lower_plan_file(plan, cm);
  REQUIRE_FALSE(custom.ok());
  CHECK(custom.status().code() == core::StatusCode::kUnimplemented);

  plan = megatron_like_plan(cm);
  std::swap(plan.stages[1].device_ids[0], plan.stages[1].device_ids[1]);
  auto placed = lower_plan_file(plan, cm);
  REQUIRE_FALSE(placed.ok());
  CHECK(placed.status().message() ==
        "plan: /stages/1/device_ids/0: device 5 is not in Megatron's order (expected 4); other "
        "placements are not lowered yet");
}

}  // namespace
}  // namespace alpasim::sim::lowering

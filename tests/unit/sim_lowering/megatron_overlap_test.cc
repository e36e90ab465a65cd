// Megatron-Core's communication overlaps (issue 16): each flag shortens the exposed
// communication by the closed form documented at sim::lowering::MegatronPlan, and Megatron's
// own argument checks are errors naming the field.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cluster/cluster_spec.h"
#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "ir/builders.h"
#include "sim/lowering/megatron_lowering.h"
#include "sim/pipeline_sim.h"
#include "tests/unit/sim_lowering/lowering_fixtures.h"

namespace alpasim::sim::lowering {
namespace {

using testing::preset_cost_model;

// GPT blocks of 16 heads at 1,024 tokens, vocabulary 32,768: GEMMs large enough that the
// overlaps have compute to hide behind.
ir::ModelConfig gpt(std::int64_t layers, std::int64_t hidden) {
  return testing::gpt_model(layers, hidden, 16, 1024, 32768);
}

using testing::dgx;

TrainingSetup bf16(std::int64_t batch) { return testing::training_setup(batch, core::DType::kBf16); }

double iteration_s(const LoweredPlan& lowered) {
  auto sim = simulate_pipeline(lowered.problem);
  REQUIRE_MESSAGE(sim.ok(), sim.status().message());
  return sim->report.iteration_time.value();
}

// One tensor-parallel collective of `bytes` over GPUs 0..tp-1.
double collective_s(const cost_model::CostModel& cm, cost_model::Collective c, std::int64_t bytes,
                    std::int64_t tp) {
  std::vector<std::int64_t> ranks;
  for (std::int64_t r = 0; r < tp; ++r) ranks.push_back(r);
  auto group = cm.group(ranks);
  REQUIRE(group.ok());
  return cm.collective(c, core::Bytes(bytes), *group).time.value();
}

TEST_CASE("tp_comm_overlap: userbuffers pair each collective with its own GEMM, embedding and head stay blocking") {
  const auto cm = dgx(1);  // A100: 108 SMs
  MegatronPlan plan;
  plan.tp = 8;
  plan.sequence_parallel = true;
  const auto model = gpt(2, 2048);
  auto off = lower_megatron_plan(model, bf16(4), plan, cm);
  plan.tp_comm_overlap = true;  // Transformer Engine's default settings
  auto on = lower_megatron_plan(model, bf16(4), plan, cm);
  REQUIRE(off.ok());
  REQUIRE(on.ok());
  // Two column-parallel inputs per block (QKV's and fc1's), b·s·h bf16 each.
  const double regather = 2 * collective_s(cm, cost_model::Collective::kAllGather, 1 * 1024 * 2048 * 2, 8);
  for (std::size_t l = 0; l < off->layers.size(); ++l) {
    CAPTURE(l);
    const auto& a = off->layers[l];
    const auto& b = on->layers[l];
    const bool block = a.kind == "transformer";
    // Every collective is counted once, exposed or hidden; the backward of a block adds the
    // re-gather of its column-parallel inputs.
    CHECK(b.costs.forward_tp_comm_s.value() + b.tp_comm_hidden_forward_s.value() ==
          doctest::Approx(a.costs.forward_tp_comm_s.value()).epsilon(1e-12));
    CHECK(b.costs.backward_tp_comm_s.value() + b.tp_comm_hidden_backward_s.value() ==
          doctest::Approx(a.costs.backward_tp_comm_s.value() + (block ? regather : 0.0)).epsilon(1e-12));
    if (!block) {
      // Megatron's embedding and output layer are not userbuffers layers.
      CHECK(b.tp_comm_hidden_forward_s.value() == 0);
      CHECK(b.tp_comm_hidden_backward_s.value() == 0);
      CHECK(b.costs.forward_s.value() == doctest::Approx(a.costs.forward_s.value()).epsilon(1e-12));
      continue;
    }
    CHECK(b.tp_comm_hidden_forward_s.value() > 0);
    CHECK(b.tp_comm_hidden_backward_s.value() > 0);
    // The GEMMs pay for the overlap: chunks of fewer tokens (ring exchange: tp of them;
    // pipeline: 4) and 16 of the 108 SMs given to the communication (pipeline, bulk).
    CHECK(b.gemm_forward_s.value() > a.gemm_forward_s.value());
    CHECK(b.gemm_backward_s.value() > a.gemm_backward_s.value());
    CHECK(b.memory_bound_forward_s.value() == a.memory_bound_forward_s.value());
  }
  // Each role's setting moves only its own GEMMs: more SMs for proj's and fc2's scatters
  // slow the forward alone; bulk without SMs speeds the backward alone.
  auto with = [&](auto&& change) {
    MegatronPlan p = plan;
    change(p.tp_comm_overlap_cfg);
    auto r = lower_megatron_plan(model, bf16(4), p, cm);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    return std::move(r).value().layers[1];
  };
  const auto& te = on->layers[1];
  const auto more_sms = with([](TpOverlapConfig& c) {
    c[TpOverlapGemmRole::kProjFprop].num_sm = 32;
    c[TpOverlapGemmRole::kFc2Fprop].num_sm = 32;
  });
  CHECK(more_sms.gemm_forward_s.value() > te.gemm_forward_s.value());
  CHECK(more_sms.gemm_backward_s.value() == te.gemm_backward_s.value());
  CHECK(more_sms.costs.backward_tp_comm_s.value() == te.costs.backward_tp_comm_s.value());
  const auto free_bulk = with([](TpOverlapConfig& c) {
    for (auto r : {TpOverlapGemmRole::kQkvDgrad, TpOverlapGemmRole::kQkvWgrad, TpOverlapGemmRole::kFc1Dgrad,
                   TpOverlapGemmRole::kFc1Wgrad}) {
      c[r].num_sm = 0;
    }
  });
  CHECK(free_bulk.gemm_backward_s.value() < te.gemm_backward_s.value());
  CHECK(free_bulk.gemm_forward_s.value() == te.gemm_forward_s.value());
  CHECK(free_bulk.costs.forward_tp_comm_s.value() == te.costs.forward_tp_comm_s.value());
  // Userbuffers run only where the plan asks: a config without the flag is inert.
  plan.tp_comm_overlap = false;
  plan.tp_comm_overlap_cfg[TpOverlapGemmRole::kProjFprop].num_sm = 32;
  auto inert = lower_megatron_plan(model, bf16(4), plan, cm);
  REQUIRE(inert.ok());
  CHECK(iteration_s(*inert) == iteration_s(*off));
}

TEST_CASE("tp_comm_overlap in fp8 runs: all-gathers carry the quantized tensor, pipelined scatters when fp8_buf says so") {
  using cost_model::Collective;
  MegatronPlan plan;
  plan.tp = 8;
  plan.sequence_parallel = true;
  plan.tp_comm_overlap = true;
  const auto model = gpt(2, 2048);
  const std::int64_t n = 1 * 1024 * 2048;  // elements of a block's activation (b·s·h)
  auto totals = [](const LoweredPlan& lowered) {
    const auto& b = lowered.layers[1];
    return std::pair{b.costs.forward_tp_comm_s.value() + b.tp_comm_hidden_forward_s.value(),
                     b.costs.backward_tp_comm_s.value() + b.tp_comm_hidden_backward_s.value()};
  };
  const auto h100 = preset_cost_model("dgx-h100", 1);
  const TrainingSetup fp8 = testing::training_setup(4, core::DType::kFp8);
  auto te = lower_megatron_plan(model, fp8, plan, h100);
  REQUIRE(te.ok());
  const auto [fwd, bwd] = totals(*te);
  // Forward: QKV's and fc1's inputs gathered in fp8, proj's and fc2's outputs scattered in
  // bf16 (TE's default fp8_buf is off for them). Backward: proj's and fc2's output gradients
  // and the two re-gathers in fp8, the two input-gradient scatters in bf16.
  const double ag8 = collective_s(h100, Collective::kAllGather, n, 8);
  const double rs16 = collective_s(h100, Collective::kReduceScatter, 2 * n, 8);
  CHECK(fwd == doctest::Approx(2 * ag8 + 2 * rs16).epsilon(1e-9));
  CHECK(bwd == doctest::Approx(4 * ag8 + 2 * rs16).epsilon(1e-9));
  // fp8_buf on the pipelined scatters (as NeMo's recipes set it): their partials in fp8 too;
  // on the weight-gradient scatters (bulk) Transformer Engine ignores it, and so does this.
  for (auto r : {TpOverlapGemmRole::kProjFprop, TpOverlapGemmRole::kFc2Fprop, TpOverlapGemmRole::kQkvWgrad,
                 TpOverlapGemmRole::kFc1Wgrad}) {
    plan.tp_comm_overlap_cfg[r].fp8_buf = true;
  }
  auto scatter8 = lower_megatron_plan(model, fp8, plan, h100);
  REQUIRE(scatter8.ok());
  const double rs8 = collective_s(h100, Collective::kReduceScatter, n, 8);
  CHECK(totals(*scatter8).first == doctest::Approx(2 * ag8 + 2 * rs8).epsilon(1e-9));
  CHECK(totals(*scatter8).second == doctest::Approx(bwd).epsilon(1e-12));
  // A bf16 run has no fp8 buffer: the same settings change nothing there.
  auto bf16_set = lower_megatron_plan(model, bf16(4), plan, h100);
  plan.tp_comm_overlap_cfg = TpOverlapConfig{};
  auto bf16_te = lower_megatron_plan(model, bf16(4), plan, h100);
  REQUIRE(bf16_set.ok());
  REQUIRE(bf16_te.ok());
  CHECK(iteration_s(*bf16_set) == iteration_s(*bf16_te));
  // MXFP8 on a B200: 1 byte per element plus an E8M0 scale per 32.
  const auto b200 = preset_cost_model("dgx-b200", 1);
  TrainingSetup mx = testing::training_setup(4, core::DType::kBf16);
  mx.block_scaled = BlockScaled::kMxfp8;
  auto mxfp8 = lower_megatron_plan(model, mx, plan, b200);
  REQUIRE_MESSAGE(mxfp8.ok(), mxfp8.status().message());
  CHECK(totals(*mxfp8).first ==
        doctest::Approx(2 * collective_s(b200, Collective::kAllGather, n + n / 32, 8) +
                        2 * collective_s(b200, Collective::kReduceScatter, 2 * n, 8))
            .epsilon(1e-9));
}

TEST_CASE("tp_comm_overlap_cfg: settings a GPU cannot run are errors naming the key") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 8;
  plan.sequence_parallel = true;
  plan.tp_comm_overlap = true;
  plan.tp_comm_overlap_cfg[TpOverlapGemmRole::kProjFprop].num_sm = 108;
  auto r = lower_megatron_plan(gpt(2, 2048), bf16(4), plan, cm);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "/search/megatron/tp_comm_overlap_cfg/proj_fprop/num_sm: expected 0 .. 107 (the GPU has 108 "
        "SMs), got 108");
  plan.tp_comm_overlap_cfg = TpOverlapConfig{};
  plan.tp_comm_overlap_cfg[TpOverlapGemmRole::kProjDgrad].method = TpOverlapMethod::kBulk;
  r = lower_megatron_plan(gpt(2, 2048), bf16(4), plan, cm);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "/search/megatron/tp_comm_overlap_cfg/proj_dgrad/method: expected \"ring_exchange\" (what "
        "Transformer Engine runs for proj_dgrad), got \"bulk\"");
}

TEST_CASE("overlap_grad_reduce: Megatron-Core's buckets sync during the last backward") {
  // 4 blocks of hidden 2048 on one stage: 4 · 12 · 2048^2 ≈ 201M parameters plus the
  // embedding, with dp = 8: max(40M, 8M) = 40M parameters per bucket.
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.dp = 8;
  const auto model = gpt(4, 2048);
  auto off = lower_megatron_plan(model, bf16(8), plan, cm);
  plan.overlap_grad_reduce = true;
  auto on = lower_megatron_plan(model, bf16(8), plan, cm);
  REQUIRE(off.ok());
  REQUIRE(on.ok());
  std::int64_t params = 0;
  for (const auto& l : on->layers) params += l.costs.grad_sync_bytes.value() / 2;
  const auto buckets = static_cast<int>((params + 40'000'000 - 1) / 40'000'000);
  CHECK(buckets > 1);
  CHECK(off->grad_sync_buckets == 1);
  CHECK(on->grad_sync_buckets == buckets);
  CHECK(on->problem.grad_sync_buckets == buckets);
  // Each bucket is its own all-reduce of 1/buckets of the bytes.
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < 8; ++i) ids.push_back(i);
  const std::vector<std::vector<std::int64_t>> groups{ids};
  auto group = cm.concurrent_groups(groups);
  REQUIRE(group.ok());
  const auto& st = on->problem.stages.front();
  const std::int64_t bucket_bytes = (st.grad_sync_bytes.value() + buckets - 1) / buckets;
  CHECK(st.grad_sync_s->value() ==
        doctest::Approx(cm.collective(cost_model::Collective::kAllReduce, core::Bytes(bucket_bytes),
                                      group->front()).time.value() * buckets).epsilon(1e-12));
  // All but the last bucket hide behind the backward of the last microbatch.
  const double t_off = iteration_s(*off);
  const double t_on = iteration_s(*on);
  MESSAGE("grad reduce: " << t_off << " s -> " << t_on << " s, " << buckets << " buckets");
  CHECK(t_on < t_off);
  // An explicit bucket size is obeyed.
  plan.ddp_bucket_size_params = params;
  auto one = lower_megatron_plan(model, bf16(8), plan, cm);
  REQUIRE(one.ok());
  CHECK(one->grad_sync_buckets == 1);
}

TEST_CASE("overlap_param_gather: the first bucket and what one forward cannot hide stay exposed") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  plan.overlap_grad_reduce = true;
  const auto model = gpt(4, 2048);
  auto off = lower_megatron_plan(model, bf16(8), plan, cm);
  plan.overlap_param_gather = true;
  auto on = lower_megatron_plan(model, bf16(8), plan, cm);
  REQUIRE(off.ok());
  REQUIRE(on.ok());
  const int buckets = on->grad_sync_buckets;
  REQUIRE(buckets > 1);
  const auto& a = off->problem.stages.front();
  const auto& b = on->problem.stages.front();
  const double whole = a.param_all_gather_s->value();
  const double first = whole / buckets;
  const double want = first + std::max(0.0, whole - first - b.forward_s.value());
  CHECK(b.param_all_gather_s->value() == doctest::Approx(want).epsilon(1e-12));
  CHECK(b.param_all_gather_s->value() < whole);
  CHECK(iteration_s(*on) < iteration_s(*off));
}

TEST_CASE("overlap_p2p_comm: asynchronous sends for the interleaved schedule only") {
  const auto cm = dgx(1);
  MegatronPlan plan;
  plan.tp = 2;
  plan.pp = 2;
  plan.dp = 2;
  plan.interleave = 2;
  const auto model = gpt(4, 1024);
  auto blocking = lower_megatron_plan(model, bf16(16), plan, cm);
  plan.overlap_p2p_comm = true;
  auto overlapped = lower_megatron_plan(model, bf16(16), plan, cm);
  REQUIRE(blocking.ok());
  REQUIRE(overlapped.ok());
  CHECK(blocking->problem.blocking_p2p);
  CHECK_FALSE(overlapped->problem.blocking_p2p);
  CHECK(iteration_s(*overlapped) < iteration_s(*blocking));
  // Plain 1F1B: Megatron-Core keeps its batched blocking calls whatever the flag says.
  plan.interleave = 1;
  auto plain = lower_megatron_plan(model, bf16(16), plan, cm);
  REQUIRE(plain.ok());
  CHECK(plain->problem.blocking_p2p);
}

TEST_CASE("context parallelism: s/cp tokens per GPU, the attention core over all keys, a K/V ring") {
  // 8 GPUs as dp 8 or as dp 4 x cp 2, sequence 4,096: the same work in total. A LLaMA-style
  // block (rotary positions: no table whose size depends on the sequence).
  const auto cm = dgx(1);
  auto model = gpt(2, 2048);
  auto& cfg = std::get<ir::TransformerConfig>(model.spec);
  cfg.builtin = "llama";
  ir::set_architecture_defaults(cfg);
  cfg.seq_len = 4096;
  cfg.fused_attention = true;
  MegatronPlan plain;
  plain.dp = 8;
  MegatronPlan ring = plain;
  ring.dp = 4;
  ring.cp = 2;
  auto a = lower_megatron_plan(model, bf16(8), plain, cm);
  auto b = lower_megatron_plan(model, bf16(4), ring, cm);
  REQUIRE_MESSAGE(a.ok(), a.status().message());
  REQUIRE_MESSAGE(b.ok(), b.status().message());
  auto sa = simulate_pipeline(a->problem);
  auto sb = simulate_pipeline(b->problem);
  REQUIRE(sa.ok());
  REQUIRE(sb.ok());
  // Model FLOPs of an iteration (8 sequences in both): the cp pair shares each sequence.
  CHECK(sb->report.model_flops.value() / 4 ==
        doctest::Approx(sa->report.model_flops.value() / 8).epsilon(1e-9));
  CHECK(sb->report.num_gpus == 8);
  // Per GPU a block's linears see half the tokens, its attention core the same work as a
  // GPU holding the whole sequence for half the heads' queries: forward FLOPs halve.
  CHECK(b->layers[1].costs.forward_flops.value() ==
        doctest::Approx(a->layers[1].costs.forward_flops.value() / 2).epsilon(1e-9));
  // Each ring step carries K and V of b · s/cp tokens: 2 · 1 · 2048 · 16 heads · 128 · 2 B.
  CHECK(b->layers[1].cp_kv_bytes_per_step.value() == 2 * 1 * 2048 * 16 * 128 * 2);
  CHECK(a->layers[1].cp_kv_bytes_per_step.value() == 0);
  // Exposed exchange: (cp - 1) steps of max(0, hop - core/cp); over NVSwitch the attention
  // of a 2,048-token chunk hides the 16 MiB hop.
  CHECK(b->layers[1].cp_comm_forward_s.value() >= 0);
  CHECK(b->layers[1].cp_comm_forward_s.value() < 1e-3);
  // Across nodes the 16 MiB hop crosses one HDR NIC (25 GB/s, about 0.7 ms) and outlasts a
  // step of attention: exposed, and the trace lists it (category cp_collective) with the
  // step's bytes, once per phase.
  const auto cm2 = dgx(2);
  MegatronPlan across = ring;
  across.tp = 8;
  across.dp = 1;
  auto c = lower_megatron_plan(model, bf16(1), across, cm2);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  const auto& lc = c->layers[1];
  CHECK(lc.cp_comm_forward_s.value() > 0);
  std::vector<sim::BlockingCollective> ring_events;
  for (const auto& call : lc.costs.forward_collectives) {
    if (call.category == "cp_collective") ring_events.push_back(call);
  }
  REQUIRE(ring_events.size() == 1);
  CHECK(ring_events[0].time.value() == lc.cp_comm_forward_s.value());
  CHECK(ring_events[0].bytes == lc.cp_kv_bytes_per_step.value());  // cp - 1 = 1 step
  CHECK(ring_events[0].group_size == 2);
  for (const auto& call : b->layers[1].costs.forward_collectives) {
    CHECK((call.category != "cp_collective" || b->layers[1].cp_comm_forward_s.value() > 0));
  }
  // Gradients and the optimizer span dp·cp = 8 GPUs, as in the plain plan.
  CHECK(b->problem.data_parallel == 8);
  CHECK(b->problem.stages.front().grad_sync_s->value() ==
        doctest::Approx(a->problem.stages.front().grad_sync_s->value()).epsilon(1e-12));
  // Megatron-Core's requirements.
  ring.cp = 3;
  ring.dp = 1;
  const auto cm3 = preset_cost_model("dgx-a100-80gb", 1, /*gpus_per_node=*/3);
  auto odd = lower_megatron_plan(model, bf16(1), ring, cm3);
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.status().message() ==
        "/search/megatron/cp: sequence length 4096 is not a multiple of 2·cp = 6 (Megatron-Core "
        "splits each sequence into 2·cp chunks)");
  cfg.fused_attention = false;
  ring.cp = 2;
  ring.dp = 4;
  auto unfused = lower_megatron_plan(model, bf16(4), ring, cm);
  REQUIRE_FALSE(unfused.ok());
  CHECK(unfused.status().message() ==
        "/search/megatron/cp: needs fused attention (Megatron-Core's context parallelism runs "
        "inside Transformer Engine's flash attention)");
  auto learned = lower_megatron_plan(gpt(2, 2048), bf16(4), ring, cm);
  REQUIRE_FALSE(learned.ok());
  CHECK(learned.status().message().rfind("/search/megatron/cp: a learned position table", 0) == 0);
}

TEST_CASE("overlap flags: Megatron-LM's own requirements are errors naming the field") {
  const auto cm = dgx(1);
  const auto model = gpt(2, 1024);
  MegatronPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.tp_comm_overlap = true;
  auto r = lower_megatron_plan(model, bf16(8), plan, cm);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "/search/megatron/tp_comm_overlap: needs sequence_parallel (Megatron-LM requires it)");
  plan.tp_comm_overlap = false;
  plan.overlap_param_gather = true;
  r = lower_megatron_plan(model, bf16(8), plan, cm);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "/search/megatron/overlap_param_gather: needs the distributed optimizer "
        "(\"distributed_optimizer\": true or zero_stage >= 1)");
  plan.zero_stage = 1;
  r = lower_megatron_plan(model, bf16(8), plan, cm);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "/search/megatron/overlap_param_gather: needs overlap_grad_reduce (Megatron-LM requires it)");
}

}  // namespace
}  // namespace alpasim::sim::lowering

namespace alpasim::sim::lowering {
namespace {

// Issue 17 #7: every tensor-parallel collective is its own trace event, nested in the
// compute task it blocks, with bytes, group and algorithm; together they are exactly the
// task's tensor-parallel communication.
TEST_CASE("the trace shows each tensor-parallel collective inside its task") {
  const auto cm = testing::dgx(1);
  const auto model = testing::gpt_model(2, 1024, 16, 512, 32768);
  for (const bool sp : {false, true}) {
    CAPTURE(sp);
    MegatronPlan plan;
    plan.tp = 4;
    plan.pp = 2;
    plan.sequence_parallel = sp;
    plan.recompute = ir::RecomputePolicy::kFull;
    auto lowered = lower_megatron_plan(model, testing::training_setup(8, core::DType::kBf16), plan, cm);
    REQUIRE(lowered.ok());
    auto sim = simulate_pipeline(lowered->problem);
    REQUIRE(sim.ok());
    const auto slices = collective_trace_slices(lowered->problem, sim->graph, sim->timeline);
    REQUIRE(slices.size() == sim->graph.tasks().size());
    int forwards = 0;
    for (std::size_t t = 0; t < slices.size(); ++t) {
      const TaskLabel& label = sim->graph.tasks()[t].label;
      const bool compute = label.kind == TaskKind::kForward || label.kind == TaskKind::kBackward ||
                           label.kind == TaskKind::kRecompute;
      if (label.part >= 0 || label.chunk < 0 || !compute) continue;
      const StageCosts& st = lowered->problem.stages[static_cast<std::size_t>(label.chunk)];
      const Time length = sim->timeline.end[t] - sim->timeline.start[t];
      Time sum = 0;
      for (const TraceSlice& s : slices[t]) {
        CHECK(s.cat == "tp_collective");
        CHECK(s.offset + s.duration <= length);
        CHECK(s.args.find("\"group\":4") != std::string::npos);
        sum += s.duration;
      }
      if (label.kind == TaskKind::kForward) {
        ++forwards;
        // Each block: 2 all-reduces (attention output, MLP output); with sequence
        // parallelism 2 all-gathers (inputs) and 2 reduce-scatters (outputs) instead. (The
        // embedding's vocabulary-parallel output adds one of its own.)
        CHECK(slices[t].size() == st.forward_collectives.size());
        int gathers = 0, scatters = 0, reduces = 0;
        for (const auto& s : slices[t]) {
          if (s.name.find(" block") == std::string::npos) continue;
          gathers += s.name.rfind("all_gather ", 0) == 0;
          scatters += s.name.rfind("reduce_scatter ", 0) == 0;
          reduces += s.name.rfind("all_reduce ", 0) == 0;
        }
        if (sp) {
          CHECK(gathers == scatters);
          CHECK(gathers > 0);
          CHECK(reduces == 0);
        } else {
          CHECK(reduces > 0);
          CHECK(reduces % 2 == 0);
          CHECK(gathers + scatters == 0);
        }
        // The slices are the task's tensor-parallel time, to 1 ns of rounding per slice.
        CHECK(std::abs(static_cast<double>(sum) - st.forward_tp_comm_s.value() * 1e9) <=
              static_cast<double>(slices[t].size()));
      }
      if (label.kind == TaskKind::kRecompute) {
        // Full recomputation re-runs the blocks' forward collectives (not the embedding's).
        CHECK(slices[t].size() == st.recompute_collectives.size());
        CHECK(slices[t].size() <= st.forward_collectives.size());
      }
      if (label.kind == TaskKind::kBackward) {
        CHECK(std::abs(static_cast<double>(sum) - st.backward_tp_comm_s.value() * 1e9) <=
              static_cast<double>(slices[t].size()));
      }
    }
    CHECK(forwards > 0);
    // In the Chrome trace: one nested event per collective, with its bytes.
    TraceOptions options;
    options.task_slices = slices;
    const std::string json = chrome_trace_json(sim->graph, sim->timeline, options);
    std::size_t events = 0;
    for (const auto& task : slices) {
      for (const auto& s : task) events += s.cat == "tp_collective";
    }
    std::size_t found = 0;
    for (auto at = json.find("\"cat\":\"tp_collective\""); at != std::string::npos;
         at = json.find("\"cat\":\"tp_collective\"", at + 1)) {
      ++found;
    }
    CHECK(found == events);
    CHECK(json.find(sp ? "\"collective\":\"reduce_scatter\",\"bytes\":" : "\"collective\":\"all_reduce\",\"bytes\":") !=
          std::string::npos);
    // Past the event budget only the first and last 4 microbatches keep theirs.
    const auto bounded = collective_trace_slices(lowered->problem, sim->graph, sim->timeline,
                                                 /*max_events=*/1);
    for (std::size_t t = 0; t < bounded.size(); ++t) {
      const int mb = sim->graph.tasks()[t].label.microbatch;
      const bool edge = mb < 4 || mb >= lowered->problem.num_microbatches - 4;
      CHECK(bounded[t].size() == (edge ? slices[t].size() : 0u));
    }
  }
}

// Issue 17 #7: the gradient collectives (each bucket's data-parallel reduce-scatter, the
// tied embedding's all-reduce between the first and last stage), the parameter all-gather
// and the stage-boundary all-gather are trace events too, nested in their own tasks with
// bytes, group and algorithm.
TEST_CASE("the trace shows the gradient, parameter and stage-boundary collectives inside their tasks") {
  const auto cm = testing::dgx(2);
  const auto model = testing::gpt_model(2, 1024, 16, 512, 32768);
  MegatronPlan plan;
  plan.tp = 4;
  plan.pp = 2;
  plan.dp = 2;
  plan.zero_stage = 1;
  plan.overlap_grad_reduce = true;
  plan.ddp_bucket_size_params = 2'000'000;  // several buckets per chunk
  auto lowered = lower_megatron_plan(model, testing::training_setup(16, core::DType::kBf16), plan, cm);
  REQUIRE(lowered.ok());
  const PipelineProblem& pb = lowered->problem;
  const int buckets = pb.grad_sync_buckets;
  REQUIRE(buckets > 1);
  auto sim = simulate_pipeline(pb);
  REQUIRE(sim.ok());
  const auto slices = collective_trace_slices(pb, sim->graph, sim->timeline);
  // Per chunk: the bucket shares of each gradient collective, summed over the buckets.
  std::vector<std::map<std::string, std::int64_t>> sync_bytes(pb.stages.size());
  int reshards = 0, gathers = 0;
  for (std::size_t t = 0; t < slices.size(); ++t) {
    const TaskLabel& label = sim->graph.tasks()[t].label;
    const Time length = sim->timeline.end[t] - sim->timeline.start[t];
    for (const TraceSlice& s : slices[t]) CHECK(s.offset + s.duration <= length);
    if (label.kind == TaskKind::kGradSync) {
      const StageCosts& st = pb.stages[static_cast<std::size_t>(label.chunk)];
      REQUIRE(slices[t].size() == st.grad_sync_collectives.size());
      Time sum = 0;
      for (std::size_t i = 0; i < slices[t].size(); ++i) {
        const TraceSlice& s = slices[t][i];
        CHECK(s.cat == "grad_collective");
        const auto at = s.args.find("\"bytes\":");
        REQUIRE(at != std::string::npos);
        sync_bytes[static_cast<std::size_t>(label.chunk)][s.name] += std::stoll(s.args.substr(at + 8));
        sum += s.duration;
      }
      // The bucket's task is its 1/buckets share of grad_sync_s: the slices fill it.
      CHECK(std::abs(static_cast<double>(sum) - st.grad_sync_s->value() * 1e9 / buckets) <= 2.0 * slices[t].size());
      CHECK(slices[t].front().name == "reduce_scatter gradients");
      CHECK(slices[t].front().args.find("\"group\":2,\"algorithm\":\"") != std::string::npos);
    }
    if (label.kind == TaskKind::kParamAllGather) {
      REQUIRE(slices[t].size() == 1u);
      CHECK(slices[t][0].name == "all_gather parameters");
      CHECK(slices[t][0].cat == "grad_collective");
      ++gathers;
    }
    if (label.kind == TaskKind::kReshardAllGather) {
      REQUIRE(slices[t].size() == 1u);
      const StageCosts& st = pb.stages.front();
      // The whole boundary tensor over the receiving mesh's tensor-parallel group.
      CHECK(slices[t][0].args == "\"collective\":\"all_gather\",\"bytes\":" +
                                     std::to_string(st.output_activation_bytes.value()) +
                                     ",\"group\":4,\"algorithm\":\"" + st.reshard_collectives[0].algorithm +
                                     "\",\"layer\":\"stage boundary\"");
      CHECK(slices[t][0].cat == "reshard_collective");
      CHECK(slices[t][0].duration == length);
      ++reshards;
    }
  }
  // Every microbatch crosses the one boundary twice (activation forward, gradient back).
  CHECK(reshards == 2 * pb.num_microbatches);
  CHECK(gathers == static_cast<int>(pb.stages.size()));
  for (std::size_t c = 0; c < pb.stages.size(); ++c) {
    CAPTURE(c);
    const auto& got = sync_bytes[c];
    // The buckets' shares add up to the chunk's gradients; the first and last chunk also
    // all-reduce the tied word embedding's gradient (fp32 main_grad) with each other.
    REQUIRE(got.count("reduce_scatter gradients") == 1u);
    CHECK(got.at("reduce_scatter gradients") == pb.stages[c].grad_sync_bytes.value());
    REQUIRE(got.count("all_reduce tied embedding") == 1u);
    CHECK(got.at("all_reduce tied embedding") == pb.stages[c].grad_sync_collectives.back().bytes);
    CHECK(pb.stages[c].grad_sync_collectives.back().group_size == 2);
  }
  TraceOptions options;
  options.task_slices = slices;
  const std::string json = chrome_trace_json(sim->graph, sim->timeline, options);
  CHECK(json.find("\"cat\":\"grad_collective\"") != std::string::npos);
  CHECK(json.find("\"cat\":\"reshard_collective\"") != std::string::npos);
}

}  // namespace
}  // namespace alpasim::sim::lowering

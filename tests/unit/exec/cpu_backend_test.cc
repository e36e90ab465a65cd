// The CPU backend runs sharded plans and must reproduce the unsharded reference: the same
// loss and the same gradients (and, for SGD, the same updated weights).
//
// Tolerance: |sharded − reference| <= 1e-4 · max|reference| + 1e-6 per tensor. Both runs are
// fp32 (24-bit significand, eps 1.2e-7); they differ only in the order of sums (microbatch
// accumulation, the all-reduce over devices, matmuls over split batches). Each gradient here
// is a sum of at most a few hundred terms, so reordering moves it by at most ~1e2 · eps of
// its largest magnitude, about 1e-5 relative: 1e-4 leaves a 10x margin, while a wrong shard,
// a missing 1/k or a lost microbatch changes a gradient by 10 % or more.
#include "exec/cpu/cpu_backend.h"

#include <doctest/doctest.h>

#include <cmath>

#include "exec/cpu/cpu_kernels.h"
#include "exec/verify.h"
#include "tests/unit/exec/exec_fixtures.h"

namespace alpasim::exec {
namespace {

using schema::Schedule;
using testing::StageSpec;

constexpr double kRelTol = 1e-4;
constexpr double kAbsTol = 1e-6;
constexpr testing::Tolerance kTol{kRelTol, kAbsTol};
/// The loss within kRelTol · (1 + |ref|), the bound doctest::Approx(ref).epsilon(kRelTol) used.
constexpr testing::Tolerance kLossTol{kRelTol, kRelTol};

using testing::run_on_cpu;

void compare(const ExecutionResult& got, const ExecutionResult& ref, bool compare_parameters) {
  const testing::Comparison loss = testing::compare_scalar(got.loss, ref.loss, kLossTol);
  CHECK_MESSAGE(loss.ok, "loss: " << loss.message);
  CHECK(ref.loss > 0);
  REQUIRE(got.gradients.size() == ref.gradients.size());
  REQUIRE(!ref.gradients.empty());
  for (const auto& [name, g] : ref.gradients) {
    REQUIRE(got.gradients.count(name));
    const auto& s = got.gradients.at(name);
    REQUIRE(s.size() == g.size());
    const testing::Comparison c = testing::compare_values(s, g, kTol);
    CHECK_MESSAGE(c.ok, "gradient of " << name << ": " << c.message);
  }
  REQUIRE(got.parameters.size() == ref.parameters.size());
  if (!compare_parameters) return;
  for (const auto& [name, w] : ref.parameters) {
    const testing::Comparison c = testing::compare_values(got.parameters.at(name), w, kTol);
    CHECK_MESSAGE(c.ok, "parameter " << name << ": " << c.message);
  }
}

/// The unsharded reference: every layer on device 0, the batch in `microbatches` pieces.
schema::Plan reference_of(const schema::Plan& plan, std::int64_t microbatches) {
  schema::Plan r = plan;
  r.stages.resize(1);
  r.stages[0] = plan.stages[0];
  r.stages[0].layer_begin = 0;
  r.stages[0].layer_end = plan.stages.back().layer_end;
  r.stages[0].device_ids = {0};
  r.stages[0].logical_rows = r.stages[0].logical_cols = 1;
  r.schedule = Schedule::kGpipe;
  r.interleave = 1;
  r.num_microbatches = microbatches;
  return r;
}

TEST_CASE("MLP: sharded forward and backward equal the unsharded reference") {
  LowerOptions o;
  o.build_forward = [](std::int64_t b) -> core::Result<ir::Graph> { return testing::build_mlp(b, 3); };
  const ir::ModelConfig m{"mlp", ir::TransformerConfig{}};  // replaced by build_forward
  // Layers: input, fc1, fc2, fc3, head.
  const auto ref = run_on_cpu(reference_of(testing::make_plan(m, {{0, 5, 1, 1, {0}}}, Schedule::kGpipe, 1, 8), 1), o);
  for (const auto& stages : std::vector<std::vector<StageSpec>>{
           {{0, 5, 1, 2, {0, 1}}},
           {{0, 5, 2, 2, {0, 1, 2, 3}}},
           {{0, 2, 1, 1, {0}}, {2, 5, 1, 1, {1}}},
           {{0, 3, 1, 2, {0, 1}}, {3, 5, 1, 1, {2}}}}) {
    for (Schedule s : {Schedule::kGpipe, Schedule::kOneFOneB}) {
      compare(run_on_cpu(testing::make_plan(m, stages, s, 2, 8), o), ref, false);
    }
  }
}

TEST_CASE("tiny GPT: sharded equals unsharded on 1x2, 2x2, two stages and interleaved") {
  const ir::ModelConfig gpt = testing::tiny_gpt();
  const auto ref = run_on_cpu(reference_of(testing::make_plan(gpt, {{0, 4, 1, 1, {0}}}, Schedule::kGpipe, 1, 8), 1));
  struct Case {
    std::vector<StageSpec> stages;
    Schedule schedule;
    std::int64_t microbatches, interleave;
  };
  for (const Case& c : std::vector<Case>{
           {{{0, 4, 1, 2, {0, 1}}}, Schedule::kOneFOneB, 2, 1},
           {{{0, 4, 2, 2, {0, 1, 2, 3}}}, Schedule::kGpipe, 2, 1},
           {{{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 1},
           {{{0, 1, 1, 2, {0, 1}}, {1, 4, 1, 2, {2, 3}}}, Schedule::kGpipe, 2, 1},
           {{{0, 1, 1, 1, {0}}, {1, 2, 1, 1, {1}}, {2, 3, 1, 1, {0}}, {3, 4, 1, 1, {1}}},
            Schedule::kInterleavedOneFOneB, 4, 2}}) {
    compare(run_on_cpu(testing::make_plan(gpt, c.stages, c.schedule, c.microbatches, 8, c.interleave)), ref, false);
  }
}

TEST_CASE("tiny GPT with full recomputation equals the reference without it") {
  const ir::ModelConfig gpt = testing::tiny_gpt();
  const auto ref = run_on_cpu(reference_of(testing::make_plan(gpt, {{0, 4, 1, 1, {0}}}, Schedule::kGpipe, 1, 4), 1));
  auto plan = testing::make_plan(gpt, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 2, 4);
  plan.recompute = schema::Recompute::kFull;
  compare(run_on_cpu(plan), ref, false);
}

TEST_CASE("a measuring run (report_values false) reports the same loss and no values") {
  // alpa-exec's runs: with one process per GPU every rank would otherwise ship its gradients
  // and parameters to the launcher as text, which took minutes for GPT 350M on an H200.
  const auto plan = testing::make_plan(testing::tiny_gpt(), {{0, 2, 1, 2, {0, 1}}, {2, 4, 1, 2, {2, 3}}},
                                       Schedule::kOneFOneB, 2, 8);
  auto program = lower_plan(plan);
  REQUIRE_MESSAGE(program.ok(), program.status().message());
  const auto all = cpu::make_cpu_backend()->run(*program, {});
  RunOptions measuring;
  measuring.report_values = false;
  const auto loss_only = cpu::make_cpu_backend()->run(*program, measuring);
  REQUIRE(all.ok());
  REQUIRE(loss_only.ok());
  CHECK(!all->gradients.empty());
  CHECK(!all->parameters.empty());
  CHECK(loss_only->gradients.empty());
  CHECK(loss_only->parameters.empty());
  CHECK(loss_only->loss > 0);
  CHECK(loss_only->loss == all->loss);  // the same program and initial values: bit for bit
  // What a measuring run reports is still there: iteration times and instruction timings.
  CHECK(loss_only->iteration_s.size() == all->iteration_s.size());
  CHECK(!loss_only->iteration_s.empty());
  CHECK(loss_only->timings.size() == all->timings.size());
  CHECK(!loss_only->timings.empty());
  CHECK(loss_only->measured_peak_plan_bytes == all->measured_peak_plan_bytes);
}

TEST_CASE("tiny Wide-ResNet: sharded equals the reference with the same batch-norm groups") {
  // Batch-norm uses the statistics of the rows a device holds (no cross-device sync, like
  // PyTorch DDP without SyncBatchNorm), so the reference runs the batch in the same 2-image
  // groups: 8 images = 4 microbatches of 2 on one device.
  const ir::ModelConfig w = testing::tiny_wide_resnet();
  const auto ref = run_on_cpu(reference_of(testing::make_plan(w, {{0, 18, 1, 1, {0}}}, Schedule::kGpipe, 1, 8), 4));
  for (const auto& stages : std::vector<std::vector<StageSpec>>{
           {{0, 18, 1, 2, {0, 1}}}, {{0, 9, 1, 1, {0}}, {9, 18, 1, 1, {1}}},
           {{0, 9, 1, 2, {0, 1}}, {9, 18, 1, 2, {2, 3}}}}) {
    const std::int64_t devices = static_cast<std::int64_t>(stages[0].devices.size());
    compare(run_on_cpu(testing::make_plan(w, stages, Schedule::kOneFOneB, 4 / devices, 8)), ref, true);
  }
}

TEST_CASE("tiny LLaMA runs on the CPU backend, pipelined and data-parallel equal the reference") {
  // The tiny GPT (2 blocks, hidden 8) as LLaMA: RMSNorm, rotary, SwiGLU, grouped-query
  // attention; tests/unit/exec/gradient_check_test.cc checks the kernels' gradients. (MoE
  // plans run on one-device stages only: below.)
  ir::ModelConfig llama = testing::tiny_gpt();
  auto& t = std::get<ir::TransformerConfig>(llama.spec);
  t.builtin = "llama";
  t.num_kv_heads = 1;
  ir::set_architecture_defaults(t);
  const auto ref = run_on_cpu(reference_of(testing::make_plan(llama, {{0, 4, 1, 1, {0}}}, Schedule::kGpipe, 1, 8), 1));
  compare(run_on_cpu(testing::make_plan(llama, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 8)), ref,
          false);
  compare(run_on_cpu(testing::make_plan(llama, {{0, 2, 1, 2, {0, 1}}, {2, 4, 1, 2, {2, 3}}}, Schedule::kOneFOneB, 2, 8)),
          ref, false);
}

TEST_CASE("tiny Mixtral runs pipelined on one-device stages and equals the reference") {
  // Issue 20: MoE plans execute on the CPU backend where no stage splits the token groups
  // (their batch is not axis 0: one group of all a microbatch's tokens). The reference runs
  // the same microbatches, so every group routes the same tokens.
  ir::ModelConfig mixtral = testing::tiny_gpt();
  auto& t = std::get<ir::TransformerConfig>(mixtral.spec);
  t.builtin = "mixtral";
  t.num_kv_heads = 1;
  t.ffn_hidden_size = 12;
  t.num_experts = 3;
  t.top_k = 2;
  t.moe_layer_interval = 1;
  t.capacity_factor = 1.0;  // tokens are dropped: the same ones in both runs
  ir::set_architecture_defaults(t);
  const auto ref = run_on_cpu(reference_of(testing::make_plan(mixtral, {{0, 4, 1, 1, {0}}}, Schedule::kGpipe, 4, 8), 4));
  compare(run_on_cpu(testing::make_plan(mixtral, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 8)),
          ref, true);
  compare(run_on_cpu(testing::make_plan(mixtral, {{0, 1, 1, 1, {0}}, {1, 2, 1, 1, {1}}, {2, 3, 1, 1, {2}}, {3, 4, 1, 1, {3}}},
                                        Schedule::kOneFOneB, 4, 8)),
          ref, true);
  // Two devices in a stage would split a group's tokens: refused, naming the op and stage.
  auto split = lower_plan(testing::make_plan(mixtral, {{0, 2, 1, 2, {0, 1}}, {2, 4, 1, 2, {2, 3}}}, Schedule::kOneFOneB, 2, 8));
  REQUIRE_FALSE(split.ok());
  CHECK(split.status().message() ==
        "op block0/moe/group_tokens: the batch is not the leading axis of its output; the executor splits "
        "batches along axis 0 only, so it runs only on a one-device stage that keeps it (stage 0 has 2 "
        "devices)");
}

TEST_CASE("an op the CPU backend cannot run fails with kUnimplemented naming it") {
  ir::Graph g;
  g.layers.push_back({"layer", "block"});
  const ir::OpId x = g.add_parameter("x", {2, 3}, 0);
  const ir::OpId y = g.add_elementwise("block0/erf", "erf", {x}, 1, 0);
  std::vector<float> xv(6, 0.5f), yv(6, 0.0f);
  const auto& shape = g.op(x).out.shape;
  const core::Status st = cpu::run_cpu_kernel(g, g.op(y), {{xv.data(), &shape, 6}}, {yv.data(), &shape, 6}, {});
  CHECK(st.code() == core::StatusCode::kUnimplemented);
  CHECK(st.message() == "op block0/erf (elementwise, function \"erf\"): the CPU backend cannot run it");
}

// Megatron's VocabParallelEmbedding: a device holding rows [2, 4) of a 4-row table looks up
// zeros for the other ids and adds their gradient nowhere (the sums over the devices of the
// split give the whole lookup and the whole gradient).
TEST_CASE("the embedding lookup and its gradient on a block of table rows") {
  ir::Graph g;
  g.layers.push_back({"embedding", "embedding"});
  const ir::OpId table = g.add_parameter("embedding/table", {4, 3}, 0);
  const ir::OpId ids = g.add_input("embedding/ids", {5}, true, 0);
  const ir::OpId lookup = g.add_embedding("embedding/lookup", table, ids, 0);
  ir::Op grad;
  grad.kind = ir::OpKind::kEmbedding;
  grad.function = "scatter_add";
  grad.name = "embedding/lookup/grad_table";
  grad.inputs = {lookup, ids};
  grad.out = g.op(table).out;
  const ir::OpId scatter = g.add(std::move(grad));
  const std::vector<std::int64_t> block_shape = {2, 3}, id_shape = {5}, row_shape = {5, 3};
  std::vector<float> block = {20, 21, 22, 30, 31, 32};  // rows 2 and 3
  std::vector<float> id_values = {0, 2, 3, 1, 3};
  cpu::KernelContext ctx;
  ctx.table_first_row = 2;
  ctx.table_rows = 2;
  std::vector<float> rows(15, -1.0f);
  REQUIRE(cpu::run_cpu_kernel(g, g.op(lookup), {{block.data(), &block_shape, 6}, {id_values.data(), &id_shape, 5}},
                              {rows.data(), &row_shape, 15}, ctx)
              .ok());
  CHECK(rows == std::vector<float>{0, 0, 0, 20, 21, 22, 30, 31, 32, 0, 0, 0, 30, 31, 32});
  std::vector<float> dy(15);
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(i + 1);
  std::vector<float> grad_block(6, -1.0f);
  REQUIRE(cpu::run_cpu_kernel(g, g.op(scatter), {{dy.data(), &row_shape, 15}, {id_values.data(), &id_shape, 5}},
                              {grad_block.data(), &block_shape, 6}, ctx)
              .ok());
  // Row 2 takes token 1's gradient (4, 5, 6); row 3 tokens 2's and 4's (7 + 13, 8 + 14, 9 + 15).
  CHECK(grad_block == std::vector<float>{4, 5, 6, 20, 22, 24});
  // The whole table (the default context): every id is a row of the block.
  std::vector<float> whole = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
  const std::vector<std::int64_t> table_shape = {4, 3};
  REQUIRE(cpu::run_cpu_kernel(g, g.op(lookup), {{whole.data(), &table_shape, 12}, {id_values.data(), &id_shape, 5}},
                              {rows.data(), &row_shape, 15}, {})
              .ok());
  CHECK(rows == std::vector<float>{0, 1, 2, 20, 21, 22, 30, 31, 32, 10, 11, 12, 30, 31, 32});
}

// Megatron's vocab_parallel_cross_entropy (exec::LossStep): two devices each hold two of
// four classes. Row 0's logits are c + {0, ln 2, ln 3, ln 4} with c = 1000 (exp overflows
// fp32 unless each step factors out its largest value), label 3; row 1's the same with
// c = -5, label 0. Softmax {0.1, 0.2, 0.3, 0.4}, so the losses are ln(10/4) and ln 10 and
// the gradients dy · ({0.1, 0.2, 0.3, 0.4} - onehot).
TEST_CASE("the cross entropy and its gradient on blocks of classes, from gathered per-row statistics") {
  ir::Graph g;
  g.layers.push_back({"head", "head"});
  const ir::OpId logits = g.add_parameter("head/logits", {2, 4}, 0);
  const ir::OpId labels = g.add_input("head/labels", {2}, true, 0);
  const ir::OpId ce = g.add_softmax_cross_entropy("head/cross_entropy", logits, labels, ir::LossKernel::kUnfused, 0);
  const ir::OpId dy = g.add_input("head/dy", {2}, false, 0);
  const ir::OpId grad = g.add_elementwise("head/cross_entropy/grad_logits", "softmax_cross_entropy_grad",
                                          {dy, logits, labels}, 5, 0, {2, 4});
  const float ln2 = std::log(2.0f), ln3 = std::log(3.0f), ln4 = std::log(4.0f);
  // Each device's block [2 rows, 2 classes]: classes {0, 1} and {2, 3}.
  const std::vector<std::vector<float>> block = {{1000, 1000 + ln2, -5, -5 + ln2}, {1000 + ln3, 1000 + ln4, -5 + ln3, -5 + ln4}};
  std::vector<float> label_values = {3, 0}, dy_values = {2, -1};
  const std::vector<std::int64_t> block_shape = {2, 2}, row_shape = {2}, statistics_shape = {2, 2, 2};
  std::vector<float> statistics(8, 0.0f);
  for (int part = 0; part < 2; ++part) {
    cpu::KernelContext ctx;
    ctx.loss_step = LossStep::kStatistics;
    ctx.first_class = 2 * part;
    ctx.loss_part = part;
    std::vector<float> x = block[static_cast<std::size_t>(part)];
    REQUIRE(cpu::run_cpu_kernel(g, g.op(ce), {{x.data(), &block_shape, 4}, {label_values.data(), &row_shape, 2}},
                                {statistics.data(), &statistics_shape, 8}, ctx)
                .ok());
  }
  // Part 0: log-sum-exp of {1, 2}·e^c = ln 3 + c, the label's logit only where it is held.
  CHECK(statistics[0] == doctest::Approx(1000 + std::log(3.0)));
  CHECK(statistics[1] == 0.0f);  // row 0's label 3 is part 1's
  CHECK(statistics[3] == doctest::Approx(-5.0f));
  CHECK(statistics[4] == doctest::Approx(1000 + std::log(7.0)));
  CHECK(statistics[5] == doctest::Approx(1000 + ln4));
  cpu::KernelContext combine;
  combine.loss_step = LossStep::kCombine;
  std::vector<float> loss(2, -1.0f);
  REQUIRE(cpu::run_cpu_kernel(g, g.op(ce), {{statistics.data(), &statistics_shape, 8}}, {loss.data(), &row_shape, 2},
                              combine)
              .ok());
  CHECK(loss[0] == doctest::Approx(std::log(2.5)));
  CHECK(loss[1] == doctest::Approx(std::log(10.0)));
  for (int part = 0; part < 2; ++part) {
    CAPTURE(part);
    cpu::KernelContext ctx;
    ctx.loss_step = LossStep::kGradient;
    ctx.first_class = 2 * part;
    std::vector<float> x = block[static_cast<std::size_t>(part)], dx(4, -1.0f);
    REQUIRE(cpu::run_cpu_kernel(g, g.op(grad),
                                {{dy_values.data(), &row_shape, 2}, {x.data(), &block_shape, 4},
                                 {label_values.data(), &row_shape, 2}, {statistics.data(), &statistics_shape, 8}},
                                {dx.data(), &block_shape, 4}, ctx)
                .ok());
    // Block `part` holds classes 2·part, 2·part + 1 of rows 0 (dy 2) and 1 (dy -1).
    const std::vector<float> expect = {
        2 * (0.1f + 0.2f * part - (2 * part == 3 ? 1 : 0)), 2 * (0.2f + 0.2f * part - (2 * part + 1 == 3 ? 1 : 0)),
        -1 * (0.1f + 0.2f * part - (2 * part == 0 ? 1 : 0)), -1 * (0.2f + 0.2f * part - (2 * part + 1 == 0 ? 1 : 0))};
    // Relative 2e-4: an fp32 logit near 1000 is rounded by up to 3e-5, which moves exp(x - lse).
    for (std::size_t i = 0; i < 4; ++i) CHECK(dx[i] == doctest::Approx(expect[i]).epsilon(2e-4));
  }
}

TEST_CASE("a plan too large for host memory is refused before anything runs") {
  auto p = lower_plan(testing::make_plan(testing::tiny_gpt(), {{0, 4, 1, 1, {0}}}, Schedule::kGpipe, 1, 2));
  REQUIRE(p.ok());
  RunOptions o;
  o.host_memory_limit_bytes = 1024;
  auto r = cpu::make_cpu_backend()->run(*p, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == core::StatusCode::kResourceExhausted);
  CHECK(r.status().message().rfind("the CPU backend would need ", 0) == 0);
}

TEST_CASE("a receive without its send times out with the device and instruction, no hang") {
  Program p;
  p.devices = {0, 1};
  p.code.resize(2);
  Buffer b;
  b.id = 0;
  b.device = 1;
  b.elements = 2;
  b.bytes = 8;
  b.element_bytes = 4;
  p.buffers.push_back(b);
  Instruction alloc;
  alloc.kind = InstrKind::kAllocate;
  alloc.buffer = 0;
  Instruction recv = alloc;
  recv.kind = InstrKind::kRecv;
  recv.peer = 0;
  recv.tag = 7;
  recv.count_elements = 2;
  p.code[1] = {alloc, recv};
  RunOptions o;
  o.timeout_s = 0.05;
  auto r = cpu::make_cpu_backend()->run(p, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() == "device 1 instruction #1 (recv): timed out after 0.050000 s waiting for its peers");
}

}  // namespace
}  // namespace alpasim::exec

namespace alpasim::exec {
namespace {

TEST_CASE("the comparison has teeth: a program with a wrong gradient scale is caught") {
  // Doubling one stage's all-reduce scale doubles its gradients: far outside the tolerance.
  const ir::ModelConfig gpt = testing::tiny_gpt();
  auto ref_p = lower_plan(reference_of(testing::make_plan(gpt, {{0, 4, 1, 1, {0}}}, Schedule::kGpipe, 1, 4), 1));
  auto p = lower_plan(testing::make_plan(gpt, {{0, 4, 1, 2, {0, 1}}}, Schedule::kGpipe, 1, 4));
  REQUIRE(ref_p.ok());
  REQUIRE(p.ok());
  for (auto& code : p->code) {
    for (auto& in : code) {
      if (in.kind == InstrKind::kAllReduce) in.scale *= 2;
    }
  }
  auto ref = cpu::make_cpu_backend()->run(*ref_p, {});
  auto bad = cpu::make_cpu_backend()->run(*p, {});
  REQUIRE(ref.ok());
  REQUIRE(bad.ok());
  std::size_t nonzero = 0;
  for (const auto& [name, g] : ref->gradients) {
    const testing::Comparison d = testing::compare_values(bad->gradients.at(name), g, kTol);
    CHECK(d.nonfinite_got + d.nonfinite_ref == 0);  // wrong, but by the doubling, not by overflow
    if (d.max_abs_ref > 1e-6) {
      CHECK(!d.ok);
      CHECK(d.max_abs_diff == doctest::Approx(d.max_abs_ref).epsilon(1e-3));
      ++nonzero;
    } else {
      // The key bias adds q·b_k to every score of a softmax row, which softmax ignores: its
      // gradient is exactly zero.
      CHECK(name.ends_with("attn/k_bias"));
    }
  }
  CHECK(nonzero == ref->gradients.size() - 2);  // all but the 2 key biases
  // The forward is unaffected.
  CHECK_MESSAGE(testing::compare_scalar(bad->loss, ref->loss, kLossTol).ok, bad->loss << " vs " << ref->loss);
}

}  // namespace
}  // namespace alpasim::exec

namespace alpasim::exec {
namespace {

TEST_CASE("weight-update sharding updates the weights as the unsharded reference does") {
  // Wide-ResNet (SGD: the update is linear in the gradient, so weights compare tightly).
  const ir::ModelConfig w = testing::tiny_wide_resnet();
  const auto ref = run_on_cpu(reference_of(testing::make_plan(w, {{0, 18, 1, 1, {0}}}, Schedule::kGpipe, 1, 8), 4));
  auto plan = testing::make_plan(w, {{0, 9, 1, 2, {0, 1}}, {9, 18, 1, 2, {2, 3}}}, Schedule::kOneFOneB, 2, 8);
  for (auto& st : plan.stages) st.weight_update_sharding = true;
  const auto got = run_on_cpu(plan);
  const testing::Comparison loss = testing::compare_scalar(got.loss, ref.loss, kLossTol);
  CHECK_MESSAGE(loss.ok, "loss: " << loss.message);
  REQUIRE(got.parameters.size() == ref.parameters.size());
  for (const auto& [name, p] : ref.parameters) {
    const testing::Comparison c = testing::compare_values(got.parameters.at(name), p, kTol);
    CHECK_MESSAGE(c.ok, "parameter " << name << ": " << c.message);
  }
  // Gradients reduce-scattered are not reported; those all-reduced (odd sizes) still match.
  CHECK(got.gradients.size() < ref.gradients.size());
  for (const auto& [name, g] : got.gradients) {
    const testing::Comparison c = testing::compare_values(g, ref.gradients.at(name), kTol);
    CHECK_MESSAGE(c.ok, "gradient of " << name << ": " << c.message);
  }
}

}  // namespace
}  // namespace alpasim::exec

#include <thread>

#include "exec/cpu/counting_allocator.h"

namespace alpasim::exec {
namespace {

TEST_CASE("counting allocator: current and peak bytes, host and plan dtype, exact under concurrent use") {
  cpu::MemoryCounter host, plan;
  {
    // A buffer of fp16 elements stored as fp32: 2 plan bytes and 4 host bytes per element.
    const cpu::CountingAllocator<float> a(&host, &plan, 20, 10);
    cpu::CountedFloats x(10, 0.0f, a);
    cpu::CountedFloats y(5, 0.0f, a);
    CHECK(host.current() == 60);
    CHECK(plan.current() == 30);
    x.clear();
    x.shrink_to_fit();
    CHECK(host.current() == 20);
    cpu::CountedFloats z(3, 0.0f, a);
    CHECK(host.current() == 32);
    CHECK(host.peak() == 60);
    CHECK(plan.peak() == 30);
  }
  CHECK(host.current() == 0);
  CHECK(host.peak() == 60);
  // Eight threads, each keeping one 4-float vector and allocating/freeing 1-float vectors:
  // a lost (non-atomic) update would leave `current` off.
  cpu::MemoryCounter shared;
  std::vector<cpu::CountedFloats> kept(8, cpu::CountedFloats(cpu::CountingAllocator<float>(&shared)));
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < 8; ++t) {
      threads.emplace_back([&kept, &shared, t] {
        kept[t].assign(4, 1.0f);
        for (int i = 0; i < 2000; ++i) cpu::CountedFloats one(1, 0.0f, cpu::CountingAllocator<float>(&shared));
      });
    }
  }
  CHECK(shared.current() == 8 * 16);
  CHECK(shared.peak() >= 8 * 16);
  CHECK(shared.peak() <= 8 * 16 + 8 * 4);
}

TEST_CASE("the CPU backend measures its memory high-water mark while it runs, and it follows the FREE order") {
  auto p = lower_plan(testing::make_plan(testing::tiny_gpt(), {{0, 4, 1, 1, {0}}}, Schedule::kGpipe, 2, 4));
  REQUIRE(p.ok());
  auto v = verify_program(*p);
  REQUIRE(v.ok());
  auto r = cpu::make_cpu_backend()->run(*p, {});
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  REQUIRE(r->measured_peak_plan_bytes.size() == 1);
  CHECK(r->measured_peak_plan_bytes[0] == v->peak_bytes[0]);
  CHECK(r->measured_peak_host_bytes[0] > 0);
  // Every FREE moved to the end of the program (still a valid program): everything is held
  // at once, so the measured mark rises to the sum of all buffers.
  Program late = *p;
  std::vector<Instruction> frees, rest;
  for (const Instruction& in : late.code[0]) (in.kind == InstrKind::kFree ? frees : rest).push_back(in);
  rest.insert(rest.end(), frees.begin(), frees.end());
  late.code[0] = rest;
  REQUIRE(verify_program(late).ok());
  std::int64_t all_bytes = 0, all_host_bytes = 0;
  for (const Buffer& b : late.buffers) {
    all_bytes += b.bytes;
    all_host_bytes += b.elements * 4;
  }
  auto r2 = cpu::make_cpu_backend()->run(late, {});
  REQUIRE_MESSAGE(r2.ok(), r2.status().message());
  CHECK(r2->measured_peak_plan_bytes[0] == all_bytes);
  CHECK(r2->measured_peak_host_bytes[0] == all_host_bytes);
  CHECK(r2->measured_peak_plan_bytes[0] > r->measured_peak_plan_bytes[0]);
}

}  // namespace
}  // namespace alpasim::exec

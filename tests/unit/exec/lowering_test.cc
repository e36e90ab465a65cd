// Lowering invariants on hand-written plans: every program passes the matching simulation
// (no deadlock, every SEND received in order, every buffer freed), and instruction counts
// follow from the plan in closed form.
#include "exec/lower.h"

#include <doctest/doctest.h>

#include "exec/verify.h"
#include "tests/unit/exec/exec_fixtures.h"

namespace alpasim::exec {
namespace {

using schema::Schedule;
using testing::StageSpec;

LowerOptions mlp_options(int hidden = 2) {
  LowerOptions o;
  o.build_forward = [hidden](std::int64_t b) -> core::Result<ir::Graph> { return testing::build_mlp(b, hidden); };
  return o;
}

ProgramStats verified(const Program& p) {
  auto stats = verify_program(p);
  INFO(program_to_text(p));
  REQUIRE_MESSAGE(stats.ok(), stats.status().message());
  return *stats;
}

std::int64_t count(const ProgramStats& s, std::size_t dev, const std::string& kind) {
  auto it = s.instructions[dev].find(kind);
  return it == s.instructions[dev].end() ? 0 : it->second;
}

TEST_CASE("MLP on a 1x2 mesh: data parallel, one all-reduce per parameter, no transfers") {
  // 2 hidden layers + head: 5 parameters (2 weights + 2 biases + head weight).
  const auto plan = testing::make_plan({"mlp", ir::TransformerConfig{}}, {{0, 4, 1, 2, {0, 1}}},
                                       Schedule::kOneFOneB, 2, 8);
  auto p = lower_plan(plan, mlp_options());
  REQUIRE(p.ok());
  CHECK(p->devices == std::vector<std::int64_t>{0, 1});
  CHECK(p->graphs.size() == 1);
  CHECK(p->graphs[0].op(0).out.shape == std::vector<std::int64_t>{2, 12});  // 8 / (2 mb · 2 devs)
  const ProgramStats s = verified(*p);
  for (std::size_t d = 0; d < 2; ++d) {
    CHECK(count(s, d, "all_reduce") == 5);
    CHECK(count(s, d, "send") == 0);
    CHECK(count(s, d, "recv") == 0);
    CHECK(count(s, d, "allocate") == count(s, d, "free"));
  }
  // Every all-reduce averages over 2 microbatches x 2 devices.
  for (const auto& in : p->code[0]) {
    if (in.kind == InstrKind::kAllReduce) CHECK(in.scale == doctest::Approx(0.25));
  }
}

TEST_CASE("MLP on two 1-device stages: one activation and one gradient per microbatch cross") {
  // Layers 0-1 on device 0, 2-3 on device 1. Crossing: fc1/gelu forward (stage 0 -> 1) and
  // its gradient fc2/dot/grad_lhs (stage 1 -> 0), once per microbatch each.
  for (Schedule sch : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    const auto plan = testing::make_plan({"mlp", ir::TransformerConfig{}},
                                         {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, sch, 4, 8);
    auto p = lower_plan(plan, mlp_options());
    REQUIRE(p.ok());
    const ProgramStats s = verified(*p);
    CHECK(count(s, 0, "send") == 4);
    CHECK(count(s, 0, "recv") == 4);
    CHECK(count(s, 1, "send") == 4);
    CHECK(count(s, 1, "recv") == 4);
    CHECK(count(s, 0, "all_reduce") == 2);  // fc1 weight and bias
    CHECK(count(s, 1, "all_reduce") == 3);  // fc2 weight and bias, head weight
  }
}

TEST_CASE("1F1B keeps fewer microbatches in flight than GPipe on the first stage") {
  // GPipe runs all 4 forwards before any backward; 1F1B at most 2 (= stages) on stage 0.
  auto peak = [](Schedule sch) {
    const auto plan = testing::make_plan({"mlp", ir::TransformerConfig{}},
                                         {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, sch, 4, 16);
    auto p = lower_plan(plan, mlp_options());
    REQUIRE(p.ok());
    const ProgramStats s = verified(*p);
    CHECK(memory_high_water(*p) == s.peak_bytes);
    return s.peak_bytes;
  };
  const auto gpipe = peak(Schedule::kGpipe);
  const auto one_f_one_b = peak(Schedule::kOneFOneB);
  CHECK(gpipe[0] > one_f_one_b[0]);
  CHECK(gpipe[1] >= one_f_one_b[1]);
}

TEST_CASE("unequal meshes: a 2-device stage feeds a 1-device stage by row ranges") {
  // Stage 0 on devices 0,1 (1 row each of a 2-row microbatch), stage 1 on device 2 (both
  // rows): device 2 receives 2 pieces per microbatch forward and sends 2 back.
  const auto plan = testing::make_plan({"mlp", ir::TransformerConfig{}},
                                       {{0, 2, 1, 2, {0, 1}}, {2, 4, 1, 1, {2}}},
                                       Schedule::kOneFOneB, 3, 6);
  auto p = lower_plan(plan, mlp_options());
  REQUIRE(p.ok());
  const ProgramStats s = verified(*p);
  CHECK(count(s, 2, "recv") == 6);
  CHECK(count(s, 2, "send") == 6);
  CHECK(count(s, 0, "send") == 3);
  CHECK(count(s, 1, "recv") == 3);
}

TEST_CASE("tiny GPT on 1x2, 2x2 and two stages: programs verify, tied embedding crosses once") {
  const ir::ModelConfig gpt = testing::tiny_gpt();  // layers: embedding, 2 blocks, head
  struct Case {
    std::vector<StageSpec> stages;
    Schedule schedule;
    std::int64_t interleave;
  };
  const std::vector<Case> cases = {
      {{{0, 4, 1, 2, {0, 1}}}, Schedule::kOneFOneB, 1},
      {{{0, 4, 2, 2, {0, 1, 2, 3}}}, Schedule::kGpipe, 1},
      {{{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 1},
      {{{0, 2, 1, 2, {0, 1}}, {2, 4, 1, 2, {2, 3}}}, Schedule::kGpipe, 1},
      {{{0, 1, 1, 1, {0}}, {1, 2, 1, 1, {1}}, {2, 3, 1, 1, {0}}, {3, 4, 1, 1, {1}}},
       Schedule::kInterleavedOneFOneB, 2},
  };
  for (const Case& c : cases) {
    const auto plan = testing::make_plan(gpt, c.stages, c.schedule, 4, 16, c.interleave);
    auto p = lower_plan(plan);
    REQUIRE_MESSAGE(p.ok(), p.status().message());
    verified(*p);
  }
  // Two 1x2 stages: the word embedding [16, 8] goes to the head's mesh as two halves plus an
  // all-gather there (Alpa's local all-gather), once per iteration.
  const auto plan = testing::make_plan(gpt, {{0, 2, 1, 2, {0, 1}}, {2, 4, 1, 2, {2, 3}}},
                                       Schedule::kOneFOneB, 2, 8);
  auto p = lower_plan(plan);
  REQUIRE(p.ok());
  int halves = 0, gathers = 0;
  for (const auto& in : p->code[2]) {
    if (in.op == ir::kNoOp) continue;
    if (p->graph_of_stage(in.stage).op(in.op).name != "embedding/word_embeddings") continue;
    if (in.kind == InstrKind::kRecv) {
      ++halves;
      CHECK(in.count_elements == 16 * 8 / 2);
    }
    if (in.kind == InstrKind::kAllGather) ++gathers;
  }
  CHECK(halves == 1);
  CHECK(gathers == 1);
}

TEST_CASE("tiny Wide-ResNet on 1x2 and two stages: programs verify") {
  const ir::ModelConfig w = testing::tiny_wide_resnet();  // 18 layers: stem, 16 blocks, head
  for (const auto& stages : std::vector<std::vector<StageSpec>>{
           {{0, 18, 1, 2, {0, 1}}}, {{0, 9, 1, 1, {0}}, {9, 18, 1, 1, {1}}}}) {
    auto p = lower_plan(testing::make_plan(w, stages, Schedule::kOneFOneB, 2, 8));
    REQUIRE_MESSAGE(p.ok(), p.status().message());
    CHECK(p->optimizer == "sgd");
    verified(*p);
  }
}

TEST_CASE("lowering errors name the plan field") {
  const ir::ModelConfig gpt = testing::tiny_gpt();
  auto uneven = lower_plan(testing::make_plan(gpt, {{0, 4, 1, 2, {0, 1}}}, Schedule::kGpipe, 3, 8));
  REQUIRE_FALSE(uneven.ok());
  CHECK(uneven.status().message() ==
        "plan: /num_microbatches: expected a divisor of global_batch_size 8, got 3");
  auto short_plan = lower_plan(testing::make_plan(gpt, {{0, 3, 1, 1, {0}}}, Schedule::kGpipe, 1, 2));
  REQUIRE_FALSE(short_plan.ok());
  CHECK(short_plan.status().message() ==
        "plan: /stages/0/layers: expected the stages to cover the 4 layers of the model graph, got 3 "
        "(plans over clustered layers are not executable)");
  auto spec = [](const char* text) { return *schema::ShardingSpec::parse(text); };
  auto plan = testing::make_plan(gpt, {{0, 4, 1, 2, {0, 1}}}, Schedule::kGpipe, 1, 2);
  // Data parallel on the 1x2 mesh: activations [b, s, f] split on axis 0 over mesh axis 1,
  // the weight replicated. Accepted as is.
  plan.stages[0].shardings.push_back(
      {"block0/mlp/fc1", "dp", {spec("S1RR"), spec("RR"), spec("R")}, spec("S1RR")});
  CHECK(lower_plan(plan).ok());
  // Megatron column parallel (weight split over its columns): lowered on the shards. fc1's
  // output [2 samples, seq 4, ffn 16] is "RRS1": each device of the 1x2 mesh holds
  // [2, 4, 16 / 2 = 8] (the ffn columns [0, 8) or [8, 16)).
  plan.stages[0].shardings[0] = {"block0/mlp/fc1", "dot:RR x RS1", {spec("RRR"), spec("RS1"), spec("S1")}, spec("RRS1")};
  auto sharded = lower_plan(plan);
  REQUIRE_MESSAGE(sharded.ok(), sharded.status().message());
  int fc1_blocks = 0;
  for (const Buffer& b : sharded->buffers) {
    if (b.received || b.superseded) continue;
    if (sharded->graph_of_stage(b.stage).op(b.tensor).name != "block0/mlp/fc1") continue;
    CHECK(b.shape == std::vector<std::int64_t>{2, 4, 8});
    CHECK(b.global_shape == std::vector<std::int64_t>{2, 4, 16});
    CHECK(b.block_offset == std::vector<std::int64_t>{0, 0, 8 * b.device});
    ++fc1_blocks;
  }
  CHECK(fc1_blocks == 2);
  CHECK(verify_program(*sharded).ok());
  LowerOptions o;
  o.ignore_operator_shardings = true;
  CHECK(lower_plan(plan, o).ok());
  plan.stages[0].shardings[0].op = "no/such/op";
  auto unknown = lower_plan(plan);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() ==
        "plan: /stages/0/shardings/0/op: expected an operator of the model graph, got \"no/such/op\"");
}

// ---- the checker itself ----

Program two_device_program() {
  Program p;
  p.devices = {0, 1};
  p.code.resize(2);
  for (std::int32_t d = 0; d < 2; ++d) {
    Buffer b;
    b.id = d;
    b.device = d;
    b.elements = 4;
    b.bytes = 16;
    b.element_bytes = 4;
    p.buffers.push_back(b);
  }
  return p;
}

Instruction make(InstrKind k, BufferId b, std::int32_t peer = -1, std::int64_t tag = -1) {
  Instruction in;
  in.kind = k;
  in.buffer = b;
  in.peer = peer;
  in.tag = tag;
  in.count_elements = peer >= 0 ? 4 : 0;
  return in;
}

// A buffer that takes no device memory (a flash kernel's on-chip tile: Buffer::bytes 0) still
// moves its elements when sent: the sent bytes come from Buffer::element_bytes, not from
// bytes / elements (which read 0 for it).
TEST_CASE("verify_program counts a send by its elements' bytes, not by the buffer's memory") {
  Program p = two_device_program();
  for (Buffer& b : p.buffers) {
    b.bytes = 0;
    b.element_bytes = 2;
  }
  p.code[0] = {make(InstrKind::kAllocate, 0), make(InstrKind::kSend, 0, 1, 0), make(InstrKind::kFree, 0)};
  p.code[1] = {make(InstrKind::kAllocate, 1), make(InstrKind::kRecv, 1, 0, 0), make(InstrKind::kFree, 1)};
  auto r = verify_program(p);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  CHECK(r.value().sent_bytes[0] == 4 * 2);  // 4 elements of 2 bytes
  CHECK(r.value().sent_bytes[1] == 0);
  CHECK(r.value().peak_bytes[0] == 0);  // and no device memory
}

TEST_CASE("verify_program finds a deadlock, out-of-order receives and leaks") {
  using K = InstrKind;
  Program p = two_device_program();
  // Each device waits for the other's send before sending: a cycle.
  p.code[0] = {make(K::kAllocate, 0), make(K::kRecv, 0, 1, 0), make(K::kSend, 0, 1, 1), make(K::kFree, 0)};
  p.code[1] = {make(K::kAllocate, 1), make(K::kRecv, 1, 0, 1), make(K::kSend, 1, 0, 0), make(K::kFree, 1)};
  auto r = verify_program(p);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "deadlock: device 0 instruction #1 (recv) waits; device 1 instruction #1 (recv) waits;");
  // Swapping device 1's order makes it run.
  p.code[1] = {make(K::kAllocate, 1), make(K::kSend, 1, 0, 0), make(K::kRecv, 1, 0, 1), make(K::kFree, 1)};
  auto ok = verify_program(p);
  REQUIRE(ok.ok());
  CHECK(ok->peak_bytes == std::vector<std::int64_t>{16, 16});
  // Two sends received in the other order.
  p.code[0] = {make(K::kAllocate, 0), make(K::kSend, 0, 1, 5), make(K::kSend, 0, 1, 6), make(K::kFree, 0)};
  p.code[1] = {make(K::kAllocate, 1), make(K::kRecv, 1, 0, 6), make(K::kRecv, 1, 0, 5), make(K::kFree, 1)};
  auto order = verify_program(p);
  REQUIRE_FALSE(order.ok());
  CHECK(order.status().message() ==
        "device 1 instruction #1 (recv): receives tag 6 but the oldest send from device 0 carries tag 5 "
        "(point-to-point order differs)");
  // A buffer never freed.
  p.code[0] = {make(K::kAllocate, 0)};
  p.code[1] = {};
  auto leak = verify_program(p);
  REQUIRE_FALSE(leak.ok());
  CHECK(leak.status().message() == "buffer b0 on device 0 is never freed");
}

}  // namespace
}  // namespace alpasim::exec

namespace alpasim::exec {
namespace {

TEST_CASE("weight-update sharding: reduce-scatter, sliced update, all-gather, states shrink") {
  // Tiny GPT on a 1x2 mesh: every parameter of the tiny GPT has an even element count, so
  // each is reduce-scattered (no all-reduce left), updated on half its elements and
  // all-gathered; Adam's state (12 bytes/parameter at fp16: fp32 master copy + 2 moments)
  // halves per device.
  auto plan = testing::make_plan(testing::tiny_gpt(), {{0, 4, 1, 2, {0, 1}}}, schema::Schedule::kGpipe, 1, 4);
  auto plain = lower_plan(plan);
  plan.stages[0].weight_update_sharding = true;
  auto zero = lower_plan(plan);
  REQUIRE(plain.ok());
  REQUIRE(zero.ok());
  auto a = verify_program(*plain);
  auto b = verify_program(*zero);
  REQUIRE(a.ok());
  REQUIRE_MESSAGE(b.ok(), b.status().message());
  const std::int64_t params = a->instructions[0].at("all_reduce");
  CHECK(b->instructions[0].count("all_reduce") == 0);
  CHECK(b->instructions[0].at("reduce_scatter") == params);
  CHECK(b->instructions[0].at("all_gather") == params);
  std::int64_t state_plain = 0, state_zero = 0;
  for (const auto& buf : plain->buffers) {
    if (buf.role == BufferRole::kOptimizerState && buf.device == 0) state_plain += buf.bytes;
  }
  for (const auto& buf : zero->buffers) {
    if (buf.role == BufferRole::kOptimizerState && buf.device == 0) state_zero += buf.bytes;
  }
  CHECK(state_zero * 2 == state_plain);
}

}  // namespace
}  // namespace alpasim::exec

// The executor's own overhead per instruction: CPU backend, trivial 1-element instructions,
// so nearly all the time is dispatch, bookkeeping, timing and synchronisation.
//   build/bench/exec_bench --benchmark_counters_tabular=true
// Counter `time_per_instruction` = wall time / instructions of the busiest device.
#include <benchmark/benchmark.h>

#include "exec/cpu/cpu_backend.h"
#include "exec/lower.h"
#include "exec/verify.h"
#include "ir/builders.h"

namespace alpasim::exec {
namespace {

constexpr std::int64_t kRepeats = 20000;

Program base_program(std::int32_t devices) {
  Program p;
  for (std::int32_t d = 0; d < devices; ++d) p.devices.push_back(d);
  ir::Graph g;
  g.add_elementwise("one", "ones", {}, 0, 0, {1});
  p.graphs.push_back(std::move(g));
  p.stage_graph = {0};
  p.stage_devices.push_back({});
  for (std::int32_t d = 0; d < devices; ++d) p.stage_devices[0].push_back(d);
  p.index_range = {0};
  p.gradient_of = {ir::kNoOp};
  p.code.resize(static_cast<std::size_t>(devices));
  return p;
}

BufferId add_buffer(Program& p, std::int32_t dev) {
  Buffer b;
  b.id = static_cast<BufferId>(p.buffers.size());
  b.device = dev;
  b.tensor = 0;
  b.stage = 0;
  b.shape = {1};
  b.elements = 1;
  b.bytes = 4;
  p.buffers.push_back(b);
  return b.id;
}

Instruction instr(InstrKind k, BufferId b) {
  Instruction in;
  in.kind = k;
  in.buffer = b;
  in.op = k == InstrKind::kRun ? 0 : ir::kNoOp;
  in.stage = k == InstrKind::kRun ? 0 : -1;
  return in;
}

void measure(benchmark::State& state, const Program& p) {
  auto backend = cpu::make_cpu_backend();
  std::size_t longest = 0;
  for (const auto& c : p.code) longest = std::max(longest, c.size());
  for (auto _ : state) {
    auto r = backend->run(p, {});
    if (!r.ok()) state.SkipWithError(r.status().message().c_str());
    benchmark::DoNotOptimize(r);
  }
  state.counters["instructions"] = static_cast<double>(longest);
  // Real time per instruction of the busiest device (printed in seconds: "101n" = 101 ns).
  state.counters["time_per_instruction"] = benchmark::Counter(
      static_cast<double>(longest), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// RUN of a 1-element op, repeated on one buffer, on every device independently.
void BM_Run(benchmark::State& state) {
  const auto devices = static_cast<std::int32_t>(state.range(0));
  Program p = base_program(devices);
  for (std::int32_t d = 0; d < devices; ++d) {
    const BufferId b = add_buffer(p, d);
    auto& c = p.code[static_cast<std::size_t>(d)];
    c.push_back(instr(InstrKind::kAllocate, b));
    for (std::int64_t i = 0; i < kRepeats; ++i) c.push_back(instr(InstrKind::kRun, b));
    c.push_back(instr(InstrKind::kFree, b));
  }
  measure(state, p);
}
BENCHMARK(BM_Run)->Arg(1)->Arg(2)->Arg(4)->UseRealTime()->Unit(benchmark::kMillisecond);

// ALLOCATE + FREE of 1-element buffers.
void BM_AllocateFree(benchmark::State& state) {
  Program p = base_program(1);
  for (std::int64_t i = 0; i < kRepeats; ++i) {
    const BufferId b = add_buffer(p, 0);
    p.code[0].push_back(instr(InstrKind::kAllocate, b));
    p.code[0].push_back(instr(InstrKind::kFree, b));
  }
  measure(state, p);
}
BENCHMARK(BM_AllocateFree)->UseRealTime()->Unit(benchmark::kMillisecond);

// SEND/RECV ping-pong of 1 element between 2 devices (each instruction waits for the peer:
// the latency of the shared-memory mailbox, not just dispatch).
void BM_SendRecvPingPong(benchmark::State& state) {
  Program p = base_program(2);
  const BufferId b0 = add_buffer(p, 0), b1 = add_buffer(p, 1);
  p.code[0].push_back(instr(InstrKind::kAllocate, b0));
  p.code[1].push_back(instr(InstrKind::kAllocate, b1));
  for (std::int64_t i = 0; i < kRepeats / 4; ++i) {
    Instruction s = instr(InstrKind::kSend, b0), r = instr(InstrKind::kRecv, b1);
    s.peer = 1;
    r.peer = 0;
    s.tag = r.tag = 2 * i;
    s.count_elements = r.count_elements = 1;
    Instruction s2 = instr(InstrKind::kSend, b1), r2 = instr(InstrKind::kRecv, b0);
    s2.peer = 0;
    r2.peer = 1;
    s2.tag = r2.tag = 2 * i + 1;
    s2.count_elements = r2.count_elements = 1;
    p.code[0].push_back(s);
    p.code[0].push_back(r2);
    p.code[1].push_back(r);
    p.code[1].push_back(s2);
  }
  p.code[0].push_back(instr(InstrKind::kFree, b0));
  p.code[1].push_back(instr(InstrKind::kFree, b1));
  measure(state, p);
}
BENCHMARK(BM_SendRecvPingPong)->UseRealTime()->Iterations(5)->Unit(benchmark::kMillisecond);

// All-reduce of 1 element over all devices, repeated (a 3-phase rendezvous each).
void BM_AllReduce(benchmark::State& state) {
  const auto devices = static_cast<std::int32_t>(state.range(0));
  Program p = base_program(devices);
  for (std::int32_t d = 0; d < devices; ++d) {
    const BufferId b = add_buffer(p, d);
    auto& c = p.code[static_cast<std::size_t>(d)];
    c.push_back(instr(InstrKind::kAllocate, b));
    for (std::int64_t i = 0; i < kRepeats / 10; ++i) {
      Instruction in = instr(InstrKind::kAllReduce, b);
      in.group = p.stage_devices[0];
      in.collective_id = i;
      c.push_back(in);
    }
    c.push_back(instr(InstrKind::kFree, b));
  }
  measure(state, p);
}
BENCHMARK(BM_AllReduce)->Arg(2)->Arg(4)->UseRealTime()->Iterations(5)->Unit(benchmark::kMillisecond);

// Resharding copy (kAllGather with an input, per-operator shardings) of a 2-element tensor
// whose halves lie on 2 devices: Arg(1) a local slice (group of one: the whole tensor to the
// device's half), Arg(2) an all-gather of the halves over 2 devices (3-phase rendezvous).
void BM_Reshard(benchmark::State& state) {
  const bool gather = state.range(0) == 2;
  Program p = base_program(2);
  for (std::int32_t d = 0; d < 2; ++d) {
    const BufferId src = add_buffer(p, d);
    const BufferId dst = add_buffer(p, d);
    Buffer& a = p.buffers[static_cast<std::size_t>(gather ? src : dst)];  // the half
    a.global_shape = {2};
    a.block_offset = {d};
    Buffer& w = p.buffers[static_cast<std::size_t>(gather ? dst : src)];  // the whole
    w.shape = w.global_shape = {2};
    w.block_offset = {0};
    w.elements = 2;
    w.bytes = 8;
    auto& c = p.code[static_cast<std::size_t>(d)];
    c.push_back(instr(InstrKind::kAllocate, src));
    c.push_back(instr(InstrKind::kAllocate, dst));
    for (std::int64_t i = 0; i < kRepeats / 10; ++i) {
      Instruction in = instr(InstrKind::kAllGather, dst);
      in.inputs = {src};
      in.group = gather ? p.stage_devices[0] : std::vector<std::int32_t>{d};
      in.collective_id = gather ? i : i * 2 + d;
      c.push_back(in);
    }
    c.push_back(instr(InstrKind::kFree, src));
    c.push_back(instr(InstrKind::kFree, dst));
  }
  measure(state, p);
}
BENCHMARK(BM_Reshard)->Arg(1)->Arg(2)->UseRealTime()->Iterations(5)->Unit(benchmark::kMillisecond);

/// Megatron tensor parallelism over mesh axis 1 for GPT blocks [first, last) (q/k/v and fc1
/// column-parallel, attention per head, attention output and fc2 row-parallel).
std::vector<schema::OperatorSharding> megatron(int first, int last) {
  auto spec = [](const char* text) { return *schema::ShardingSpec::parse(text); };
  std::vector<schema::OperatorSharding> out;
  auto add = [&](const std::string& op, std::vector<const char*> in, const char* o) {
    schema::OperatorSharding s;
    s.op = op;
    for (const char* t : in) s.inputs.push_back(spec(t));
    s.output = spec(o);
    out.push_back(s);
  };
  for (int l = first; l < last; ++l) {
    const std::string p = "block" + std::to_string(l) + "/";
    add(p + "attn/q", {"RRR", "RS1RR", "S1RR"}, "RRS1RR");
    add(p + "attn/k", {"RRR", "RS1R", "S1R"}, "RRS1R");
    add(p + "attn/v", {"RRR", "RS1R", "S1R"}, "RRS1R");
    add(p + "attn/scores", {"RRS1RR", "RRS1R"}, "RS1RRR");
    add(p + "attn/softmax", {"RS1RRR"}, "RS1RRR");
    add(p + "attn/context", {"RS1RRR", "RRS1R"}, "RRS1RR");
    add(p + "attn/out", {"RRS1RR", "S1RRR", "R"}, "RRR");
    add(p + "mlp/fc1", {"RRR", "RS1", "S1"}, "RRS1");
    add(p + "mlp/gelu", {"RRS1"}, "RRS1");
    add(p + "mlp/fc2", {"RRS1", "S1R", "R"}, "RRR");
  }
  return out;
}

// Lowering + verification of a GPT plan (4 layers, 2 stages of 1x2, 8 microbatches);
// Arg(1): with Megatron tensor parallelism in both stages (per-operator shardings).
void BM_LowerAndVerifyGpt(benchmark::State& state) {
  ir::TransformerConfig t;
  t.builtin = "gpt";
  t.num_layers = 4;
  t.hidden_size = 64;
  t.num_heads = 4;
  t.num_kv_heads = 4;
  t.seq_len = 32;
  t.vocab_size = 128;
  t.ffn_hidden_size = 256;
  ir::set_architecture_defaults(t);
  schema::Plan plan;
  plan.model = {"gpt", t};
  plan.global_batch_size = 32;
  plan.num_microbatches = 8;
  for (int s = 0; s < 2; ++s) {
    schema::PlanStage st;
    st.layer_begin = s * 3;
    st.layer_end = s * 3 + 3;
    st.logical_rows = 1;
    st.logical_cols = 2;
    st.device_ids = {2 * s, 2 * s + 1};
    if (state.range(0) == 1) st.shardings = megatron(s * 2, s * 2 + 2);
    plan.stages.push_back(st);
  }
  std::int64_t instructions = 0;
  for (auto _ : state) {
    auto p = lower_plan(plan);
    if (!p.ok()) state.SkipWithError(p.status().message().c_str());
    auto v = verify_program(*p);
    if (!v.ok()) state.SkipWithError(v.status().message().c_str());
    instructions = 0;
    for (const auto& c : p->code) instructions += static_cast<std::int64_t>(c.size());
  }
  state.counters["instructions"] = static_cast<double>(instructions);
}
BENCHMARK(BM_LowerAndVerifyGpt)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace alpasim::exec



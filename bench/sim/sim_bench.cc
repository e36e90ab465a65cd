// Performance targets of the simulator (issue 5): the engine handles >= 5 million events
// per second, and one iteration of a GPT-3 175B-shaped pipeline on 1,024 GPUs simulates
// in under 1 s on one core. Run: build/bench/sim_bench (single-threaded).
#include <array>
#include <cstdint>
#include <random>

#include <benchmark/benchmark.h>

#include "core/check.h"
#include "sim/engine.h"
#include "sim/pipeline_sim.h"
#include "sim/trace_writer.h"

namespace alpasim::sim {
namespace {

// A wide random DAG of fixed-duration tasks: `devices` × 2 streams, `per_stream` tasks
// each; every task also depends on a task a little earlier on a random other stream, so
// the engine exercises dependency counting, FIFO heads and a heap of ~#streams events.
TaskGraph compute_graph(int devices, int per_stream, bool with_links) {
  std::mt19937_64 rng(42);
  TaskGraph g;
  const int streams_per_device = 2;
  std::vector<StreamId> streams;
  std::vector<LinkId> links;
  for (int d = 0; d < devices; ++d) {
    DeviceId dev = g.add_device("d" + std::to_string(d));
    streams.push_back(g.add_stream(dev, "compute", StreamKind::kCompute));
    streams.push_back(g.add_stream(dev, "comm", StreamKind::kCommunication));
    if (with_links) links.push_back(g.add_link("l" + std::to_string(d), core::gbyte_per_s(25)));
  }
  const int num_streams = devices * streams_per_device;
  std::vector<std::vector<TaskId>> ids(static_cast<std::size_t>(num_streams));
  for (int i = 0; i < per_stream; ++i) {
    for (int s = 0; s < num_streams; ++s) {
      const Time dur = 1000 + static_cast<Time>(rng() % 1000);
      TaskId t;
      if (with_links && s % 2 == 1) {
        // Transfers over the device's link and the next device's: neighbours contend.
        const int d = s / 2;
        std::array<LinkId, 2> route{links[static_cast<std::size_t>(d)],
                                    links[static_cast<std::size_t>((d + 1) % devices)]};
        t = g.add_transfer(streams[static_cast<std::size_t>(s)], route,
                           core::Bytes(static_cast<std::int64_t>(20'000 + rng() % 20'000)), 0, TaskLabel{});
      } else {
        t = g.add_compute(streams[static_cast<std::size_t>(s)], dur, TaskLabel{});
      }
      ids[static_cast<std::size_t>(s)].push_back(t);
      if (i > 0) {
        const int other = static_cast<int>(rng() % static_cast<std::uint64_t>(num_streams));
        const int back = 1 + static_cast<int>(rng() % 2);
        if (i - back >= 0 && other != s) {
          g.add_dependency(ids[static_cast<std::size_t>(other)][static_cast<std::size_t>(i - back)], t);
        }
      }
    }
  }
  return g;
}

void BM_EngineComputeTasks(benchmark::State& state) {
  const TaskGraph g = compute_graph(static_cast<int>(state.range(0)), 20'000, false);
  std::uint64_t events = 0;
  for (auto _ : state) {
    auto r = simulate(g);
    ALPASIM_CHECK(r.ok()) << r.status().to_string();
    events += r->events_processed;
    benchmark::DoNotOptimize(r->makespan);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(events));
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineComputeTasks)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

void BM_EngineWithSharedLinks(benchmark::State& state) {
  const TaskGraph g = compute_graph(static_cast<int>(state.range(0)), 5'000, true);
  std::uint64_t events = 0;
  for (auto _ : state) {
    auto r = simulate(g);
    ALPASIM_CHECK(r.ok()) << r.status().to_string();
    events += r->events_processed;
    benchmark::DoNotOptimize(r->makespan);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(events));
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineWithSharedLinks)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

// GPT-3 175B (96 layers, hidden 12288, sequence 2048) on 1,024 GPUs: tp 8, pp 16, dp 8,
// 64 microbatches of 1 sequence, interleave 2, full recomputation, bucketed gradient
// all-reduce. Network: every GPU has a 25 GB/s NIC (DGX A100: 8 × 200 Gb/s HDR per node),
// modelled as a transmit and a receive link per mesh representative; cross-stage sends
// use the sender's tx and the receiver's rx, the data-parallel ring its own tx and rx, so
// sends and gradient all-reduces contend where they would on the real NICs.
// SYNTHETIC, UNIFORM stage costs: the cost
// model does not exist yet, so times below are round numbers of the right magnitude
// (forward ≈ 6 layers × 7.6 TFLOP / 8 GPUs at ~150 TFLOP/s ≈ 38 ms), not predictions.
PipelineProblem gpt3_175b_problem() {
  UniformPipelineSpec u;
  u.schedule = PipelineSchedule::kInterleaved1F1B;
  u.num_stages = 16;
  u.interleave = 2;
  u.num_microbatches = 64;
  u.data_parallel = 8;
  u.gpus_per_stage = 8;
  u.grad_sync_buckets = 4;
  u.memory_limit = core::gib(80);
  // 6 layers per stage; per layer forward 24·s·h²(1 + s/6h) ≈ 7.63e12 FLOP over 8 GPUs.
  const double layer_fwd_flops_per_gpu = 24.0 * 2048 * 12288.0 * 12288.0 * (1 + 2048.0 / (6 * 12288)) / 8;
  u.stage.forward_flops = core::Flops(6 * layer_fwd_flops_per_gpu);
  u.stage.backward_flops = core::Flops(12 * layer_fwd_flops_per_gpu);
  u.stage.recompute_flops = core::Flops(6 * layer_fwd_flops_per_gpu);
  u.stage.forward_s = core::milliseconds(38);
  u.stage.recompute_s = core::milliseconds(38);
  u.stage.backward_s = core::milliseconds(76);
  u.stage.output_activation_bytes = core::Bytes(2048LL * 12288 * 2 / 8);  // fp16, scatter over tp
  u.stage.stored_activation_bytes = core::Bytes(6LL * 2048 * 12288 * 2 / 8);  // layer inputs
  u.stage.working_activation_bytes = core::Bytes(34LL * 2048 * 12288 / 8 + 5LL * 96 * 2048 * 2048 / 8);
  const std::int64_t params_per_gpu = 175'000'000'000LL / (8 * 16);
  u.stage.parameter_bytes = core::Bytes(2 * params_per_gpu);
  u.stage.gradient_bytes = core::Bytes(2 * params_per_gpu);
  u.stage.optimizer_state_bytes = core::Bytes(12 * params_per_gpu);
  u.stage.grad_sync_bytes = core::Bytes(2 * params_per_gpu);
  u.stage.optimizer_step_s = core::milliseconds(20);
  PipelineProblem pb = make_uniform_problem(u);
  const int p = u.num_stages;
  for (int s = 0; s < p; ++s) {
    pb.links.push_back(LinkSpec{"nic" + std::to_string(s) + ".tx", core::gbyte_per_s(25)});
    pb.links.push_back(LinkSpec{"nic" + std::to_string(s) + ".rx", core::gbyte_per_s(25)});
  }
  auto tx = [](int s) { return static_cast<LinkId>(2 * s); };
  auto rx = [](int s) { return static_cast<LinkId>(2 * s + 1); };
  for (int s = 0; s < p; ++s) {
    auto& mesh = pb.meshes[static_cast<std::size_t>(s)];
    mesh.send_next = Route{{tx(s), rx((s + 1) % p)}, core::microseconds(10)};
    mesh.send_prev = Route{{tx(s), rx((s + p - 1) % p)}, core::microseconds(10)};
    mesh.grad_sync = Route{{tx(s), rx(s)}, core::microseconds(10)};
  }
  return pb;
}

void BM_Gpt3_175B_1024Gpus(benchmark::State& state) {
  const PipelineProblem pb = gpt3_175b_problem();
  double iteration_s = 0;
  std::uint64_t events = 0;
  std::size_t tasks = 0;
  for (auto _ : state) {
    auto r = simulate_pipeline(pb);
    ALPASIM_CHECK(r.ok()) << r.status().to_string();
    iteration_s = r->report.iteration_time.value();
    events = r->timeline.events_processed;
    tasks = r->graph.tasks().size();
    // Not DoNotOptimize(double): with Debian's benchmark 1.7.1 and GCC 12 its "+m,r"
    // constraint corrupted the double here (observed 4.9e-324); an int64 is safe.
    benchmark::DoNotOptimize(r->timeline.makespan);
  }
  state.counters["simulated_iteration_s"] = iteration_s;
  state.counters["events"] = static_cast<double>(events);
  state.counters["tasks"] = static_cast<double>(tasks);
}
BENCHMARK(BM_Gpt3_175B_1024Gpus)->Unit(benchmark::kMillisecond);

void BM_Gpt3_175B_Trace(benchmark::State& state) {
  auto r = simulate_pipeline(gpt3_175b_problem());
  ALPASIM_CHECK(r.ok()) << r.status().to_string();
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string text = chrome_trace_json(r->graph, r->timeline);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["trace_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_Gpt3_175B_Trace)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace alpasim::sim

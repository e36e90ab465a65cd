#include "sim/pipeline_sim.h"

#include <algorithm>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "sim/trace_writer.h"

namespace alpasim::sim {
namespace {

constexpr Time kMs = 1'000'000;  // ns

// Uniform stages, no network (transfers instant): tf = 1 ms, tb = 2 ms per whole stage.
UniformPipelineSpec base(PipelineSchedule schedule, int p, int m, int v = 1) {
  UniformPipelineSpec u;
  u.schedule = schedule;
  u.num_stages = p;
  u.num_microbatches = m;
  u.interleave = v;
  u.stage.forward_s = core::milliseconds(1);
  u.stage.backward_s = core::milliseconds(2);
  return u;
}

// Per stage: static 400 MiB (parameters 100, gradients 100, optimizer states 200), 1000 MiB
// stored per microbatch, a 10 MiB backward working set.
UniformPipelineSpec with_memory(UniformPipelineSpec u) {
  u.stage.parameter_bytes = core::mib(100);
  u.stage.gradient_bytes = core::mib(100);
  u.stage.optimizer_state_bytes = core::mib(200);
  u.stage.stored_activation_bytes = core::mib(1000);
  u.stage.working_activation_bytes = core::mib(10);
  return u;
}

PipelineSimulation run(const PipelineProblem& pb) {
  auto r = simulate_pipeline(pb);
  REQUIRE(r.ok());
  return std::move(r).value();
}

Time iteration_ns(const PipelineSimulation& s) { return s.timeline.makespan; }

TEST_CASE("uniform GPipe gives Alpa's Eq. 2 exactly") {
  // T = Σ_i t_i + (B-1)·max_j t_j with t = tf + tb = 3 ms, p = 4, B = 8:
  // 4·3 + 7·3 = 33 ms, i.e. (B + p - 1)(tf + tb).
  auto sim = run(make_uniform_problem(base(PipelineSchedule::kGPipe, 4, 8)));
  CHECK(iteration_ns(sim) == 33 * kMs);
  // Each device computes B·3 = 24 ms: bubble = 9/33 = (p-1)/(B+p-1).
  CHECK(sim.report.bubble_fraction == doctest::Approx(3.0 / 11.0));
  // Megatron's bubble time fraction (p-1)/m = 3/8.
  CHECK(sim.report.bubble_to_compute_ratio == doctest::Approx(3.0 / 8.0));
  for (const auto& d : sim.report.devices) CHECK(d.compute_busy.value() == doctest::Approx(0.024));
}

TEST_CASE("GPipe with unequal stages: Σ t_i + (B-1)·max t_j when backward ∝ forward") {
  // f = 1, 3, 2, 1 ms and b = 2f: t = 3, 9, 6, 3 ms. Forward and backward are both
  // flow shops with the same bottleneck (stage 1), so T = Σ t + (B-1)·max t
  // = 21 + 7·9 = 84 ms for B = 8.
  auto pb = make_uniform_problem(base(PipelineSchedule::kGPipe, 4, 8));
  const double f_ms[] = {1, 3, 2, 1};
  for (int s = 0; s < 4; ++s) {
    pb.stages[static_cast<std::size_t>(s)].forward_s = core::milliseconds(f_ms[s]);
    pb.stages[static_cast<std::size_t>(s)].backward_s = core::milliseconds(2 * f_ms[s]);
  }
  CHECK(iteration_ns(run(pb)) == 84 * kMs);
}

TEST_CASE("uniform 1F1B has GPipe's iteration time with min(p - s, B) microbatches in flight") {
  // Same bubble as GPipe (Narayanan et al. 2021 §2.2.1): (B + p - 1)(tf + tb) = 33 ms.
  auto u = with_memory(base(PipelineSchedule::kOneFOneB, 4, 8));
  auto sim = run(make_uniform_problem(u));
  CHECK(iteration_ns(sim) == 33 * kMs);
  for (int s = 0; s < 4; ++s) {
    const auto& d = sim.report.devices[static_cast<std::size_t>(s)];
    const int in_flight = std::min(4 - s, 8);
    CHECK(d.max_in_flight == in_flight);
    // Static 400 MiB + in-flight stored activations + one backward's working set.
    CHECK(d.peak_memory_bytes == core::mib(400 + 1000 * in_flight + 10).value());
    CHECK(d.peak_memory_by_component[static_cast<std::size_t>(MemoryComponent::kStoredActivations)] ==
          core::mib(1000 * in_flight).value());
  }
  CHECK(sim.report.peak_memory_bytes == core::mib(4410).value());

  // B < p: only B microbatches can be in flight.
  u.num_microbatches = 2;
  auto small = run(make_uniform_problem(u));
  for (int s = 0; s < 4; ++s) {
    CHECK(small.report.devices[static_cast<std::size_t>(s)].peak_memory_bytes ==
          core::mib(400 + 1000 * std::min(4 - s, 2) + 10).value());
  }
  // GPipe holds all B = 8.
  u.schedule = PipelineSchedule::kGPipe;
  u.num_microbatches = 8;
  auto gpipe = run(make_uniform_problem(u));
  for (const auto& d : gpipe.report.devices) CHECK(d.peak_memory_bytes == core::mib(400 + 8000 + 10).value());
}

TEST_CASE("interleaving by v divides the bubble by v") {
  // Bubble per device (p-1)(tf+tb) = 9 ms without interleaving and 9/v ms with v chunks
  // (Narayanan et al. 2021 §2.2.2); compute per device stays B(tf+tb) = 24 ms.
  auto plain = run(make_uniform_problem(base(PipelineSchedule::kOneFOneB, 4, 8)));
  CHECK(iteration_ns(plain) == 33 * kMs);
  for (int v : {2, 4}) {
    auto sim = run(make_uniform_problem(base(PipelineSchedule::kInterleaved1F1B, 4, 8, v)));
    CHECK(iteration_ns(sim) == 24 * kMs + 9 * kMs / v);
    // Megatron's interleaved bubble time fraction (p-1)/(v·m).
    CHECK(sim.report.bubble_to_compute_ratio == doctest::Approx(3.0 / (v * 8.0)));
    for (const auto& d : sim.report.devices) {
      CHECK(d.compute_idle.value() == doctest::Approx(0.009 / v).epsilon(1e-9));
    }
  }
}

TEST_CASE("interleaving wraps from the last stage to the first over its send_next route") {
  // p = 2, v = 2, B = 2, 1 MB per send: virtual stage 1 (on stage 1) sends to virtual
  // stage 2 (on stage 0) over stage 1's "next" link, B = 2 times: 2 MB; the gradients come
  // back over stage 0's "prev" link (from vs 2 to vs 1): 2 MB.
  auto u = base(PipelineSchedule::kInterleaved1F1B, 2, 2, 2);
  u.p2p_bandwidth = core::gbyte_per_s(1);
  u.stage.output_activation_bytes = core::Bytes(1'000'000);
  auto pb = make_uniform_problem(u);
  REQUIRE(pb.links[2].name == "stage1->next");
  REQUIRE(pb.links[1].name == "stage0->prev");
  auto sim = run(pb);
  CHECK(sim.timeline.link_bytes[2] == doctest::Approx(2e6));
  // Stage 0 also sends vs 0 -> vs 1 and vs 2 -> vs 3 (4 MB), and gradients vs 2 -> vs 1 (2 MB).
  CHECK(sim.timeline.link_bytes[0] == doctest::Approx(4e6));
  CHECK(sim.timeline.link_bytes[1] == doctest::Approx(2e6));
}

TEST_CASE("Alpa's local all-gather sends 1/k over the network, then gathers in the mesh") {
  // p = 2, one microbatch, 1 GB/s links. Output 4 MB per GPU; k = 4 sends 1 MB (1 ms),
  // then a 0.25 ms all-gather; the gradient goes back the same way.
  // T = F0 1 + send 1 + ag 0.25 + F1 1 + B1 2 + send 1 + ag 0.25 + B0 2 = 8.5 ms.
  auto u = base(PipelineSchedule::kGPipe, 2, 1);
  u.p2p_bandwidth = core::gbyte_per_s(1);
  u.stage.output_activation_bytes = core::Bytes(4'000'000);
  auto direct = make_uniform_problem(u);
  // Direct: 4 MB each way at 1 GB/s: 1 + 4 + 1 + 2 + 4 + 2 = 14 ms.
  CHECK(iteration_ns(run(direct)) == 14 * kMs);
  auto local = direct;
  for (auto& st : local.stages) {
    st.output_reshard = ReshardMode::kLocalAllGather;
    st.reshard_group = 4;
    st.reshard_all_gather_s = core::microseconds(250);
  }
  auto sim = run(local);
  CHECK(iteration_ns(sim) == 8 * kMs + kMs / 2);
  // Device 1: receives 1-2 ms, all-gathers 2-2.25 ms, sends the gradient 5.25-6.25 ms.
  CHECK(sim.report.devices[1].communication_busy.value() == doctest::Approx(0.00225));
}

PipelineProblem one_stage_dp(int buckets, GradSyncMode mode) {
  // p = 1, B = 2, dp = 2: program F0 B0 F1 B1; grad sync 4 ms in total; optimizer 0.5 ms.
  auto u = base(PipelineSchedule::kOneFOneB, 1, 2);
  u.data_parallel = 2;
  u.stage.grad_sync_bytes = core::gib(1);
  u.stage.grad_sync_s = core::milliseconds(4);
  u.stage.optimizer_step_s = core::microseconds(500);
  u.grad_sync_buckets = buckets;
  u.grad_sync_mode = mode;
  return make_uniform_problem(u);
}

TEST_CASE("gradient all-reduce overlaps the last backward when bucketed") {
  // F0 0-1, B0 1-3, F1 3-4, B1 in two parts 4-5 and 5-6. Bucket 0 syncs 5-7 (overlapping
  // part 1), bucket 1 7-9, optimizer 9-9.5: T = 9.5 ms; 1 ms overlapped, 3 ms exposed.
  auto sim = run(one_stage_dp(2, GradSyncMode::kAllReduce));
  CHECK(iteration_ns(sim) == 9 * kMs + kMs / 2);
  CHECK(sim.report.devices[0].communication_overlapped.value() == doctest::Approx(0.001));
  CHECK(sim.report.devices[0].communication_exposed.value() == doctest::Approx(0.003));
  // One bucket: B1 4-6, sync 6-10, optimizer 10-10.5; all 4 ms exposed.
  auto one = run(one_stage_dp(1, GradSyncMode::kAllReduce));
  CHECK(iteration_ns(one) == 10 * kMs + kMs / 2);
  CHECK(one.report.communication_exposed.value() == doctest::Approx(0.004));
  CHECK(one.report.communication_overlapped.value() == doctest::Approx(0.0));
}

TEST_CASE("weight-update sharding: reduce-scatter, optimizer, parameter all-gather") {
  // B1 ends at 6; reduce-scatter 6-10; optimizer 10-10.5; all-gather 10.5-14.5.
  auto sim = run(one_stage_dp(1, GradSyncMode::kReduceScatterAllGather));
  CHECK(iteration_ns(sim) == 14 * kMs + kMs / 2);
}

TEST_CASE("gradient sync over links moves ring all-reduce bytes") {
  // dp = 4: a ring all-reduce puts 2·(4-1)/4 · 1e9 = 1.5e9 bytes on each GPU's link;
  // at 1 GB/s that is 1.5 s after the 3 ms of compute.
  auto u = base(PipelineSchedule::kOneFOneB, 1, 1);
  u.data_parallel = 4;
  u.stage.grad_sync_bytes = core::Bytes(1'000'000'000);
  auto pb = make_uniform_problem(u);
  pb.links.push_back(LinkSpec{"nic", core::gbyte_per_s(1)});
  pb.meshes[0].grad_sync.links = {0};
  auto sim = run(pb);
  CHECK(iteration_ns(sim) == 1503 * kMs);
}

TEST_CASE("the collective_cost hook supplies durations") {
  // dp = 8, two buckets of 0.5 GiB each costing 4 ms: B0 parts 1-2 and 2-3; syncs 2-6
  // and 6-10; optimizer (0 s) at 10. T = 10 ms. The hook is asked once per stage, for
  // one bucket.
  auto u = base(PipelineSchedule::kOneFOneB, 1, 1);
  u.data_parallel = 8;
  u.grad_sync_buckets = 2;
  u.stage.grad_sync_bytes = core::gib(1);
  auto pb = make_uniform_problem(u);
  std::vector<CollectiveCall> calls;
  pb.collective_cost = [&calls](const CollectiveCall& c) {
    calls.push_back(c);
    return core::milliseconds(4);
  };
  auto sim = run(pb);
  CHECK(iteration_ns(sim) == 10 * kMs);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].kind == CollectiveKind::kAllReduce);
  CHECK(calls[0].bytes == core::mib(512));
  CHECK(calls[0].group_size == 8);
  CHECK(calls[0].mesh == 0);
  // resolve_collectives turns the answer into data: 2 buckets × 4 ms.
  auto resolved = resolve_collectives(pb);
  REQUIRE(resolved.ok());
  CHECK_FALSE(resolved->collective_cost);
  CHECK(resolved->stages[0].grad_sync_s->value() == doctest::Approx(0.008));
  CHECK(iteration_ns(run(*resolved)) == 10 * kMs);
}

TEST_CASE("the hook prices reduce-scatter, parameter all-gather and local all-gather") {
  // p = 2, GPipe, B = 1, dp = 2, weight-update sharding, local all-gather k = 4 between
  // the stages. Hook: reduce-scatter 3 ms, all-gather over the dp group 5 ms, all-gather
  // over the mesh 0.5 ms. Stage 0: F 0-1; ag 1-1.5; stage 1: F 1.5-2.5, B 2.5-4.5,
  // RS 4.5-7.5, optimizer 7.5, param AG 7.5-12.5. Gradient ag 4.5-5; stage 0 B 5-7,
  // RS 7-10, param AG 10-15. T = 15 ms.
  auto u = base(PipelineSchedule::kGPipe, 2, 1);
  u.data_parallel = 2;
  u.grad_sync_mode = GradSyncMode::kReduceScatterAllGather;
  u.stage.grad_sync_bytes = core::mib(64);
  u.stage.output_activation_bytes = core::mib(8);
  auto pb = make_uniform_problem(u);
  pb.stages[0].output_reshard = ReshardMode::kLocalAllGather;
  pb.stages[0].reshard_group = 4;
  pb.collective_cost = [](const CollectiveCall& c) {
    if (c.kind == CollectiveKind::kReduceScatter) return core::milliseconds(3);
    return c.group_size == 2 ? core::milliseconds(5) : core::microseconds(500);
  };
  CHECK(iteration_ns(run(pb)) == 15 * kMs);
  pb.collective_cost = [](const CollectiveCall&) { return core::Seconds(-1); };
  CHECK(simulate_pipeline(pb).status().message() ==
        "stages[0] gradient synchronisation: collective_cost returned -1 s, expected a finite "
        "number >= 0");
}

TEST_CASE("model and hardware TFLOP/s per GPU follow Megatron's definitions") {
  // p = 2 stages of 8 GPUs, dp = 2: 32 GPUs. Per GPU per microbatch: forward 1e12,
  // backward 2e12, recompute 1e12 FLOP; tf = 1, tr = 1, tb = 2 ms. GPipe, B = 4:
  // T = (B + p - 1)(tf + tr + tb) = 5·4 = 20 ms.
  // Model FLOPs = 2 stages · 4 mb · 16 GPUs · 3e12 = 3.84e14 → /(32 · 0.02 s) = 600 TFLOP/s.
  // Hardware adds 1e12 per mb: 5.12e14 → 800 TFLOP/s.
  auto u = base(PipelineSchedule::kGPipe, 2, 4);
  u.gpus_per_stage = 8;
  u.data_parallel = 2;
  u.stage.recompute_s = core::milliseconds(1);
  u.stage.forward_flops = core::Flops(1e12);
  u.stage.backward_flops = core::Flops(2e12);
  u.stage.recompute_flops = core::Flops(1e12);
  auto sim = run(make_uniform_problem(u));
  CHECK(iteration_ns(sim) == 20 * kMs);
  CHECK(sim.report.num_gpus == 32);
  CHECK(sim.report.model_flops.value() == doctest::Approx(3.84e14));
  CHECK(core::to_tflops_per_s(sim.report.model_flops_per_gpu) == doctest::Approx(600));
  CHECK(core::to_tflops_per_s(sim.report.hardware_flops_per_gpu) == doctest::Approx(800));
}

TEST_CASE("a plan that does not fit names the device, the excess and the component") {
  // p = 2, 1F1B, B = 4. Stage 0 holds 2 microbatches: 256 + 256 MiB static + 2·300 MiB
  // stored + 8 MiB working = 1120 MiB > 1024 MiB: over by 96 MiB. Stage 1 holds one: 820 MiB.
  auto u = base(PipelineSchedule::kOneFOneB, 2, 4);
  u.memory_limit = core::gib(1);
  u.stage.parameter_bytes = core::mib(256);
  u.stage.gradient_bytes = core::mib(256);
  u.stage.stored_activation_bytes = core::mib(300);
  u.stage.working_activation_bytes = core::mib(8);
  auto sim = run(make_uniform_problem(u));
  REQUIRE(sim.report.overflows.size() == 1);
  const auto& o = sim.report.overflows[0];
  CHECK(o.device == 0);
  CHECK(o.excess_bytes == core::mib(96).value());
  CHECK(o.largest == MemoryComponent::kStoredActivations);
  // Stage 0 starts B0 at 4 ms (F0 0-1, F1 1-2; stage 1 runs F0 1-2, B0 2-4).
  const std::string expected =
      "device 0 (pipeline stage 0) needs 1.09 GiB at its peak (t=0.004000 s) but may use 1.00 GiB: "
      "over by 96.00 MiB (100663296 bytes); at the peak: parameters 256.00 MiB, gradients "
      "256.00 MiB, optimizer states 0 B, stored activations 600.00 MiB, working activations "
      "8.00 MiB; the largest component is stored activations (up to 2 microbatch-chunks in "
      "flight under 1f1b)";
  CHECK(o.message == expected);
  CHECK(sim.report.memory_status().code() == core::StatusCode::kResourceExhausted);
  // Static memory alone over the limit: the peak is there before the first task, and the
  // message says so instead of "at its peak (t=0.000000 s)".
  u.stage.parameter_bytes = core::mib(1024);
  u.stage.stored_activation_bytes = core::bytes(0);
  u.stage.working_activation_bytes = core::bytes(0);
  auto static_sim = run(make_uniform_problem(u));
  REQUIRE_FALSE(static_sim.report.overflows.empty());
  const std::string& m = static_sim.report.overflows[0].message;
  CHECK(m.find("device 0 (pipeline stage 0) needs 1.25 GiB from the start (before its first task) but may "
               "use 1.00 GiB") == 0);
  CHECK(m.find("t=0.000000 s") == std::string::npos);
  CHECK(sim.report.memory_status().message() == expected);
}

TEST_CASE("the text summary is exact") {
  // The overflow case above with FLOPs: T = (B + p - 1)(tf + tb) = 15 ms; model FLOP/s per
  // GPU = 2 stages · 4 mb · 3e12 FLOP / (2 GPUs · 15 ms) = 800 TFLOP/s; bubble 3/15 of the
  // iteration, 3/12 of compute.
  auto u = base(PipelineSchedule::kOneFOneB, 2, 4);
  u.memory_limit = core::gib(1);
  u.stage.parameter_bytes = core::mib(256);
  u.stage.gradient_bytes = core::mib(256);
  u.stage.stored_activation_bytes = core::mib(300);
  u.stage.working_activation_bytes = core::mib(8);
  u.stage.forward_flops = core::Flops(1e12);
  u.stage.backward_flops = core::Flops(2e12);
  const std::string expected =
      "iteration time: 0.015000 s\n"
      "GPUs: 2\n"
      "model TFLOP/s per GPU (no recomputation): 800.00\n"
      "hardware TFLOP/s per GPU (with recomputation): 800.00\n"
      "bubble fraction (mean compute idle / iteration): 0.2000\n"
      "bubble / compute time (Megatron's bubble time fraction): 0.2500\n"
      "peak memory per GPU (max over devices): 1.09 GiB (1174405120 bytes)\n"
      "communication exposed / overlapped (worst device): 0.000000 s / 0.000000 s\n"
      " device  compute_busy_s  compute_idle_s  comm_exposed_s  comm_overlapped_s  tp_comm_s   peak_memory  in_flight\n"
      "     0        0.012000        0.003000        0.000000           0.000000   0.000000      1.09 GiB          2\n"
      "     1        0.012000        0.003000        0.000000           0.000000   0.000000    820.00 MiB          1\n"
      "memory overflow: device 0 (pipeline stage 0) needs 1.09 GiB at its peak (t=0.004000 s) but may use 1.00 GiB: over by 96.00 MiB (100663296 bytes); at the peak: parameters 256.00 MiB, gradients 256.00 MiB, optimizer states 0 B, stored activations 600.00 MiB, working activations 8.00 MiB; the largest component is stored activations (up to 2 microbatch-chunks in flight under 1f1b)\n";
  CHECK(format_report(run(make_uniform_problem(u)).report) == expected);
}

TEST_CASE("invalid problems are rejected with the field path") {
  auto pb = make_uniform_problem(base(PipelineSchedule::kOneFOneB, 2, 4));
  pb.stages[1].backward_s = core::Seconds(-1);
  CHECK(validate(pb).message() == "stages[1].backward_s: expected a finite number >= 0, got -1");
  pb = make_uniform_problem(base(PipelineSchedule::kOneFOneB, 2, 4));
  pb.stages.pop_back();
  CHECK(validate(pb).message() ==
        "stages: expected 2 entries (meshes × interleave = 2 × 1), got 1");
  pb = make_uniform_problem(base(PipelineSchedule::kOneFOneB, 2, 4));
  pb.meshes[1].send_prev.links = {7};
  CHECK(validate(pb).message() == "meshes[1].send_prev.links[0]: expected a link id in [0, 0), got 7");
  pb = make_uniform_problem(base(PipelineSchedule::kOneFOneB, 2, 4));
  pb.data_parallel = 2;
  pb.stages[0].grad_sync_bytes = core::mib(1);
  CHECK(validate(pb).message() ==
        "stages[0].grad_sync_s: expected a duration, a collective_cost hook or links in "
        "meshes[0].grad_sync for data_parallel 2, got none");
  auto r = simulate_pipeline(pb);
  CHECK(r.status().code() == core::StatusCode::kInvalidArgument);
  pb = make_uniform_problem(base(PipelineSchedule::kOneFOneB, 2, 4));
  pb.num_microbatches = 6'000'000;
  CHECK(validate(pb).message() ==
        "num_microbatches: expected at most 10000000 (virtual stage, microbatch) pairs, got 12000000");
}

TEST_CASE("blocking p2p (Megatron) exposes the send on the sender too") {
  // p = 2, GPipe, B = 2, 1 ms per send (1 MB at 1 GB/s), tf = 1, tb = 2 ms.
  // Asynchronous: stage 0 F0 0-1, F1 1-2; sends 1-2, 2-3; stage 1 F0 2-3, F1 3-4,
  // B0 4-6, B1 6-8; gradients back 6-7, 8-9; stage 0 B0 7-9, B1 9-11: T = 11 ms.
  auto u = base(PipelineSchedule::kGPipe, 2, 2);
  u.p2p_bandwidth = core::gbyte_per_s(1);
  u.stage.output_activation_bytes = core::Bytes(1'000'000);
  CHECK(iteration_ns(run(make_uniform_problem(u))) == 11 * kMs);
  // Blocking: stage 0 F0 0-1, send 1-2, F1 2-3, send 3-4; stage 1 F0 2-3, F1 4-5, B0 5-7,
  // send 7-8, B1 8-10, send 10-11; stage 0 B0 8-10, B1 11-13: T = 13 ms.
  u.blocking_p2p = true;
  CHECK(iteration_ns(run(make_uniform_problem(u))) == 13 * kMs);
}

TEST_CASE("the optimizer barrier makes every step wait for all stages") {
  // p = 2, GPipe, B = 1, no network. Stage 1: F 1-2, B 2-4, optimizer 5 ms: 4-9. Stage 0:
  // B 4-6, optimizer 1 ms: 6-7. T = 9 ms. With the barrier stage 1 steps at 6: 6-11 ms.
  auto pb = make_uniform_problem(base(PipelineSchedule::kGPipe, 2, 1));
  pb.stages[0].optimizer_step_s = core::milliseconds(1);
  pb.stages[1].optimizer_step_s = core::milliseconds(5);
  CHECK(iteration_ns(run(pb)) == 9 * kMs);
  pb.optimizer_barrier = true;
  CHECK(iteration_ns(run(pb)) == 11 * kMs);
}

TEST_CASE("a gradient send and a gradient all-reduce share the NIC link fairly") {
  // p = 2, GPipe, B = 1, dp = 2. Stage 1's gradient send (1 MB) and its all-reduce
  // (ring bytes 2·(1/2)·2 MB = 2 MB) both start at 4 ms on nic1 (1 GB/s): 0.5 B/ns each;
  // the send ends at 6 ms, the all-reduce has 1 MB left, alone: ends at 7 ms. Stage 0:
  // B0 6-8, its all-reduce on nic0 8-10 ms. T = 10 ms.
  auto u = base(PipelineSchedule::kGPipe, 2, 1);
  u.data_parallel = 2;
  u.stage.output_activation_bytes = core::Bytes(1'000'000);
  u.stage.grad_sync_bytes = core::Bytes(2'000'000);
  auto pb = make_uniform_problem(u);
  pb.links.push_back(LinkSpec{"nic0", core::gbyte_per_s(1)});
  pb.links.push_back(LinkSpec{"nic1", core::gbyte_per_s(1)});
  pb.meshes[0].grad_sync.links = {0};
  pb.meshes[1].grad_sync.links = {1};
  pb.meshes[1].send_prev.links = {1};
  auto sim = run(pb);
  CHECK(iteration_ns(sim) == 10 * kMs);
  // Device 1 communicates from 4 to 7 ms, all of it exposed. Device 0 receives the
  // gradient 4-6 ms while idle and all-reduces 8-10 ms: 4 ms, all exposed.
  CHECK(sim.report.devices[1].communication_busy.value() == doctest::Approx(0.003));
  CHECK(sim.report.devices[1].communication_exposed.value() == doctest::Approx(0.003));
  CHECK(sim.report.devices[0].communication_busy.value() == doctest::Approx(0.004));
  CHECK(sim.report.devices[0].communication_exposed.value() == doctest::Approx(0.004));
  // Split by kind: the send 4-6 ms on both devices; the all-reduce 4-7 and 8-10 ms.
  CHECK(sim.report.devices[1].p2p_exposed.value() == doctest::Approx(0.002));
  CHECK(sim.report.devices[1].grad_sync_exposed.value() == doctest::Approx(0.003));
  CHECK(sim.report.devices[0].p2p_exposed.value() == doctest::Approx(0.002));
  CHECK(sim.report.devices[0].grad_sync_exposed.value() == doctest::Approx(0.002));
  CHECK(sim.report.devices[0].reshard_exposed.value() == 0.0);
  CHECK(sim.timeline.link_bytes[1] == doctest::Approx(3e6));
  // nic1 carried 3 MB in 10 ms at 1 GB/s: utilisation 0.3, peak 1 GB/s (full from 4 to 7 ms).
  REQUIRE(sim.report.links.size() == 2);
  CHECK(sim.report.links[1].name == "nic1");
  CHECK(sim.report.links[1].utilisation == doctest::Approx(0.3));
  CHECK(sim.report.links[1].peak_rate.value() == doctest::Approx(1e9));
  CHECK(sim.report.links[0].utilisation == doctest::Approx(0.2));
}

TEST_CASE("tensor-parallel collective time inside the stage times is reported") {
  // p = 1, B = 2, full recompute: per microbatch forward 0.25 + recompute 0.25 + backward
  // 0.5 ms of collectives: 2 ms in total.
  auto u = base(PipelineSchedule::kOneFOneB, 1, 2);
  u.stage.recompute_s = core::milliseconds(1);
  u.stage.forward_tp_comm_s = core::microseconds(250);
  u.stage.backward_tp_comm_s = core::microseconds(500);
  auto sim = run(make_uniform_problem(u));
  CHECK(sim.report.devices[0].tensor_parallel_communication.value() == doctest::Approx(0.002));
  CHECK(iteration_ns(sim) == 8 * kMs);  // 2 × (1 + 1 + 2) ms, times unchanged
  auto bad = make_uniform_problem(u);
  bad.stages[0].backward_tp_comm_s = core::milliseconds(3);
  CHECK(validate(bad).message() ==
        "stages[0].backward_tp_comm_s: expected at most backward_s (0.002), got 0.003");
}

TEST_CASE("the JSON report carries the headline numbers with units in the keys") {
  auto u = base(PipelineSchedule::kGPipe, 4, 8);
  u.stage.stored_activation_bytes = core::mib(1);
  auto sim = run(make_uniform_problem(u));
  const std::string text = report_json(sim.report);
  auto j = nlohmann::json::parse(text);
  CHECK(j["iteration_time_s"].get<double>() == doctest::Approx(0.033));
  CHECK(j["bubble_fraction"].get<double>() == doctest::Approx(3.0 / 11.0));
  CHECK(j["peak_memory_bytes"].get<std::int64_t>() == core::mib(8).value());
  CHECK(j["devices"].size() == 4);
  CHECK(j["devices"][0]["peak_memory_by_component"]["stored_activations_bytes"].get<std::int64_t>() ==
        core::mib(8).value());
  CHECK(j["memory_overflows"].empty());
  CHECK(text == report_json(run(make_uniform_problem(u)).report));
}

TEST_CASE("the same problem twice gives byte-identical traces") {
  // Interleaved, shared links, grad sync over links, local all-gather: every mechanism.
  auto u = base(PipelineSchedule::kInterleaved1F1B, 4, 8, 2);
  u.p2p_bandwidth = core::gbyte_per_s(25);
  u.p2p_latency = core::microseconds(5);
  u.data_parallel = 4;
  u.grad_sync_buckets = 3;
  u.stage.output_activation_bytes = core::mib(24);
  u.stage.stored_activation_bytes = core::mib(100);
  u.stage.grad_sync_bytes = core::gib(2);
  auto pb = make_uniform_problem(u);
  pb.links.push_back(LinkSpec{"shared nic", core::gbyte_per_s(50)});
  for (auto& mesh : pb.meshes) {
    mesh.grad_sync.links = {static_cast<LinkId>(pb.links.size() - 1)};
    mesh.send_next.links.push_back(static_cast<LinkId>(pb.links.size() - 1));
  }
  pb.stages[3].output_reshard = ReshardMode::kLocalAllGather;
  pb.stages[3].reshard_group = 8;
  pb.stages[3].reshard_all_gather_s = core::microseconds(30);
  auto a = run(pb);
  auto b = run(pb);
  const std::string ta = chrome_trace_json(a.graph, a.timeline);
  CHECK(ta == chrome_trace_json(b.graph, b.timeline));
  CHECK(format_report(a.report) == format_report(b.report));
  CHECK(ta.size() > 1000);
}

TEST_CASE("a forward's working activations are held only while it runs, on top of the stored ones") {
  // Uniform 1F1B, p = 4, B = 8: device s holds min(p - s, B) microbatches' stored 1000 MiB
  // at its last warm-up forward (that forward's own included) and at every backward start.
  // The last warm-up forward adds its working set on top: peak = static 400 MiB +
  // 1000 · in_flight + max(forward working, backward working).
  auto u = with_memory(base(PipelineSchedule::kOneFOneB, 4, 8));
  for (const std::int64_t fwd_working_mib : {50, 5}) {
    CAPTURE(fwd_working_mib);
    u.stage.forward_working_activation_bytes = core::mib(fwd_working_mib);
    auto sim = run(make_uniform_problem(u));
    CHECK(iteration_ns(sim) == 33 * kMs);  // memory does not change the timing
    for (int s = 0; s < 4; ++s) {
      const auto& d = sim.report.devices[static_cast<std::size_t>(s)];
      const int in_flight = std::min(4 - s, 8);
      CHECK(d.peak_memory_bytes == core::mib(400 + 1000 * in_flight + std::max<std::int64_t>(fwd_working_mib, 10)).value());
    }
    // Nothing is left over at the end: the memory series ends at the static 400 MiB.
    for (const auto& m : sim.timeline.memory) {
      REQUIRE(!m.series.empty());
      CHECK(m.series.back().bytes == core::mib(400).value());
    }
  }
}

TEST_CASE("bytes one chunk's backward receives ahead are held until the other chunk's backward ends") {
  // One mesh, two chunks, one microbatch: F(c0) F(c1) B(c1) B(c0). Stored 100 MiB per
  // chunk, working 10 MiB per backward; B(c1) receives 200 MiB ahead for B(c0).
  // Levels: F(c0) 100, F(c1) 200, B(c1) 200 + 10 = 210 then 100 + 200 = 300 held,
  // B(c0) 300 + 10 = 310, then 0. Peak 310 MiB (210 MiB without the early receive).
  auto u = base(PipelineSchedule::kInterleaved1F1B, 1, 1, 2);
  PipelineProblem pb = make_uniform_problem(u);
  for (auto& st : pb.stages) {
    st.stored_activation_bytes = core::mib(100);
    st.working_activation_bytes = core::mib(10);
  }
  CHECK(run(pb).report.devices[0].peak_memory_bytes == core::mib(210).value());
  pb.stages[1].backward_received_ahead_bytes = core::mib(200);
  pb.stages[0].backward_received_earlier_bytes = core::mib(200);
  auto sim = run(pb);
  CHECK(sim.report.devices[0].peak_memory_bytes == core::mib(310).value());
  CHECK(sim.timeline.memory[0].series.back().bytes == 0);
  // Each mesh must free what it received ahead.
  pb.stages[0].backward_received_earlier_bytes = core::mib(100);
  const core::Status st = validate(pb);
  CHECK(st.message() ==
        "stages[0].backward_received_earlier_bytes: expected the 209715200 bytes received ahead on mesh 0 in "
        "all, got 104857600");
}

}  // namespace
}  // namespace alpasim::sim

// The executor's memory accounting against the simulator's for the same plan
// (planner::evaluate_plan scores a plan as the search does).
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <tuple>

#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/verify.h"
#include "planner/search/search.h"
#include "planner/search/stage_memory.h"
#include "schema/plan.h"
#include "tests/unit/exec/exec_fixtures.h"
#include "tests/unit/exec/search_fixtures.h"
#include "tests/support/shipped_calibration.h"
#include "tests/support/tiny_models.h"

namespace alpasim::exec {
namespace {

using testing::executor_training_graph;
using testing::p3_input;
using testing::sequence_parallel_plan_file;

/// The high-water mark the CPU backend measured while running `p` (its counting allocator,
/// exec/cpu/counting_allocator.h), per device at the plan dtype. One warm-up and one
/// measured iteration, so memory kept from the first iteration would raise the mark. Also
/// checks the host-side count: fp32 storage of the same allocations, i.e. the ALLOCATE/FREE
/// walk at 4 bytes per element.
std::vector<std::int64_t> measured_peak_on_cpu(const Program& p) {
  RunOptions o;
  o.warmup_iterations = 1;
  o.iterations = 1;
  auto r = cpu::make_cpu_backend()->run(p, o);
  REQUIRE_MESSAGE(r.ok(), r.status().message());
  REQUIRE(r->measured_peak_plan_bytes.size() == p.code.size());
  REQUIRE(r->measured_peak_host_bytes.size() == p.code.size());
  for (std::size_t d = 0; d < p.code.size(); ++d) {
    std::int64_t now = 0, peak = 0;
    for (const Instruction& in : p.code[d]) {
      const std::int64_t b = p.buffers[static_cast<std::size_t>(in.buffer)].elements * 4;
      if (in.kind == InstrKind::kAllocate) peak = std::max(peak, now += b);
      if (in.kind == InstrKind::kFree) now -= b;
    }
    CHECK(r->measured_peak_host_bytes[d] == peak);
  }
  return r->measured_peak_plan_bytes;
}

/// Per device: the executor's parameters (its own, not received copies), gradients and
/// optimizer states.
struct Components {
  std::int64_t parameters = 0, gradients = 0, optimizer_states = 0;
};

std::vector<Components> components(const Program& p) {
  std::vector<Components> out(p.code.size());
  for (const Buffer& b : p.buffers) {
    if (b.received || b.superseded) continue;
    auto& c = out[static_cast<std::size_t>(b.device)];
    if (b.role == BufferRole::kParameter) c.parameters += b.bytes;
    if (b.role == BufferRole::kGradient) c.gradients += b.bytes;
    if (b.role == BufferRole::kOptimizerState) c.optimizer_states += b.bytes;
  }
  return out;
}

/// The high-water mark of each device when every RECV (with its ALLOCATE) happens at the
/// start of the task it belongs to (its task kind, stage and microbatch) rather than where
/// the executor's per-channel order put it: exec/lower.cc hoists a RECV that was sent
/// earlier on the same (sender, receiver) channel in front of the RECV the receiver needs
/// first (NCCL's in-order rule), so its buffer is held from an earlier task on.
std::vector<std::int64_t> high_water_receiving_at_task_start(const Program& p) {
  std::vector<std::int64_t> out;
  for (const auto& code : p.code) {
    // First instruction of each (task, stage, microbatch) that is not a RECV or ALLOCATE.
    std::map<std::tuple<int, std::int32_t, std::int32_t>, std::size_t> task_start;
    std::set<BufferId> received;
    for (const Instruction& in : code) {
      if (in.kind == InstrKind::kRecv) received.insert(in.buffer);
    }
    for (std::size_t i = 0; i < code.size(); ++i) {
      const Instruction& in = code[i];
      if (in.kind == InstrKind::kRecv || in.kind == InstrKind::kAllocate) continue;
      task_start.emplace(std::make_tuple(static_cast<int>(in.task), in.stage, in.microbatch), i);
    }
    std::vector<std::int64_t> alloc_at(code.size(), 0), free_at(code.size(), 0);
    for (std::size_t i = 0; i < code.size(); ++i) {
      const Instruction& in = code[i];
      if (in.kind != InstrKind::kAllocate && in.kind != InstrKind::kFree) continue;
      const std::int64_t bytes = p.buffers[static_cast<std::size_t>(in.buffer)].bytes;
      if (in.kind == InstrKind::kFree) {
        free_at[i] += bytes;
        continue;
      }
      std::size_t at = i;
      if (received.count(in.buffer)) {
        auto it = task_start.find({static_cast<int>(in.task), in.stage, in.microbatch});
        if (it != task_start.end()) at = std::max(i, it->second);
      }
      alloc_at[at] += bytes;
    }
    std::int64_t level = 0, peak = 0;
    for (std::size_t i = 0; i < code.size(); ++i) {
      level += alloc_at[i];
      peak = std::max(peak, level);
      level -= free_at[i];
    }
    out.push_back(peak);
  }
  return out;
}

/// 2-D weight tiles on a 2x2 mesh, 1F1B, 2 microbatches, weight-update sharding: fc1's
/// weight rows over axis 0 (a contracted dimension: partial sums) and columns over axis 1;
/// fc2's the other way round.
schema::Plan two_d_tile_plan(const ir::ModelConfig& gpt) {
  auto spec = [](const char* text) { return *schema::ShardingSpec::parse(text); };
  auto p = testing::make_plan(gpt, {{0, 4, 2, 2, {0, 1, 2, 3}}}, schema::Schedule::kOneFOneB, 2, 8);
  for (int l = 0; l < 2; ++l) {
    const std::string b = "block" + std::to_string(l) + "/";
    p.stages[0].shardings.push_back({b + "mlp/fc1", "2d", {spec("RRS0"), spec("S0S1"), spec("S1")}, spec("RRS1")});
    p.stages[0].shardings.push_back({b + "mlp/fc2", "2d", {spec("RRS1"), spec("S1S0"), spec("S0")}, spec("RRS0")});
  }
  p.stages[0].weight_update_sharding = true;
  return p;
}

TEST_CASE("memory: the simulator's peak per device equals the executor's high-water mark for data-parallel, "
          "single-GPU (planner::stage_memory) and sharded stages (planner::sharded_stage_memory)") {
  using testing::make_plan;
  using schema::Schedule;
  const ir::ModelConfig gpt = testing::tiny_gpt(2);  // 4 layers: embedding, 2 blocks, head
  std::vector<std::pair<std::string, schema::Plan>> plans;
  plans.push_back({"1x2 data parallel, 1F1B, 2 mb", make_plan(gpt, {{0, 4, 1, 2, {0, 1}}}, Schedule::kOneFOneB, 2, 8)});
  plans.push_back({"2 stages, GPipe, 4 mb", make_plan(gpt, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kGpipe, 4, 8)});
  plans.push_back({"2 stages, 1F1B, 4 mb", make_plan(gpt, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 8)});
  plans.push_back({"4 stages on 2 devices, interleaved 1F1B, 4 mb",
                   make_plan(gpt, {{0, 1, 1, 1, {0}}, {1, 2, 1, 1, {1}}, {2, 3, 1, 1, {0}}, {3, 4, 1, 1, {1}}},
                             Schedule::kInterleavedOneFOneB, 4, 8, 2)});
  {
    auto p = make_plan(gpt, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 8);
    p.recompute = schema::Recompute::kFull;
    plans.push_back({"2 stages, 1F1B, 4 mb, full recomputation", p});
  }
  {
    auto p = make_plan(gpt, {{0, 2, 1, 2, {0, 1}}, {2, 4, 1, 2, {2, 3}}}, Schedule::kOneFOneB, 2, 8);
    for (auto& st : p.stages) st.weight_update_sharding = true;
    plans.push_back({"two 1x2 stages, 1F1B, 2 mb, weight-update sharding", p});
  }
  {
    // Fused attention: the scores are recomputed in every block's backward, not stored.
    ir::ModelConfig fused = gpt;
    std::get<ir::TransformerConfig>(fused.spec).fused_attention = true;
    plans.push_back({"2 stages, 1F1B, 4 mb, fused attention",
                     make_plan(fused, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 8)});
  }
  // Sharded stages (lowered operator by operator, planner::sharded_stage_memory): the
  // search's own intra-op plans (one stage on 2 GPUs = 2x1, on 2 nodes of 2 GPUs = 2x2,
  // one microbatch) and a hand-written Megatron plan (two 1x2 stages, 1F1B, 2 microbatches,
  // tied embedding across the stages).
  std::map<std::string, std::int64_t> nodes_of;  // sharded plans: p3 nodes, GPUs per node
  for (std::int64_t nodes : {1, 2}) {
    planner::SearchInput in = p3_input(gpt, 8, nodes, 2);
    in.mode = "intra_op_only";
    in.options.compare_baselines = false;
    in.options.time_limit_s = 5;
    in.options.recompute = {schema::Recompute::kNone};
    in.options.top_k = 1;
    auto r = planner::search(in);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const std::string name = std::string("searched intra-op plan, ") + (nodes == 1 ? "2x1" : "2x2") + " (sharded)";
    nodes_of[name] = nodes;
    plans.push_back({name, r->plan});
  }
  {
    auto p = schema::read_plan_file(std::string(ALPASIM_SOURCE_DIR) + "/tests/unit/exec/data/tiny_gpt_megatron_2stage.json");
    REQUIRE_MESSAGE(p.ok(), p.status().message());
    plans.push_back({"Megatron, two 1x2 stages, 1F1B, 2 mb (sharded)", *p});
  }
  plans.push_back({"2-D weight tiles on 2x2, weight-update sharding, 2 mb (sharded)", two_d_tile_plan(gpt)});
  {
    // As `alpa-sim --out` writes a fixed Megatron plan: tp 2, pp 2, dp 2 on 8 GPUs, fp32,
    // fused attention, specs on operators' outputs only.
    auto p = schema::read_plan_file(std::string(ALPASIM_SOURCE_DIR) +
                                    "/tests/unit/exec/data/tiny_gpt_megatron_plan_file_tp2_pp2_dp2.json");
    REQUIRE_MESSAGE(p.ok(), p.status().message());
    plans.push_back({"Megatron plan file tp2 pp2 dp2 (alpa-sim --out), two 2x2 stages (sharded)", *p});
  }
  std::string table =
      "| plan | device | executor peak (static) | executor peak (measured, CPU backend) | simulator peak | "
      "executor peak, receives at their task's start | params+grads exec / sim | optimizer states exec / sim |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const auto& [name, plan] : plans) {
    CAPTURE(name);
    const bool searched = nodes_of.count(name) > 0;
    std::int64_t devices = 4;  // a p3.16xlarge node's 8 GPUs for the 8-GPU plan file
    for (const auto& st : plan.stages) {
      for (std::int64_t x : st.device_ids) devices = std::max(devices, x + 1);
    }
    planner::SearchInput in =
        p3_input(plan.model, plan.global_batch_size, searched ? nodes_of.at(name) : 1, searched ? 2 : devices);
    in.dtype = plan.dtype;
    auto r = planner::evaluate_plan(in, plan);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    auto prog = lower_plan(plan);
    REQUIRE_MESSAGE(prog.ok(), prog.status().message());
    auto v = verify_program(*prog);
    REQUIRE_MESSAGE(v.ok(), v.status().message());
    const auto measured = measured_peak_on_cpu(*prog);
    const auto comp = components(*prog);
    const auto at_task_start = high_water_receiving_at_task_start(*prog);
    const auto& pb = r->problem;
    const std::size_t meshes = pb.meshes.size();
    for (std::size_t d = 0; d < prog->code.size(); ++d) {
      CAPTURE(d);
      // The device's mesh and the model chunks on it (chunk c lives on mesh c % meshes).
      std::size_t mesh = 0;
      for (std::size_t s = 0; s < prog->stage_devices.size(); ++s) {
        for (std::int32_t x : prog->stage_devices[s]) {
          if (static_cast<std::size_t>(x) == d) mesh = s % meshes;
        }
      }
      std::int64_t params = 0, grads = 0, opt = 0;
      for (std::size_t c = mesh; c < pb.stages.size(); c += meshes) {
        params += pb.stages[c].parameter_bytes.value();
        grads += pb.stages[c].gradient_bytes.value();
        opt += pb.stages[c].optimizer_state_bytes.value();
      }
      // Copies of other meshes' weights (GPT's tied embedding on the head stage), and the
      // received buffers the channel order allocates before their task starts.
      std::int64_t received_params = 0;
      for (const Buffer& b : prog->buffers) {
        if (b.device == static_cast<std::int32_t>(d) && b.received && b.role == BufferRole::kParameter) {
          received_params += b.bytes;
        }
      }
      const std::int64_t exec_peak = v->peak_bytes[d];
      const std::int64_t sim_peak = r->prediction.peak_memory_bytes_per_stage[mesh];
      // What the CPU backend's allocator measured while running equals the static count.
      CHECK(measured[d] == exec_peak);
      table += "| " + name + " | " + std::to_string(d) + " | " + std::to_string(exec_peak) + " | " +
               std::to_string(measured[d]) + " | " +
               std::to_string(sim_peak) + " | " + std::to_string(at_task_start[d]) + " | " +
               std::to_string(comp[d].parameters + received_params + comp[d].gradients) + " / " +
               std::to_string(params + grads) + " | " + std::to_string(comp[d].optimizer_states) + " / " +
               std::to_string(opt) + " |\n";
      // planner::stage_memory (data-parallel and single-GPU stages) and sharded_stage_memory
      // walk the executor's ALLOCATE/FREE order, so every component and the high-water mark
      // are equal. Gradients: every accumulation buffer, with on sharded stages the
      // resharding copy in the weight's layout the optimizer reads (held all iteration too;
      // components() counts that copy only).
      std::int64_t held_grads = 0;
      for (const Buffer& b : prog->buffers) {
        if (b.device == static_cast<std::int32_t>(d) && !b.received && b.role == BufferRole::kGradient) {
          held_grads += b.bytes;
        }
      }
      // Weight copies (a weight read in another layout) live within the task that makes
      // them in both (exec/lower.cc materialize): no component holds one.
      CHECK(comp[d].parameters + received_params == params);
      CHECK(held_grads == grads);
      CHECK(comp[d].optimizer_states == opt);
      CHECK(exec_peak == sim_peak);
      CHECK(measured[d] == sim_peak);
      if (name.find("interleaved") != std::string::npos && d == 0) {
        // Device 1 sends stage 3's tied-embedding gradient contribution (head/logits/
        // grad_rhs, vocab 16 x hidden 8 x 2 bytes = 256 B per microbatch) to stage 0 before
        // the boundary gradient stage 2 needs; NCCL's per-channel order makes device 0
        // receive it at the start of stage 2's backward, one task before stage 0's backward
        // reads it. stage_memory models it (backward_received_ahead/earlier_bytes): without
        // it the peak would be the one with receives at their task's start, 144 B lower.
        CHECK(at_task_start[d] + 144 == exec_peak);
      } else {
        CHECK(at_task_start[d] == exec_peak);
      }
    }
  }
  MESSAGE("\n" << table);
}

/// Memory of one forward or backward task instance in a device's program: the level before
/// its first instruction, the highest level while it runs, the level after its last (a FREE
/// belongs to the task running when it is issued).
struct TaskMemory {
  std::int64_t start = 0, peak = 0, end = 0;
};

std::map<std::tuple<int, std::int32_t, std::int32_t>, TaskMemory> task_memory(const Program& p, std::size_t d) {
  std::map<std::tuple<int, std::int32_t, std::int32_t>, TaskMemory> out;
  std::int64_t level = 0;
  // A weight received for the iteration (GPT's tied table on the last stage) is freed in
  // the last backward after its last reader there; the walk holds it all iteration (outside
  // the task levels), so the task's levels count its free at the task's end.
  std::int64_t received_freed = 0;
  TaskMemory* cur = nullptr;
  std::tuple<int, std::int32_t, std::int32_t> key{-1, -1, -1};
  for (const Instruction& in : p.code[d]) {
    const Buffer* buffer = in.buffer >= 0 ? &p.buffers[static_cast<std::size_t>(in.buffer)] : nullptr;
    if (in.kind == InstrKind::kFree && cur != nullptr && buffer->received && buffer->microbatch == -1) {
      received_freed += buffer->bytes;
      continue;
    }
    if (in.kind != InstrKind::kFree) {
      const bool task = in.task == TaskKind::kForward || in.task == TaskKind::kBackward;
      auto k = std::make_tuple(static_cast<int>(in.task), in.stage, in.microbatch);
      // A per-iteration buffer's instruction inside a task (a received weight, a weight's
      // resharding copy: microbatch -1) belongs to the task running.
      if (task && in.microbatch == -1 && cur != nullptr && std::get<0>(key) == std::get<0>(k) &&
          std::get<1>(key) == std::get<1>(k)) {
        k = key;
      }
      if (!task || k != key) {
        level -= received_freed;
        received_freed = 0;
        if (cur != nullptr) cur->end = level;
        cur = nullptr;
        key = {-1, -1, -1};
      }
      if (task && cur == nullptr) {
        key = k;
        REQUIRE_MESSAGE(out.count(k) == 0, "a task split in two runs");
        cur = &out[k];
        cur->start = cur->peak = level;
      }
    }
    const std::int64_t bytes = buffer != nullptr ? buffer->bytes : 0;
    if (in.kind == InstrKind::kAllocate) level += bytes;
    if (in.kind == InstrKind::kFree) level -= bytes;
    if (cur != nullptr) cur->peak = std::max(cur->peak, level);
  }
  level -= received_freed;
  if (cur != nullptr) cur->end = level;
  return out;
}

TEST_CASE("memory: planner::stage_memory equals each task's memory in the executor's programs (MLP, fp32)") {
  // An MLP (input, fc1, fc2, head; fp32, int labels) lowered by the executor; every forward
  // and backward of every microbatch measured in its program: bytes held after the forward
  // (stored), the forward's peak above that, the backward's peak above its start, and the
  // backward freeing exactly the stored bytes; static bytes from the buffers.
  using testing::make_plan;
  using schema::Schedule;
  const ir::ModelConfig gpt = testing::tiny_gpt(2);  // replaced by the MLP below
  LowerOptions o;
  o.build_forward = [](std::int64_t b) -> core::Result<ir::Graph> { return testing::build_mlp(b, 2); };
  std::vector<std::pair<std::string, schema::Plan>> plans;
  plans.push_back({"2 stages, 1F1B", make_plan(gpt, {{0, 2, 1, 1, {0}}, {2, 4, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 8)});
  plans.push_back({"3 stages, GPipe", make_plan(gpt, {{0, 1, 1, 1, {0}}, {1, 3, 1, 1, {1}}, {3, 4, 1, 1, {2}}},
                                                Schedule::kGpipe, 2, 8)});
  {
    auto p = make_plan(gpt, {{0, 3, 1, 2, {0, 1}}, {3, 4, 1, 1, {2}}}, Schedule::kOneFOneB, 2, 8);
    p.stages[0].weight_update_sharding = true;
    p.recompute = schema::Recompute::kFull;
    plans.push_back({"1x2 + 1 stages, 1F1B, weight-update sharding, full recomputation", p});
  }
  for (const auto& [name, plan] : plans) {
    CAPTURE(name);
    auto prog = lower_plan(plan, o);
    REQUIRE_MESSAGE(prog.ok(), prog.status().message());
    REQUIRE(verify_program(*prog).ok());
    std::vector<std::int64_t> starts;
    for (const auto& st : plan.stages) starts.push_back(st.layer_begin);
    starts.push_back(plan.stages.back().layer_end);
    for (std::size_t s = 0; s < plan.stages.size(); ++s) {
      CAPTURE(s);
      planner::StageMemoryInput in;
      in.graph = &prog->graph_of_stage(static_cast<std::int32_t>(s));
      in.stage_starts = starts;
      in.meshes = static_cast<int>(plan.stages.size());
      in.stage = static_cast<int>(s);
      in.mesh_size = static_cast<std::int64_t>(plan.stages[s].device_ids.size());
      in.weight_update_sharding = plan.stages[s].weight_update_sharding;
      auto sm = planner::stage_memory(in);
      REQUIRE_MESSAGE(sm.ok(), sm.status().message());
      CHECK(sm->backward_received_ahead_bytes == 0);
      CHECK(sm->backward_received_earlier_bytes == 0);
      for (std::int32_t d : prog->stage_devices[s]) {
        CAPTURE(d);
        Components c;
        for (const Buffer& b : prog->buffers) {
          if (b.device != d || b.superseded) continue;
          if (b.role == BufferRole::kParameter) c.parameters += b.bytes;
          if (b.role == BufferRole::kGradient && !b.received) c.gradients += b.bytes;
          if (b.role == BufferRole::kOptimizerState) c.optimizer_states += b.bytes;
        }
        CHECK(c.parameters == sm->parameter_bytes + sm->received_parameter_bytes);
        CHECK(c.gradients == sm->gradient_bytes);
        CHECK(c.optimizer_states == sm->optimizer_state_bytes);
        const auto tm = task_memory(*prog, static_cast<std::size_t>(d));
        for (std::int32_t mb = 0; mb < plan.num_microbatches; ++mb) {
          CAPTURE(mb);
          const auto f = tm.find({static_cast<int>(TaskKind::kForward), static_cast<std::int32_t>(s), mb});
          const auto b = tm.find({static_cast<int>(TaskKind::kBackward), static_cast<std::int32_t>(s), mb});
          REQUIRE(f != tm.end());
          CHECK(f->second.end - f->second.start == sm->stored_bytes);
          CHECK(f->second.peak - f->second.end == sm->forward_working_bytes);
          if (b == tm.end()) {  // the input layer alone: nothing to differentiate
            CHECK(sm->stored_bytes == 0);
            CHECK(sm->backward_working_bytes == 0);
            continue;
          }
          CHECK(b->second.peak - b->second.start == sm->backward_working_bytes);
          CHECK(b->second.start - b->second.end == sm->stored_bytes);
        }
      }
    }
  }
}

TEST_CASE("memory: planner::stage_memory rejects stage ranges that do not cover the graph") {
  const ir::Graph g = testing::build_mlp(2, 2);  // 4 layers
  planner::StageMemoryInput in;
  in.graph = &g;
  in.stage_starts = {0, 2, 3};
  auto r = planner::stage_memory(in);
  REQUIRE(!r.ok());
  CHECK(r.status().message() == "stage_memory: the stage ranges do not cover the graph's 4 layers");
}

TEST_CASE("memory: the simulator's peak equals the executor's on the tiny Wide-ResNet (SGD, batch norm)") {
  // 18 layers (stem, 16 bottleneck blocks, head) over two 1-GPU stages, over one 1x2
  // data-parallel stage, and the search's plans (alpa on 2 and 4 GPUs; intra-op only on 2
  // GPUs: a sharded stage); the executor trains Wide-ResNet with SGD + momentum, so the
  // search input says "sgd" too.
  using testing::make_plan;
  using schema::Schedule;
  const ir::ModelConfig wrn = ::alpasim::testing::tiny_wide_resnet();
  std::vector<std::pair<std::string, schema::Plan>> plans;
  plans.push_back({"2 stages, 1F1B, 4 mb", make_plan(wrn, {{0, 9, 1, 1, {0}}, {9, 18, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 8)});
  plans.push_back({"2 stages, GPipe, 2 mb", make_plan(wrn, {{0, 5, 1, 1, {0}}, {5, 18, 1, 1, {1}}}, Schedule::kGpipe, 2, 8)});
  plans.push_back({"1x2 data parallel, 2 mb", make_plan(wrn, {{0, 18, 1, 2, {0, 1}}}, Schedule::kOneFOneB, 2, 8)});
  // The search's plans on 2 and 4 GPUs (sharded stages: the dense head row-parallel).
  std::map<std::string, std::int64_t> gpus_of;
  for (const auto& [mode, gpus] : std::vector<std::pair<std::string, std::int64_t>>{{"alpa", 2}, {"alpa", 4}, {"intra_op_only", 2}}) {
    planner::SearchInput in = testing::small_search(wrn, mode, 8, gpus);
    in.optimizer = "sgd";
    auto r = planner::search(in);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    const std::string name = "searched " + mode + " plan on " + std::to_string(gpus) + " GPUs";
    gpus_of[name] = gpus;
    plans.push_back({name, r->plan});
  }
  std::string table =
      "| tiny Wide-ResNet plan | device | executor peak (static) | executor peak (measured) | simulator peak |\n"
      "|---|---|---|---|---|\n";
  for (const auto& [name, plan] : plans) {
    CAPTURE(name);
    planner::SearchInput in = p3_input(wrn, plan.global_batch_size, 1, gpus_of.count(name) ? gpus_of.at(name) : 4);
    in.optimizer = "sgd";
    auto r = planner::evaluate_plan(in, plan);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    auto prog = lower_plan(plan);
    REQUIRE_MESSAGE(prog.ok(), prog.status().message());
    auto v = verify_program(*prog);
    REQUIRE_MESSAGE(v.ok(), v.status().message());
    const auto measured = measured_peak_on_cpu(*prog);
    for (std::size_t d = 0; d < prog->code.size(); ++d) {
      CAPTURE(d);
      std::size_t mesh = 0;
      for (std::size_t s = 0; s < prog->stage_devices.size(); ++s) {
        for (std::int32_t x : prog->stage_devices[s]) {
          if (static_cast<std::size_t>(x) == d) mesh = s;
        }
      }
      CHECK(v->peak_bytes[d] == r->prediction.peak_memory_bytes_per_stage[mesh]);
      CHECK(measured[d] == r->prediction.peak_memory_bytes_per_stage[mesh]);
      table += "| " + name + " | " + std::to_string(d) + " | " + std::to_string(v->peak_bytes[d]) + " | " +
               std::to_string(measured[d]) + " | " +
               std::to_string(r->prediction.peak_memory_bytes_per_stage[mesh]) + " |\n";
    }
  }
  MESSAGE("\n" << table);
}

}  // namespace
}  // namespace alpasim::exec

namespace alpasim::exec {
namespace {

// Megatron writes its block of a split weight's gradient (under sequence parallelism it
// gathers the linear's input again for it); the executor did so only where the operands'
// splits agreed, and summed whole partial gradients for the column-parallel linears: their
// accumulation buffers were the whole weight's size, plus a copy in the weight's layout.
// The vocabulary-split word embedding's gradient likewise (before 2026-11-27, stop 41, its
// scatter-add was written whole and partial, then copied into the table's layout: 2,048
// bytes more on the first stage here, the whole 32 x 16 fp32 table).
TEST_CASE("memory: a sequence-parallel Megatron plan file holds each gradient as its weight's block") {
  const schema::Plan plan = sequence_parallel_plan_file();
  const std::int64_t mbs = plan.global_batch_size / plan.num_microbatches;
  const ir::Graph full = executor_training_graph(plan, mbs), one = executor_training_graph(plan, 1),
                  two = executor_training_graph(plan, 2);
  planner::ShardedStageMemoryInput in;
  in.plan = &plan;
  in.microbatch_graph = &full;
  in.one_sample_graph = &one;
  in.two_sample_graph = &two;
  // The first stage holds the embedding (lookup and scatter-add gradient), the last the
  // head; both hold blocks, every weight read by a linear or a norm.
  for (int stage = 0; stage < static_cast<int>(plan.stages.size()); ++stage) {
    CAPTURE(stage);
    in.stage = stage;
    auto sm = planner::sharded_stage_memory(in);
    REQUIRE_MESSAGE(sm.ok(), sm.status().message());
    REQUIRE(sm->has_value());
    CHECK((*sm)->parameter_bytes > 0);
    CHECK((*sm)->gradient_bytes == (*sm)->parameter_bytes);
  }
}

TEST_CASE("memory: planner::sharded_stage_memory equals every microbatch's tasks in the executor's programs "
          "of sharded stages (tiny GPT)") {
  // Every device of a sharded stage: weights, held gradients (with the optimizer's copies
  // in the weights' layouts) and optimizer states from the buffers; every
  // microbatch's forward (bytes held after it, its peak above that) and backward (its
  // peak above its start, freeing the stored bytes) from the program's levels.
  const ir::ModelConfig gpt = testing::tiny_gpt(2);
  std::vector<std::pair<std::string, schema::Plan>> plans;
  plans.push_back({"2-D weight tiles on 2x2, weight-update sharding, 2 mb", two_d_tile_plan(gpt)});
  {
    auto p = schema::read_plan_file(std::string(ALPASIM_SOURCE_DIR) + "/tests/unit/exec/data/tiny_gpt_megatron_2stage.json");
    REQUIRE_MESSAGE(p.ok(), p.status().message());
    plans.push_back({"Megatron, two 1x2 stages, 1F1B, 2 mb", *p});
  }
  plans.push_back({"Megatron plan file tp2 pp2 dp2, sequence parallel", sequence_parallel_plan_file()});
  for (const auto& [name, plan] : plans) {
    CAPTURE(name);
    auto prog = lower_plan(plan);
    REQUIRE_MESSAGE(prog.ok(), prog.status().message());
    REQUIRE(verify_program(*prog).ok());
    const ir::Graph full = executor_training_graph(plan, plan.global_batch_size / plan.num_microbatches),
                    one = executor_training_graph(plan, 1), two = executor_training_graph(plan, 2);
    for (std::size_t s = 0; s < plan.stages.size(); ++s) {
      CAPTURE(s);
      planner::ShardedStageMemoryInput in;
      in.plan = &plan;
      in.microbatch_graph = &full;
      in.one_sample_graph = &one;
      in.two_sample_graph = &two;
      in.stage = static_cast<int>(s);
      auto sm = planner::sharded_stage_memory(in);
      REQUIRE_MESSAGE(sm.ok(), sm.status().message());
      REQUIRE(sm->has_value());
      const planner::StageMemory& m = **sm;
      for (std::int32_t d : prog->stage_devices[s]) {
        CAPTURE(d);
        std::int64_t params = 0, grads = 0, states = 0;
        for (const Buffer& b : prog->buffers) {
          if (b.device != d) continue;
          if (b.role == BufferRole::kParameter && !b.superseded) params += b.bytes;
          if (b.role == BufferRole::kGradient && !b.received) grads += b.bytes;
          if (b.role == BufferRole::kOptimizerState) states += b.bytes;
        }
        CHECK(params == m.parameter_bytes + m.received_parameter_bytes);
        CHECK(grads == m.gradient_bytes);
        CHECK(states == m.optimizer_state_bytes);
        const auto tm = task_memory(*prog, static_cast<std::size_t>(d));
        // Every task frees the weight copies it makes (exec/lower.cc materialize), so every
        // microbatch's tasks have the walk's levels.
        for (std::int32_t mb = 0; mb < plan.num_microbatches; ++mb) {
          CAPTURE(mb);
          const auto f = tm.find({static_cast<int>(TaskKind::kForward), static_cast<std::int32_t>(s), mb});
          const auto b = tm.find({static_cast<int>(TaskKind::kBackward), static_cast<std::int32_t>(s), mb});
          REQUIRE(f != tm.end());
          REQUIRE(b != tm.end());
          CHECK(f->second.end - f->second.start == m.stored_bytes);
          CHECK(f->second.peak - f->second.end == m.forward_working_bytes);
          CHECK(b->second.peak - b->second.start == m.backward_working_bytes);
          if (mb + 1 < plan.num_microbatches) {
            CHECK(b->second.start - b->second.end == m.stored_bytes);
          } else {  // the last backward also frees what the iteration received (a tied weight)
            CHECK(b->second.start - b->second.end - m.received_parameter_bytes == m.stored_bytes);
          }
        }
        MESSAGE(name << " stage " << s << " device " << d << ": stored " << m.stored_bytes << ", forward working "
                     << m.forward_working_bytes << ", backward working " << m.backward_working_bytes);
      }
    }
  }
}

}  // namespace
}  // namespace alpasim::exec

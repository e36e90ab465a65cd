// The executor's memory accounting against the simulator's for the same plan
// (planner::evaluate_plan scores a plan as the search does).
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <tuple>

#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "exec/verify.h"
#include "planner/search/search.h"
#include "planner/search/stage_memory.h"
#include "tests/unit/exec/exec_fixtures.h"
#include "tests/unit/exec/search_fixtures.h"
#include "tests/support/shipped_calibration.h"
#include "tests/support/tiny_models.h"

namespace alpasim::exec {
namespace {

using testing::p3_input;

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

TEST_CASE("memory: the simulator's peak per device equals the executor's high-water mark for data-parallel "
          "and single-GPU stages (planner::stage_memory), table with sharded stages") {
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
  // The search's own sharded plans (intra-op only: one stage on 2 GPUs = 2x1, on 2 nodes of 2
  // GPUs = 2x2). evaluate_plan prices a plan with the intra-op solution the search would
  // find, which for these plans is the one they record; the planner counts every activation
  // as split over all devices while the executor holds each block as its layout says, so
  // only their optimizer states are asserted (the rest is printed; the programs verify).
  std::set<std::string> sharded;
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
    sharded.insert(name);
    plans.push_back({name, r->plan});
  }
  std::string table =
      "| plan | device | executor peak | simulator peak | executor peak, receives at their task's start | "
      "params+grads exec / sim | optimizer states exec / sim |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const auto& [name, plan] : plans) {
    CAPTURE(name);
    const bool is_sharded = sharded.count(name) > 0;
    const std::int64_t nodes = is_sharded && plan.stages[0].device_ids.size() == 4 ? 2 : 1;
    auto r = planner::evaluate_plan(p3_input(gpt, plan.global_batch_size, nodes, is_sharded ? 2 : 4), plan);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    auto prog = lower_plan(plan);
    REQUIRE_MESSAGE(prog.ok(), prog.status().message());
    auto v = verify_program(*prog);
    REQUIRE_MESSAGE(v.ok(), v.status().message());
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
      table += "| " + name + " | " + std::to_string(d) + " | " + std::to_string(exec_peak) + " | " +
               std::to_string(sim_peak) + " | " + std::to_string(at_task_start[d]) + " | " +
               std::to_string(comp[d].parameters + received_params + comp[d].gradients) + " / " +
               std::to_string(params + grads) + " | " + std::to_string(comp[d].optimizer_states) + " / " +
               std::to_string(opt) + " |\n";
      if (is_sharded) {
        // Sharded stages keep the planner's layer sums (activations split over every
        // device, the intra-op solution's weight layouts): only the optimizer states, split
        // over the mesh by weight-update sharding on both sides, are equal.
        CHECK(comp[d].optimizer_states == opt);
        continue;
      }
      // Data-parallel and single-GPU stages: planner::stage_memory walks the executor's
      // ALLOCATE/FREE order, so every component and the high-water mark are equal.
      CHECK(comp[d].parameters + received_params == params);
      CHECK(comp[d].gradients == grads);
      CHECK(comp[d].optimizer_states == opt);
      CHECK(exec_peak == sim_peak);
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
  TaskMemory* cur = nullptr;
  std::tuple<int, std::int32_t, std::int32_t> key{-1, -1, -1};
  for (const Instruction& in : p.code[d]) {
    if (in.kind != InstrKind::kFree) {
      const bool task = in.task == TaskKind::kForward || in.task == TaskKind::kBackward;
      const auto k = std::make_tuple(static_cast<int>(in.task), in.stage, in.microbatch);
      if (!task || k != key) {
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
    const std::int64_t bytes = in.buffer >= 0 ? p.buffers[static_cast<std::size_t>(in.buffer)].bytes : 0;
    if (in.kind == InstrKind::kAllocate) level += bytes;
    if (in.kind == InstrKind::kFree) level -= bytes;
    if (cur != nullptr) cur->peak = std::max(cur->peak, level);
  }
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
  // 18 layers (stem, 16 bottleneck blocks, head) over two 1-GPU stages and over one 1x2
  // data-parallel stage; the executor trains Wide-ResNet with SGD + momentum, so the search
  // input says "sgd" too.
  using testing::make_plan;
  using schema::Schedule;
  const ir::ModelConfig wrn = ::alpasim::testing::tiny_wide_resnet();
  std::vector<std::pair<std::string, schema::Plan>> plans;
  plans.push_back({"2 stages, 1F1B, 4 mb", make_plan(wrn, {{0, 9, 1, 1, {0}}, {9, 18, 1, 1, {1}}}, Schedule::kOneFOneB, 4, 8)});
  plans.push_back({"2 stages, GPipe, 2 mb", make_plan(wrn, {{0, 5, 1, 1, {0}}, {5, 18, 1, 1, {1}}}, Schedule::kGpipe, 2, 8)});
  plans.push_back({"1x2 data parallel, 2 mb", make_plan(wrn, {{0, 18, 1, 2, {0, 1}}}, Schedule::kOneFOneB, 2, 8)});
  std::string table = "| tiny Wide-ResNet plan | device | executor peak | simulator peak |\n|---|---|---|---|\n";
  for (const auto& [name, plan] : plans) {
    CAPTURE(name);
    planner::SearchInput in = p3_input(wrn, plan.global_batch_size, 1, 4);
    in.optimizer = "sgd";
    auto r = planner::evaluate_plan(in, plan);
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    auto prog = lower_plan(plan);
    REQUIRE_MESSAGE(prog.ok(), prog.status().message());
    auto v = verify_program(*prog);
    REQUIRE_MESSAGE(v.ok(), v.status().message());
    for (std::size_t d = 0; d < prog->code.size(); ++d) {
      CAPTURE(d);
      const std::size_t mesh = plan.stages.size() == 1 ? 0 : d;
      CHECK(v->peak_bytes[d] == r->prediction.peak_memory_bytes_per_stage[mesh]);
      table += "| " + name + " | " + std::to_string(d) + " | " + std::to_string(v->peak_bytes[d]) + " | " +
               std::to_string(r->prediction.peak_memory_bytes_per_stage[mesh]) + " |\n";
    }
  }
  MESSAGE("\n" << table);
}

}  // namespace
}  // namespace alpasim::exec

#include "planner/search/stage_memory.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "ir/autodiff.h"
#include "schema/block_layout.h"

namespace alpasim::planner {

using ir::OpId;
using ir::OpKind;

namespace {

/// Per-microbatch tensors of other stages that `stage`'s backward reads and its forward
/// does not (the executor receives them at the start of the backward).
std::set<OpId> received_by_backward(const ir::Graph& g, const std::vector<int>& stage_of,
                                    const std::vector<char>& per_iter, int stage) {
  std::set<OpId> fwd, bwd;
  for (const ir::Op& o : g.ops()) {
    if (stage_of[static_cast<std::size_t>(o.id)] != stage || o.kind == OpKind::kParameter ||
        o.kind == OpKind::kOptimizer) {
      continue;
    }
    for (OpId x : o.inputs) {
      const auto xi = static_cast<std::size_t>(x);
      if (per_iter[xi] || stage_of[xi] == stage) continue;
      if (o.phase == ir::Phase::kForward) {
        fwd.insert(x);
      } else if (!fwd.count(x)) {
        bwd.insert(x);
      }
    }
  }
  return bwd;
}

}  // namespace

core::Result<StageMemory> stage_memory(const StageMemoryInput& in) {
  ALPASIM_CHECK(in.graph != nullptr) << "stage_memory without a graph";
  const ir::Graph& g = *in.graph;
  const std::size_t n = g.size();
  const auto num_stages = static_cast<int>(in.stage_starts.size()) - 1;
  const std::int64_t layers = g.num_layers();
  if (num_stages < 1 || in.stage_starts.front() != 0 || in.stage_starts.back() != layers ||
      in.stage < 0 || in.stage >= num_stages || in.meshes < 1 || num_stages % in.meshes != 0) {
    return core::invalid_argument("stage_memory: the stage ranges do not cover the graph's " +
                                  std::to_string(layers) + " layers");
  }
  std::vector<int> stage_of_layer(static_cast<std::size_t>(layers), 0);
  for (int s = 0; s < num_stages; ++s) {
    const auto b = in.stage_starts[static_cast<std::size_t>(s)];
    const auto e = in.stage_starts[static_cast<std::size_t>(s) + 1];
    if (e < b) return core::invalid_argument("stage_memory: stage " + std::to_string(s) + " ends before it starts");
    for (auto l = b; l < e; ++l) stage_of_layer[static_cast<std::size_t>(l)] = s;
  }
  const int s = in.stage;
  const int p = in.meshes;
  // As exec/lower.cc classifies ops: the stage of each op (by its layer), per-iteration
  // tensors (weights, optimizer outputs, the accumulated gradients the optimizer reads).
  std::vector<int> stage_of(n, 0);
  std::vector<char> per_iter(n, 0), final_grad(n, 0);
  for (const ir::Op& o : g.ops()) {
    const auto i = static_cast<std::size_t>(o.id);
    stage_of[i] = stage_of_layer[static_cast<std::size_t>(o.layer)];
    if (o.kind == OpKind::kParameter) per_iter[i] = 1;
    if (o.kind == OpKind::kOptimizer) {
      per_iter[i] = 1;
      per_iter[static_cast<std::size_t>(o.inputs[1])] = 1;
      final_grad[static_cast<std::size_t>(o.inputs[1])] = 1;
    }
  }
  auto mesh_of = [&](OpId t) { return stage_of[static_cast<std::size_t>(t)] % p; };
  StageMemory m;
  // Per-iteration memory. A weight of another mesh read by this stage is received once per
  // device: counted on the first stage of this mesh that reads it.
  std::vector<int> first_reader(n, num_stages);
  for (const ir::Op& o : g.ops()) {
    for (OpId x : o.inputs) {
      auto& r = first_reader[static_cast<std::size_t>(x)];
      if (stage_of[static_cast<std::size_t>(o.id)] % p == s % p) r = std::min(r, stage_of[static_cast<std::size_t>(o.id)]);
    }
  }
  std::vector<OpId> fwd, bwd;  // the stage's per-microbatch ops in the executor's order
  for (const ir::Op& o : g.ops()) {
    const auto i = static_cast<std::size_t>(o.id);
    if (o.kind == OpKind::kParameter) {
      if (stage_of[i] == s) m.parameter_bytes += o.out.bytes();
      if (mesh_of(o.id) != s % p && first_reader[i] == s) m.received_parameter_bytes += o.out.bytes();
      continue;
    }
    if (stage_of[i] != s) continue;
    if (final_grad[i]) m.gradient_bytes += o.out.bytes();
    if (o.kind == OpKind::kOptimizer) {
      // exec/lower.cc: with weight-update sharding a gradient of this stage whose weight is
      // in this stage and whose size the mesh divides is reduce-scattered; the state then
      // holds 1/d of the weight's elements.
      const OpId grad = o.inputs[1];
      const std::int64_t elems = g.op(grad).out.num_elements();
      const bool shard = in.weight_update_sharding && in.mesh_size > 1 && stage_of[static_cast<std::size_t>(grad)] == s &&
                         stage_of[static_cast<std::size_t>(o.inputs[0])] == s && elems % in.mesh_size == 0;
      const auto kind = o.function == "adam" ? ir::OptimizerKind::kAdam : ir::OptimizerKind::kSgd;
      m.optimizer_state_bytes += (shard ? elems / in.mesh_size : elems) *
                                 ir::optimizer_state_bytes_per_parameter(kind, g.meta.dtype);
      continue;
    }
    (o.phase == ir::Phase::kForward ? fwd : bwd).push_back(o.id);
  }
  // Positions: forward ops 0..F-1, backward ops F..F+B-1. Last touch of each per-microbatch
  // tensor on this device (its writer, its readers here; a send follows its writer).
  const auto F = static_cast<std::int64_t>(fwd.size());
  std::vector<std::int64_t> last(n, -1);
  std::set<OpId> remote_fwd, remote_bwd;  // received per-microbatch inputs, by first task
  auto touch = [&](OpId t, std::int64_t pos) {
    auto& l = last[static_cast<std::size_t>(t)];
    l = std::max(l, pos);
  };
  for (std::int64_t pos = 0; pos < F + static_cast<std::int64_t>(bwd.size()); ++pos) {
    const OpId id = pos < F ? fwd[static_cast<std::size_t>(pos)] : bwd[static_cast<std::size_t>(pos - F)];
    if (!per_iter[static_cast<std::size_t>(id)]) touch(id, pos);
    for (OpId x : g.op(id).inputs) {
      const auto xi = static_cast<std::size_t>(x);
      if (per_iter[xi]) continue;
      if (stage_of[xi] != s) {
        if (mesh_of(x) == s % p) {
          return core::unimplemented("stage_memory: tensor " + g.op(x).name + " of stage " +
                                     std::to_string(stage_of[xi]) + " is read by stage " +
                                     std::to_string(s) + " on the same mesh");
        }
        if (pos < F) {
          remote_fwd.insert(x);
        } else if (!remote_fwd.count(x)) {
          remote_bwd.insert(x);
        }
      }
      touch(x, pos);
    }
  }
  for (const ir::Op& o : g.ops()) {  // a local tensor read by another chunk of this mesh
    const auto i = static_cast<std::size_t>(o.id);
    if (stage_of[i] != s || per_iter[i]) continue;
    for (OpId u : g.consumers(o.id)) {
      const int us = stage_of[static_cast<std::size_t>(u)];
      if (us != s && us % p == s % p) {
        return core::unimplemented("stage_memory: tensor " + o.name + " of stage " + std::to_string(s) +
                                   " is read by stage " + std::to_string(us) + " on the same mesh");
      }
    }
  }
  // Received ahead (exec/lower.cc, fix_channel_order): a sender's backward sends in the
  // order it produces, and a device receives each (sender, receiver) channel in that order
  // (NCCL). When the backward of a later chunk on this mesh (which runs first for the same
  // microbatch) receives from the same sender's backward a tensor produced after one this
  // stage receives, the executor receives both there: this stage's tensor is then held from
  // the start of that chunk's backward (the earliest one: the highest stage) to its last
  // reader here. GPT's tied-embedding gradient from the head stage with interleaving on two
  // meshes is one.
  auto later_receiver = [&](int st, OpId x) {
    int best = -1;
    const auto xi = static_cast<std::size_t>(x);
    if (g.op(x).phase == ir::Phase::kForward) return best;
    for (int other = st + p; other < num_stages; other += p) {
      for (OpId y : received_by_backward(g, stage_of, per_iter, other)) {
        const auto yi = static_cast<std::size_t>(y);
        if (stage_of[yi] == stage_of[xi] && y > x && g.op(y).phase != ir::Phase::kForward) best = other;
      }
    }
    return best;
  };
  std::set<OpId> carried_in;
  for (OpId x : remote_bwd) {
    if (later_receiver(s, x) >= 0) {
      carried_in.insert(x);
      m.backward_received_earlier_bytes += g.op(x).out.bytes();
    }
  }
  for (int lower = s % p; lower < s; lower += p) {
    for (OpId x : received_by_backward(g, stage_of, per_iter, lower)) {
      if (later_receiver(lower, x) == s) m.backward_received_ahead_bytes += g.op(x).out.bytes();
    }
  }
  std::vector<std::vector<OpId>> frees(fwd.size() + bwd.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (last[i] >= 0) frees[static_cast<std::size_t>(last[i])].push_back(static_cast<OpId>(i));
  }
  // A flash kernel's s x s tiles never reach device memory (the executor's buffers say 0
  // bytes for them too).
  auto bytes = [&](OpId t) { return ir::device_memory_bytes(g, g.op(t)); };
  // Forward: received inputs first, then each op's output, frees after it.
  std::int64_t level = 0;
  for (OpId x : remote_fwd) level += bytes(x);
  std::int64_t peak = level;
  std::int64_t pos = 0;
  for (OpId id : fwd) {
    level += bytes(id);
    peak = std::max(peak, level);
    for (OpId t : frees[static_cast<std::size_t>(pos)]) level -= bytes(t);
    ++pos;
  }
  m.stored_bytes = level;
  m.forward_working_bytes = peak - level;
  // Backward (with recomputation): per-iteration outputs (gradient accumulation) are held
  // all iteration and allocate nothing here.
  for (OpId x : remote_bwd) level += bytes(x);
  level += m.backward_received_ahead_bytes;
  peak = level;
  for (OpId id : bwd) {
    if (!per_iter[static_cast<std::size_t>(id)]) level += bytes(id);
    peak = std::max(peak, level);
    for (OpId t : frees[static_cast<std::size_t>(pos)]) level -= bytes(t);
    ++pos;
  }
  ALPASIM_CHECK(level == m.backward_received_ahead_bytes)
      << "stage_memory: " << level << " bytes of a microbatch outlive its backward";
  m.backward_working_bytes = peak - m.stored_bytes - m.backward_received_earlier_bytes;
  return m;
}

core::Result<ShardedPlanMemory> ShardedPlanMemory::prepare(const ShardedStageMemoryInput& in) {
  ALPASIM_CHECK(in.plan != nullptr && in.microbatch_graph != nullptr && in.one_sample_graph != nullptr &&
                in.two_sample_graph != nullptr)
      << "sharded_stage_memory without a plan or graphs";
  const schema::Plan& plan = *in.plan;
  const ir::Graph& g = *in.microbatch_graph;
  const std::size_t n = g.size();
  const auto S = static_cast<std::int32_t>(plan.stages.size());
  const std::int64_t layers = g.num_layers();
  if (S < 1 || plan.stages.back().layer_end != layers) {
    return core::invalid_argument("stage_memory: the stage ranges do not cover the graph's " +
                                  std::to_string(layers) + " layers");
  }
  ShardedPlanMemory out;
  out.plan_ = &plan;
  out.graph_ = &g;
  // As exec/lower.cc classifies ops: stage (by layer), per-iteration tensors, final gradients.
  std::vector<std::int32_t> stage_of_layer(static_cast<std::size_t>(layers), 0);
  for (std::int32_t k = 0; k < S; ++k) {
    const auto& st = plan.stages[static_cast<std::size_t>(k)];
    for (auto l = st.layer_begin; l < st.layer_end; ++l) {
      if (l < 0 || l >= layers) {
        return core::invalid_argument("stage_memory: the stage ranges do not cover the graph's " +
                                      std::to_string(layers) + " layers");
      }
      stage_of_layer[static_cast<std::size_t>(l)] = k;
    }
  }
  out.op_stage_.assign(n, 0);
  out.per_iter_.assign(n, 0);
  out.final_grad_.assign(n, 0);
  out.consumer_stages_.assign(n, {});
  for (const ir::Op& o : g.ops()) {
    const auto i = static_cast<std::size_t>(o.id);
    out.op_stage_[i] = stage_of_layer[static_cast<std::size_t>(o.layer)];
    if (o.kind == OpKind::kParameter) out.per_iter_[i] = 1;
    if (o.kind == OpKind::kOptimizer) {
      out.per_iter_[i] = 1;
      out.per_iter_[static_cast<std::size_t>(o.inputs[1])] = 1;
      out.final_grad_[static_cast<std::size_t>(o.inputs[1])] = 1;
    }
  }
  for (const ir::Op& o : g.ops()) {
    for (OpId x : o.inputs) {
      out.consumer_stages_[static_cast<std::size_t>(x)].insert(out.op_stage_[static_cast<std::size_t>(o.id)]);
    }
  }
  ALPASIM_ASSIGN_OR_RETURN(out.batch_,
                           schema::classify_batch_layouts(g, *in.one_sample_graph, *in.two_sample_graph));
  ALPASIM_ASSIGN_OR_RETURN(out.match_, schema::match_operator_shardings(plan, g, out.batch_, out.op_stage_));
  return out;
}

core::Result<std::optional<StageMemory>> sharded_stage_memory(const ShardedStageMemoryInput& in) {
  ALPASIM_ASSIGN_OR_RETURN(ShardedPlanMemory prepared, ShardedPlanMemory::prepare(in));
  return prepared.stage(in.stage);
}

core::Result<std::optional<StageMemory>> ShardedPlanMemory::stage(int stage) const {
  const schema::Plan& plan = *plan_;
  const ir::Graph& g = *graph_;
  const auto S = static_cast<std::int32_t>(plan.stages.size());
  const std::int32_t s = stage;
  if (s < 0 || s >= S) {
    return core::invalid_argument("stage_memory: the stage ranges do not cover the graph's " +
                                  std::to_string(g.num_layers()) + " layers");
  }
  const std::vector<std::int32_t>& op_stage = op_stage_;
  const std::vector<char>& per_iter = per_iter_;
  const std::vector<char>& final_grad = final_grad_;
  const std::vector<std::set<std::int32_t>>& consumer_stages = consumer_stages_;
  const schema::OperatorShardings& match = match_;
  if (!match.sharded[static_cast<std::size_t>(s)]) return std::optional<StageMemory>{};
  if (plan.schedule == schema::Schedule::kInterleavedOneFOneB && plan.interleave > 1) {
    return core::unimplemented("stage_memory: sharded stage " + std::to_string(s) + " in an interleaved schedule");
  }
  const std::set<std::int64_t> own(plan.stages[static_cast<std::size_t>(s)].device_ids.begin(),
                                   plan.stages[static_cast<std::size_t>(s)].device_ids.end());
  for (std::int32_t k = 0; k < S; ++k) {
    if (k == s) continue;
    for (std::int64_t d : plan.stages[static_cast<std::size_t>(k)].device_ids) {
      if (own.count(d)) {
        return core::unimplemented("stage_memory: sharded stage " + std::to_string(s) + " shares device " +
                                   std::to_string(d) + " with stage " + std::to_string(k));
      }
    }
  }
  // A BlockLayouts per stage, as each walk had its own: it records the layouts operators
  // were last given (a broadcast reads its source's), which one walk must not leave to the
  // next.
  schema::BlockLayouts blocks(plan, g, batch_, per_iter, op_stage, match.hint);
  using schema::BlockLayout;

  // One device's buffers and instructions for one microbatch (exec/lower.cc emits the same
  // ones for every microbatch): an instruction allocates a buffer or touches some.
  struct Buf {
    std::int64_t bytes = 0;
    bool per_iteration = false;  // held all iteration: not in the task walk
  };
  struct Instr {
    int alloc = -1;
    std::vector<int> touch;
  };
  std::vector<Buf> bufs;
  std::vector<BlockLayout> held;  // per buffer: its layout now
  std::vector<Instr> code;
  using Key = std::pair<OpId, std::int32_t>;  // (tensor, microbatch 0 or -1)
  std::map<Key, int> have;
  // Copies by (instance, layout, scope): a per-iteration tensor's copy made in a task, and a
  // per-microbatch tensor's gathered in the forward for weight gradients, is that task's
  // alone (scope 1 forward, 2 backward; exec/lower.cc's materialize), freed after its last
  // reader there; other copies have scope 0.
  std::map<std::tuple<Key, std::string, int>, int> alt;
  auto key_of = [&](OpId t) { return Key{t, per_iter[static_cast<std::size_t>(t)] ? -1 : 0}; };
  int task_scope = 0;  // 0 at init, 1 in the forward, 2 in the backward
  auto new_bytes = [&](std::int64_t bytes, const BlockLayout& l, bool per_iteration) {
    const int b = static_cast<int>(bufs.size());
    bufs.push_back({bytes, per_iteration});
    held.push_back(l);
    code.push_back({b, {b}});
    return b;
  };
  auto new_buffer = [&](OpId t, const BlockLayout& l, bool per_iteration) {
    return new_bytes(ir::kept_on_chip_by_flash_attention(g, g.op(t)) ? 0 : blocks.block_bytes(t, l, s), l,
                     per_iteration);
  };
  // The gathered statistics of a vocabulary-split cross entropy, read again by its
  // gradient (exec/lower.cc, run_on_class_block).
  std::map<Key, int> loss_statistics;
  auto materialize = [&](const Key& key, const BlockLayout& want) {
    const int b = have.at(key);
    BlockLayout x = held[static_cast<std::size_t>(b)];
    if (x == want) return b;
    const unsigned reduce = x.partial & ~want.partial;
    if (reduce) {  // all-reduce in place
      code.push_back({-1, {b}});
      x.partial &= ~reduce;
      held[static_cast<std::size_t>(b)] = x;
      if (x == want) return b;
    }
    // Scoped to the task as exec/lower.cc's materialize: a per-iteration tensor's copy to the
    // forward or backward making it, a per-microbatch tensor's to the forward making it when
    // BlockLayouts::copy_scoped_to_forward says so.
    int scope = key.second < 0 ? task_scope : 0;
    if (key.second >= 0 && task_scope == 1 && blocks.copy_scoped_to_forward(key.first, x, want, s)) scope = 1;
    const auto ak = std::make_tuple(key, schema::block_layout_key(want), scope);
    if (auto it = alt.find(ak); it != alt.end()) return it->second;
    const int nb = new_buffer(key.first, want, key.second < 0 && task_scope == 0);
    code.push_back({-1, {nb, b}});  // the resharding copy
    alt[ak] = nb;
    return nb;
  };
  auto remote_consumer = [&](OpId t) {
    for (std::int32_t to : consumer_stages[static_cast<std::size_t>(t)]) {
      if (to != s) return true;
    }
    return false;
  };
  StageMemory m;
  // Init: this stage's weights as their first reader reads them, then the copies sent.
  std::vector<OpId> fwd, bwd, opt;
  for (const ir::Op& o : g.ops()) {
    if (op_stage[static_cast<std::size_t>(o.id)] != s) continue;
    if (o.kind == OpKind::kParameter) {
      const BlockLayout l = blocks.layouts_of(o, s, [](OpId) { return BlockLayout{}; }).out;
      have[key_of(o.id)] = new_buffer(o.id, l, true);
      m.parameter_bytes += bufs.back().bytes;
    } else if (o.kind == OpKind::kOptimizer) {
      opt.push_back(o.id);
    } else {
      (o.phase == ir::Phase::kForward ? fwd : bwd).push_back(o.id);
    }
  }
  for (const ir::Op& o : g.ops()) {
    const bool sent = o.kind == OpKind::kParameter && op_stage[static_cast<std::size_t>(o.id)] == s && remote_consumer(o.id);
    if (!sent) continue;
    code.push_back({-1, {materialize(key_of(o.id), blocks.def_layout(o.id, s))}});
  }
  const std::size_t init_end = code.size();
  auto current = [&](OpId t) { return held[static_cast<std::size_t>(have.at(key_of(t)))]; };
  auto run_task = [&](const std::vector<OpId>& ops) {
    // Remote inputs arrive at the task's start in the data-parallel layout.
    for (OpId id : ops) {
      for (OpId x : g.op(id).inputs) {
        const Key key = key_of(x);
        if (have.count(key) || op_stage[static_cast<std::size_t>(x)] == s) continue;
        have[key] = new_buffer(x, blocks.def_layout(x, s), key.second < 0);
        if (key.second < 0) m.received_parameter_bytes += bufs.back().bytes;
      }
    }
    for (OpId id : ops) {
      const ir::Op& o = g.op(id);
      const schema::OpLayouts lay = blocks.layouts_of(o, s, current);
      Instr run;
      for (std::size_t i = 0; i < o.inputs.size(); ++i) {
        BlockLayout want = lay.in[i];
        if (i == 2 && o.kind == OpKind::kDot) want.partial = 0;
        run.touch.push_back(materialize(key_of(o.inputs[i]), want));
      }
      const Key key = key_of(id);
      if (lay.class_split != 0 && o.function == "softmax_cross_entropy_grad") {
        run.touch.push_back(loss_statistics.at(key_of(o.source)));
      } else if (lay.class_split != 0) {
        // This device's part of the statistics, then their all-gather; the loss is
        // combined from them alone.
        const int b = new_bytes(blocks.loss_statistics_elements(id, lay, s) * schema::kLossStatisticsElementBytes,
                                BlockLayout{}, false);
        run.touch.push_back(b);
        code.push_back(run);
        code.push_back({-1, {b}});
        loss_statistics[key] = b;
        run.touch = {b};
      }
      if (blocks.gradient_over_logits(o, lay)) have.emplace(key, run.touch[1]);  // as exec/lower.cc
      auto it = have.find(key);
      if (it == have.end()) {
        it = have.emplace(key, new_buffer(id, lay.out, key.second < 0)).first;
        if (final_grad[static_cast<std::size_t>(id)]) m.gradient_bytes += bufs.back().bytes;
      }
      run.touch.push_back(it->second);
      code.push_back(run);
      if (!per_iter[static_cast<std::size_t>(id)] && remote_consumer(id)) {
        code.push_back({-1, {materialize(key, blocks.def_layout(id, s))}});  // the sends
      }
    }
  };
  task_scope = 1;
  run_task(fwd);
  const std::size_t fwd_end = code.size();
  task_scope = 2;
  run_task(bwd);
  // An operator whose spec splits a weight but which the executor runs data parallel (a
  // convolution split over channels) makes the executor's memory that of another plan than
  // the one written: the weight gathered whole for every task and its gradient accumulated
  // whole, up to 5x the plan's own on Wide-ResNet 13B. The caller keeps the intra-op
  // solution's sums for that stage. (Operators without weights that fall back, such as a
  // mean over a split axis, only change activation layouts: the walk stays exact.)
  for (OpId id : blocks.data_parallel_fallbacks()) {
    const auto i = static_cast<std::size_t>(id);
    if (op_stage[i] != s || !match.op_sharded[i]) continue;
    for (OpId x : g.op(id).inputs) {
      // A weight of another stage arrives in the data-parallel layout whatever its spec.
      if (g.op(x).kind != OpKind::kParameter || op_stage[static_cast<std::size_t>(x)] != s) continue;
      if (blocks.param_layout(x, s) == blocks.def_layout(x, s)) continue;
      return core::unimplemented("stage_memory: sharded stage " + std::to_string(s) + ": the executor runs \"" +
                                 g.op(id).name + "\" data parallel, not with \"" + g.op(x).name +
                                 "\" split as the plan's spec for it says");
    }
  }
  // Optimizer: gradients summed, then in their weight's layout (a copy, held all
  // iteration, when the producer wrote another); states for the weight's block (1/k of it
  // with weight-update sharding, k the devices holding the same block).
  const auto& st = plan.stages[static_cast<std::size_t>(s)];
  for (const ir::Op& o : g.ops()) {
    if (!final_grad[static_cast<std::size_t>(o.id)] || op_stage[static_cast<std::size_t>(o.id)] != s) continue;
    const auto it = have.find(key_of(o.id));
    if (it == have.end()) continue;
    BlockLayout x = held[static_cast<std::size_t>(it->second)];
    x.partial = 0;
    held[static_cast<std::size_t>(it->second)] = x;
    OpId param = ir::kNoOp;
    for (OpId u : opt) {
      if (g.op(u).inputs[1] == o.id) param = g.op(u).inputs[0];
    }
    if (param == ir::kNoOp) continue;
    const bool local_opt = op_stage[static_cast<std::size_t>(param)] == s;
    const BlockLayout want = local_opt ? blocks.param_layout(param, s) : blocks.def_layout(param, s);
    if (!(x == want)) m.gradient_bytes += blocks.block_bytes(o.id, want, s);
  }
  for (OpId u : opt) {
    const ir::Op& o = g.op(u);
    const auto pit = have.find(key_of(o.inputs[0]));
    if (pit == have.end()) continue;  // exec/lower.cc receives it in the optimizer task
    const BlockLayout& p = held[static_cast<std::size_t>(pit->second)];
    std::vector<std::int64_t> off, local_shape;
    blocks.block_of(o.inputs[0], p, s, {0, 0}, off, local_shape);
    std::int64_t local = 1;
    for (std::int64_t v : local_shape) local *= v;
    unsigned used = 0;
    for (const auto& a : p.axes) {
      for (int ax : a) used |= 1u << ax;
    }
    const unsigned replicated = blocks.live_axes(s) & ~used;
    std::int64_t k = 1;
    for (int ax = 0; ax < 2; ++ax) {
      if (replicated & (1u << ax)) k *= blocks.mesh_axis_size(s, ax);
    }
    if (st.weight_update_sharding && k > 1 && local % k == 0) local /= k;
    const auto kind = o.function == "adam" ? ir::OptimizerKind::kAdam : ir::OptimizerKind::kSgd;
    m.optimizer_state_bytes += local * ir::optimizer_state_bytes_per_parameter(kind, g.meta.dtype);
  }
  std::vector<std::size_t> last(bufs.size(), 0);
  for (std::size_t i = 0; i < code.size(); ++i) {
    for (int b : code[i].touch) last[static_cast<std::size_t>(b)] = i;
  }
  // A copy made at init (a weight in the layout it is sent in) serves only the send: the
  // tasks make their own (scope 1 or 2), so none is read after init.
  for (const auto& [k, b] : alt) {
    const auto bi = static_cast<std::size_t>(b);
    ALPASIM_CHECK(!bufs[bi].per_iteration || last[bi] < init_end) << "an init copy read by a task";
  }
  // The task walk: levels after each ALLOCATE, frees after each buffer's last instruction.
  std::vector<std::vector<int>> frees(code.size());
  for (std::size_t b = 0; b < bufs.size(); ++b) {
    if (!bufs[b].per_iteration) frees[last[b]].push_back(static_cast<int>(b));
  }
  std::int64_t level = 0, fpeak = 0, bpeak = 0;
  for (std::size_t i = init_end; i < code.size(); ++i) {
    if (i == fwd_end) {
      m.stored_bytes = level;
      m.forward_working_bytes = fpeak - level;
      bpeak = level;
    }
    const int a = code[i].alloc;
    if (a >= 0 && !bufs[static_cast<std::size_t>(a)].per_iteration) level += bufs[static_cast<std::size_t>(a)].bytes;
    (i < fwd_end ? fpeak : bpeak) = std::max(i < fwd_end ? fpeak : bpeak, level);
    for (int b : frees[i]) level -= bufs[static_cast<std::size_t>(b)].bytes;
  }
  if (fwd_end == code.size()) {
    m.stored_bytes = level;
    m.forward_working_bytes = fpeak - level;
    bpeak = level;
  }
  ALPASIM_CHECK(level == 0) << "sharded_stage_memory: " << level << " bytes of a microbatch outlive its backward";
  m.backward_working_bytes = bpeak - m.stored_bytes;
  return std::optional<StageMemory>(m);
}

}  // namespace alpasim::planner

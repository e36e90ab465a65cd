#include "planner/search/stage_memory.h"

#include <algorithm>
#include <set>
#include <string>

#include "ir/autodiff.h"

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
  auto bytes = [&](OpId t) { return g.op(t).out.bytes(); };
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

}  // namespace alpasim::planner

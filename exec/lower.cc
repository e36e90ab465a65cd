#include "exec/lower.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "exec/cpu/cpu_kernels.h"
#include "ir/builders.h"
#include "schema/block_layout.h"

namespace alpasim::exec {
namespace {

using ir::OpId;
using ir::OpKind;

/// An instruction with the fields every instruction of the lowering sets (microbatch -1:
/// once per iteration); callers add their kind's own fields.
Instruction make_instruction(InstrKind kind, TaskKind task, OpId op, std::int32_t stage,
                             std::int32_t microbatch = -1, BufferId buffer = kNoBuffer) {
  Instruction in;
  in.kind = kind;
  in.task = task;
  in.op = op;
  in.stage = stage;
  in.microbatch = microbatch;
  in.buffer = buffer;
  return in;
}

/// How a tensor is laid out over a stage's data-parallel mesh (schema/block_layout.h).
using Layout = schema::BatchLayout;

enum class TaskType { kForward, kBackward, kOptimizer };

struct Task {
  TaskType type = TaskType::kForward;
  std::int32_t stage = 0;
  std::int32_t microbatch = -1;
};

/// One piece of a cross-mesh transfer: elements [src_off, src_off+count) of the source
/// device's buffer land at dst_off of the destination device's buffer.
struct Piece {
  std::int32_t src = 0;
  std::int32_t dst = 0;
  std::int64_t src_off = 0;
  std::int64_t dst_off = 0;
  std::int64_t count = 0;
};

struct Transfer {
  std::vector<Piece> pieces;
  bool gather = false;  ///< the receiving mesh all-gathers the 1/k slices afterwards
};

using InstanceKey = std::pair<OpId, std::int32_t>;  // (tensor, microbatch or -1)

class Lowerer {
 public:
  Lowerer(const schema::Plan& plan, const LowerOptions& options) : plan_(plan), opt_(options) {}

  core::Result<Program> run() {
    ALPASIM_RETURN_IF_ERROR(check_plan());
    ALPASIM_RETURN_IF_ERROR(build_graphs());
    ALPASIM_RETURN_IF_ERROR(classify());
    ALPASIM_RETURN_IF_ERROR(check_shardings());
    ALPASIM_RETURN_IF_ERROR(build_schedules());
    prog_.code.resize(prog_.devices.size());
    have_.resize(prog_.devices.size());
    alt_.resize(prog_.devices.size());
    loss_statistics_.resize(prog_.devices.size());
    for (std::size_t d = 0; d < prog_.devices.size(); ++d) {
      ALPASIM_RETURN_IF_ERROR(lower_device(static_cast<std::int32_t>(d)));
    }
    fix_channel_order();
    insert_frees();
    hoist_persistent();
    return std::move(prog_);
  }

 private:
  // ---- plan checks and graphs ----
  core::Status check_plan() {
    S_ = static_cast<std::int32_t>(plan_.stages.size());
    if (S_ == 0) return core::invalid_argument("plan: /stages: expected at least one stage, got 0");
    M_ = plan_.num_microbatches;
    if (M_ <= 0 || plan_.global_batch_size <= 0 || plan_.global_batch_size % M_ != 0) {
      return core::invalid_argument(
          "plan: /num_microbatches: expected a divisor of global_batch_size " +
          std::to_string(plan_.global_batch_size) + ", got " + std::to_string(M_));
    }
    V_ = plan_.schedule == schema::Schedule::kInterleavedOneFOneB
             ? static_cast<std::int32_t>(std::max<std::int64_t>(1, plan_.interleave))
             : 1;
    if (S_ % V_ != 0) {
      return core::invalid_argument("plan: /interleave: expected a divisor of the " +
                                    std::to_string(S_) + " stages, got " + std::to_string(V_));
    }
    P_ = S_ / V_;
    const std::int64_t mb_samples = plan_.global_batch_size / M_;
    std::set<std::int64_t> ids;
    for (const auto& st : plan_.stages) ids.insert(st.device_ids.begin(), st.device_ids.end());
    prog_.devices.assign(ids.begin(), ids.end());
    for (std::int32_t s = 0; s < S_; ++s) {
      const auto& st = plan_.stages[static_cast<std::size_t>(s)];
      const std::string where = "plan: /stages/" + std::to_string(s);
      const auto d = static_cast<std::int64_t>(st.device_ids.size());
      if (d <= 0 || mb_samples % d != 0) {
        return core::invalid_argument(where + "/device_ids: expected a mesh size dividing the " +
                                      std::to_string(mb_samples) +
                                      " samples of a microbatch, got " + std::to_string(d));
      }
      local_batch_.push_back(mb_samples / d);
      std::vector<std::int32_t> devs;
      for (std::int64_t id : st.device_ids) {
        devs.push_back(static_cast<std::int32_t>(
            std::lower_bound(prog_.devices.begin(), prog_.devices.end(), id) -
            prog_.devices.begin()));
      }
      prog_.stage_devices.push_back(std::move(devs));
    }
    prog_.num_microbatches = M_;
    prog_.global_batch_size = plan_.global_batch_size;
    return core::ok_status();
  }

  core::Result<ir::Graph> training_graph(std::int64_t samples) {
    core::Result<ir::Graph> fwd =
        opt_.build_forward ? opt_.build_forward(samples)
                           : ir::build_forward_graph(plan_.model, {samples, plan_.dtype});
    if (!fwd.ok()) return fwd.status();
    if (fwd->meta.loss == ir::kNoOp) {
      return core::invalid_argument("model " + fwd->meta.model_name +
                                    ": the graph has no loss, nothing to train");
    }
    ir::TrainingOptions t;
    t.optimizer = executor_optimizer(*fwd);
    t.recompute = plan_.recompute == schema::Recompute::kFull ? ir::RecomputePolicy::kFull
                  : plan_.recompute == schema::Recompute::kSelective
                      ? ir::RecomputePolicy::kSelective
                      : ir::RecomputePolicy::kNone;
    return ir::derive_training_graph(*fwd, t);
  }

  core::Status build_graphs() {
    std::map<std::int64_t, std::int32_t> by_batch;
    for (std::int32_t s = 0; s < S_; ++s) {
      const std::int64_t b = local_batch_[static_cast<std::size_t>(s)];
      auto it = by_batch.find(b);
      if (it == by_batch.end()) {
        ALPASIM_ASSIGN_OR_RETURN(ir::Graph g, training_graph(b));
        it = by_batch.emplace(b, static_cast<std::int32_t>(prog_.graphs.size())).first;
        prog_.graphs.push_back(std::move(g));
      }
      prog_.stage_graph.push_back(it->second);
    }
    const ir::Graph& g0 = prog_.graphs[0];
    for (const auto& g : prog_.graphs) {
      ALPASIM_CHECK(g.size() == g0.size()) << "graphs of different batch sizes differ in ops";
    }
    prog_.optimizer = g0.meta.optimizer;
    const std::int64_t layers = g0.num_layers();
    if (plan_.stages.back().layer_end != layers) {
      return core::invalid_argument(
          "plan: /stages/" + std::to_string(S_ - 1) + "/layers: expected the stages to cover the " +
          std::to_string(layers) + " layers of the model graph, got " +
          std::to_string(plan_.stages.back().layer_end) +
          " (plans over clustered layers are not executable)");
    }
    stage_of_layer_.assign(static_cast<std::size_t>(layers), 0);
    for (std::int32_t s = 0; s < S_; ++s) {
      const auto& st = plan_.stages[static_cast<std::size_t>(s)];
      for (std::int64_t l = st.layer_begin; l < st.layer_end; ++l) {
        stage_of_layer_[static_cast<std::size_t>(l)] = s;
      }
    }
    return core::ok_status();
  }

  // ---- tensor classification ----
  core::Status classify() {
    // The batch axis of every tensor: the axis that doubles when the per-device batch does.
    ALPASIM_ASSIGN_OR_RETURN(ir::Graph one, training_graph(1));
    ALPASIM_ASSIGN_OR_RETURN(ir::Graph two, training_graph(2));
    const ir::Graph& g = prog_.graphs[0];
    const std::size_t n = g.size();
    // Tensors whose batch is not axis 0 (MoE's token groups and expert buffers): fine where
    // nothing splits them (checked below, once the stages are known).
    std::vector<OpId> inner_batch;
    ALPASIM_ASSIGN_OR_RETURN(layout_, schema::classify_batch_layouts(g, one, two, &inner_batch));
    // Stages, per-iteration ops, final gradients.
    op_stage_.assign(n, 0);
    per_iter_.assign(n, 0);
    final_grad_.assign(n, 0);
    prog_.gradient_of.assign(n, ir::kNoOp);
    consumer_stages_.assign(n, {});
    fwd_ops_.assign(static_cast<std::size_t>(S_), {});
    bwd_ops_.assign(static_cast<std::size_t>(S_), {});
    opt_ops_.assign(static_cast<std::size_t>(S_), {});
    param_ops_.assign(static_cast<std::size_t>(S_), {});
    for (const ir::Op& o : g.ops()) {
      if (o.kind == OpKind::kOptimizer) {
        prog_.gradient_of[static_cast<std::size_t>(o.inputs[1])] = o.inputs[0];
        per_iter_[static_cast<std::size_t>(o.id)] = 1;
        final_grad_[static_cast<std::size_t>(o.inputs[1])] = 1;
        per_iter_[static_cast<std::size_t>(o.inputs[1])] = 1;
      }
      if (o.kind == OpKind::kParameter) per_iter_[static_cast<std::size_t>(o.id)] = 1;
    }
    prog_.index_range = cpu::index_ranges(g);
    for (const ir::Op& o : g.ops()) {
      const auto i = static_cast<std::size_t>(o.id);
      if (o.layer < 0 || static_cast<std::size_t>(o.layer) >= stage_of_layer_.size()) {
        return core::internal_error("op " + o.name + ": layer outside the graph's layers");
      }
      const std::int32_t s = stage_of_layer_[static_cast<std::size_t>(o.layer)];
      op_stage_[i] = s;
      const auto si = static_cast<std::size_t>(s);
      if (o.kind == OpKind::kParameter) {
        param_ops_[si].push_back(o.id);
      } else if (o.kind == OpKind::kOptimizer) {
        opt_ops_[si].push_back(o.id);
      } else if (o.phase == ir::Phase::kForward) {
        fwd_ops_[si].push_back(o.id);
      } else {
        bwd_ops_[si].push_back(o.id);
      }
    }
    for (const ir::Op& o : g.ops()) {
      for (OpId in : o.inputs) {
        consumer_stages_[static_cast<std::size_t>(in)].insert(op_stage_[static_cast<std::size_t>(o.id)]);
      }
    }
    for (OpId t : inner_batch) {
      const auto i = static_cast<std::size_t>(t);
      const std::int32_t s = op_stage_[i];
      const std::string head = "op " + g.op(t).name +
                               ": the batch is not the leading axis of its output; the executor splits "
                               "batches along axis 0 only, so it runs only on a one-device stage that keeps it (";
      if (mesh_size(s) != 1) {
        return core::unimplemented(head + "stage " + std::to_string(s) + " has " + std::to_string(mesh_size(s)) +
                                   " devices)");
      }
      for (std::int32_t k : consumer_stages_[i]) {
        if (k != s) {
          return core::unimplemented(head + "stage " + std::to_string(k) + " reads it from stage " +
                                     std::to_string(s) + ")");
        }
      }
    }
    // Partial sums can only move 1:1 between meshes of equal size.
    for (const ir::Op& o : g.ops()) {
      const auto i = static_cast<std::size_t>(o.id);
      if (per_iter_[i] || layout_[i] != Layout::kPartial) continue;
      for (std::int32_t k : consumer_stages_[i]) {
        if (mesh_size(k) != mesh_size(op_stage_[i])) {
          return core::unimplemented("op " + o.name + ": a partial sum crosses from stage " +
                                     std::to_string(op_stage_[i]) + " to stage " +
                                     std::to_string(k) + " whose mesh has another size");
        }
      }
    }
    return core::ok_status();
  }

  /// Per-operator shardings that are data parallel (a tensor with a batch axis splits axis
  /// 0 over every mesh axis longer than 1 and nothing else over them; any other tensor is
  /// replicated over those axes) keep the data-parallel lowering. A stage with any other
  /// sharding is lowered operator by operator from its specs (sharded_, emit_run_sharded),
  /// unless ignore_operator_shardings replaces them by data parallelism.
  core::Status check_shardings() {
    sharded_.assign(static_cast<std::size_t>(S_), 0);
    const ir::Graph& g = prog_.graphs[0];
    hint_.assign(g.size(), nullptr);
    k_loss_ = mesh_size(loss_stage());
    if (opt_.ignore_operator_shardings) return core::ok_status();
    ALPASIM_ASSIGN_OR_RETURN(schema::OperatorShardings match,
                             schema::match_operator_shardings(plan_, g, layout_, op_stage_));
    hint_ = std::move(match.hint);
    sharded_ = std::move(match.sharded);
    bool any = false;
    for (char c : sharded_) any = any || c;
    if (!any) return core::ok_status();
    // Global (per-microbatch) shapes for the sharded stages' blocks.
    ALPASIM_ASSIGN_OR_RETURN(ir::Graph full, training_graph(plan_.global_batch_size / M_));
    full_graph_ = static_cast<std::int32_t>(prog_.graphs.size());
    prog_.graphs.push_back(std::move(full));
    // prog_.graphs grows no more (blocks_ keeps a reference to the full graph).
    blocks_.emplace(plan_, prog_.graphs[static_cast<std::size_t>(full_graph_)], layout_, per_iter_, op_stage_, hint_);
    if (sharded_[static_cast<std::size_t>(loss_stage())]) {
      // The loss is a mean: each device's backward seed is the mean over its block of the
      // loss's input, so the summed gradients are k_loss times those of the batch mean.
      const std::int32_t ls = loss_stage();
      const TLayout in = loss_input_layout(ls);
      k_loss_ = 1;
      for (const auto& axes : in.axes) {
        for (int m : axes) k_loss_ *= msize(ls, m);
      }
    }
    return core::ok_status();
  }

  // ---- per-operator shardings ----
  // The layout rules (schema/block_layout.h, shared with planner::stage_memory).
  using TLayout = schema::BlockLayout;
  using OpLayouts = schema::OpLayouts;

  static std::string layout_key(const TLayout& l) { return schema::block_layout_key(l); }
  std::int64_t msize(std::int32_t stage, int m) const { return blocks_->mesh_axis_size(stage, m); }
  unsigned live_axes(std::int32_t stage) const { return blocks_->live_axes(stage); }
  const ir::Op& full_op(OpId t) const { return prog_.graphs[static_cast<std::size_t>(full_graph_)].op(t); }
  TLayout def_layout(OpId t, std::int32_t stage) const { return blocks_->def_layout(t, stage); }
  TLayout loss_input_layout(std::int32_t stage) const { return blocks_->loss_input_layout(stage); }
  TLayout param_layout(OpId p, std::int32_t stage) { return blocks_->param_layout(p, stage); }

  std::array<std::int64_t, 2> coords(std::int32_t dev, std::int32_t stage) const {
    const std::int64_t r = rank_in(dev, stage);
    return {r / msize(stage, 1), r % msize(stage, 1)};
  }

  /// Offsets and local shape of `dev`'s block of tensor `t` in layout `l`.
  void block_of(OpId t, const TLayout& l, std::int32_t stage, std::int32_t dev,
                std::vector<std::int64_t>& off, std::vector<std::int64_t>& local) const {
    blocks_->block_of(t, l, stage, coords(dev, stage), off, local);
  }

  /// The devices of `stage` that differ from `dev` only along the mesh axes in `mask`.
  std::vector<std::int32_t> group_of(std::int32_t stage, std::int32_t dev, unsigned mask) const {
    std::vector<std::int32_t> g;
    const auto c = coords(dev, stage);
    for (std::int32_t d : prog_.stage_devices[static_cast<std::size_t>(stage)]) {
      const auto e = coords(d, stage);
      bool same = true;
      for (int m = 0; m < 2; ++m) {
        if (!(mask & (1u << m)) && e[static_cast<std::size_t>(m)] != c[static_cast<std::size_t>(m)]) same = false;
      }
      if (same) g.push_back(d);
    }
    return g;
  }

  /// The id of the collective named `what` over `group` (its devices appended to the name):
  /// equal on every member, which builds the same name.
  std::int64_t named_collective(std::string what, const std::vector<std::int32_t>& group) {
    for (std::int32_t d : group) what += std::to_string(d) + ",";
    auto it = named_colls_.find(what);
    if (it == named_colls_.end()) {
      it = named_colls_.emplace(what, static_cast<std::int64_t>(colls_.size() + named_colls_.size()) + (std::int64_t{1} << 40)).first;
    }
    return it->second;
  }

  void set_block(BufferId b, OpId t, const TLayout& l, std::int32_t stage) {
    Buffer& buf = prog_.buffers[static_cast<std::size_t>(b)];
    std::vector<std::int64_t> off, local;
    block_of(t, l, stage, buf.device, off, local);
    const ir::Op& f = full_op(t);
    const std::int64_t ge = f.out.num_elements();
    buf.global_shape = f.out.shape;
    buf.block_offset = off;
    buf.shape = local;
    buf.elements = 1;
    for (std::int64_t x : local) buf.elements *= x;
    const bool on_chip = ir::kept_on_chip_by_flash_attention(prog_.graphs[static_cast<std::size_t>(full_graph_)], f);
    buf.element_bytes = ge > 0 ? f.out.bytes() / ge : 0;
    buf.bytes = on_chip ? 0 : buf.element_bytes * buf.elements;
    buf.partial = l.partial != 0;
    blayout_[b] = l;
  }

  BufferId new_sharded_buffer(std::int32_t dev, OpId t, std::int32_t stage, std::int32_t mb, BufferRole role,
                              TaskKind task, const TLayout& l) {
    const BufferId b = new_buffer(dev, t, stage, mb, role, task);
    set_block(b, t, l, stage);
    return b;
  }

  void emit_all_reduce(std::int32_t dev, BufferId b, OpId t, std::int32_t stage, std::int32_t mb, TaskKind task,
                       unsigned mask, double scale, const std::string& why) {
    Instruction in = make_instruction(InstrKind::kAllReduce, task, t, stage, mb, b);
    in.group = group_of(stage, dev, mask);
    in.collective_id = named_collective(
        why + "|" + std::to_string(t) + "|" + std::to_string(mb) + "|" + std::to_string(stage) + "|", in.group);
    in.scale = scale;
    out_->push_back(in);
  }

  /// The instance `key` in layout `want` on `dev`: the buffer itself, or a copy made by an
  /// all-reduce over its partial axes and a resharding copy (all-gather, all-to-all or a
  /// local slice). Copies are kept for later consumers (alt_), for the rest of the task that
  /// makes them when it is a forward or backward (microbatch `mb`): freed after their last
  /// reader there, made again by a later task that needs them. For a per-iteration tensor
  /// (a weight read in another layout) that is what a runtime that shards weights does
  /// (ZeRO-3, Alpa's sums); for a per-microbatch one that a forward gathers and the backward
  /// reads only in weight gradients (schema::BlockLayouts::copy_scoped_to_forward), what
  /// Megatron does with a sequence-parallel activation: the forward gathers it for the
  /// column-parallel GEMM and keeps only the shard, the backward gathers it again for the
  /// weight gradient (since 2026-11-28; before, the gathered copy was held from the forward
  /// to the backward). Any other copy of a per-microbatch tensor (a slice, an all-to-all,
  /// one made in a backward) lasts for every later task of its microbatch.
  BufferId materialize(std::int32_t dev, const InstanceKey& key, const TLayout& want, std::int32_t stage,
                       TaskKind task, std::int32_t mb) {
    auto& have = have_[static_cast<std::size_t>(dev)];
    const BufferId b = have.at(key);
    TLayout x = blayout_.at(b);
    if (x == want) return b;
    const unsigned reduce = x.partial & ~want.partial;
    if (reduce) {  // sum over the axes `want` does not keep partial (in place: every reader wants it summed)
      emit_all_reduce(dev, b, key.first, stage, key.second, task, reduce, 1.0, "sum" + layout_key(x));
      x.partial &= ~reduce;
      blayout_[b] = x;
      prog_.buffers[static_cast<std::size_t>(b)].partial = x.partial != 0;
      if (x == want) return b;
    }
    auto& alt = alt_[static_cast<std::size_t>(dev)];
    const bool task_scoped = (key.second < 0 && (task == TaskKind::kForward || task == TaskKind::kBackward)) ||
                             (key.second >= 0 && task == TaskKind::kForward &&
                              blocks_->copy_scoped_to_forward(key.first, x, want, stage));
    ALPASIM_CHECK(!task_scoped || mb >= 0) << "a copy in a forward or backward task needs its microbatch";
    const std::int64_t scope = task_scoped ? 2 * static_cast<std::int64_t>(mb) + (task == TaskKind::kBackward) : -1;
    const std::int32_t copy_mb = task_scoped ? mb : key.second;  // the task's microbatch in the trace
    const auto ak = std::make_tuple(key, layout_key(want), scope);
    if (auto it = alt.find(ak); it != alt.end()) return it->second;
    // Becoming partial over more axes: each copy holds 1/k of the replicated value.
    const unsigned more = want.partial & ~x.partial;
    double scale = 1.0;
    for (int m = 0; m < 2; ++m) {
      if (more & (1u << m)) scale /= static_cast<double>(msize(stage, m));
    }
    // Local when every device's new block lies inside its own old block.
    bool local = true;
    for (std::int32_t d : prog_.stage_devices[static_cast<std::size_t>(stage)]) {
      std::vector<std::int64_t> o1, l1, o2, l2;
      block_of(key.first, x, stage, d, o1, l1);
      block_of(key.first, want, stage, d, o2, l2);
      for (std::size_t a = 0; a < o1.size(); ++a) {
        if (o2[a] < o1[a] || o2[a] + l2[a] > o1[a] + l1[a]) local = false;
      }
    }
    const BufferId nb = new_sharded_buffer(dev, key.first, stage, copy_mb, role_of(key.first), task, want);
    prog_.buffers[static_cast<std::size_t>(nb)].superseded = true;  // a copy: never reported
    Instruction in = make_instruction(InstrKind::kAllGather, task, key.first, stage, copy_mb, nb);
    in.inputs = {b};
    in.scale = scale;
    in.group = local ? std::vector<std::int32_t>{dev} : group_of(stage, dev, live_axes(stage) & ~x.partial);
    in.collective_id = named_collective("reshard|" + std::to_string(key.first) + "|" + std::to_string(key.second) +
                                            "|" + std::to_string(scope) + "|" + std::to_string(stage) + "|" +
                                            layout_key(x) + ">" + layout_key(want) + "|",
                                        in.group);
    out_->push_back(in);
    alt[ak] = nb;
    return nb;
  }

  TLayout current(std::int32_t dev, OpId t, std::int32_t mb) const {
    const auto& have = have_[static_cast<std::size_t>(dev)];
    auto it = have.find(key_of(t, mb));
    ALPASIM_CHECK(it != have.end()) << "input " << full_op(t).name << " missing on device " << dev;
    // Partial axes included, as the walk's: BlockLayouts clears them where a rule needs.
    return blayout_.at(it->second);
  }

  bool remote_consumer(std::int32_t dev, OpId t) const {
    const std::int32_t from = op_stage_[static_cast<std::size_t>(t)];
    for (std::int32_t to : consumer_stages_[static_cast<std::size_t>(t)]) {
      if (to != from && !on_mesh(dev, to)) return true;
    }
    return false;
  }

  /// Sends of a tensor of a sharded stage leave in the data-parallel layout.
  void send_sharded(std::int32_t dev, OpId t, std::int32_t mb, std::int32_t stage, TaskKind task) {
    if (!remote_consumer(dev, t)) return;
    const BufferId b = materialize(dev, key_of(t, mb), def_layout(t, stage), stage, task, mb);
    emit_sends(dev, t, key_of(t, mb).second, task, b);
  }

  void emit_run_sharded(std::int32_t dev, OpId id, std::int32_t stage, std::int32_t mb, TaskKind task) {
    const ir::Op& o = prog_.graph_of_stage(stage).op(id);
    const OpLayouts lay = blocks_->layouts_of(o, stage, [&](OpId t) { return current(dev, t, mb); });
    Instruction in = make_instruction(InstrKind::kRun, task, id, stage, mb);
    for (std::size_t i = 0; i < o.inputs.size(); ++i) {
      TLayout want = lay.in[i];
      if (i == 2 && o.kind == OpKind::kDot) want.partial = 0;
      in.inputs.push_back(materialize(dev, key_of(o.inputs[i], mb), want, stage, task, mb));
    }
    auto& have = have_[static_cast<std::size_t>(dev)];
    const InstanceKey key = key_of(id, mb);
    if (lay.class_split != 0) run_on_class_block(dev, o, stage, key, task, lay, in);
    // The logits' gradient over the logits block (its last reader): kernels read each
    // element before writing it.
    if (blocks_->gradient_over_logits(o, lay)) have.emplace(key, in.inputs[1]);
    auto it = have.find(key);
    if (it == have.end()) {
      it = have.emplace(key, new_sharded_buffer(dev, id, stage, key.second, role_of(id), task, lay.out)).first;
    }
    in.buffer = it->second;
    in.accumulate = final_grad_[static_cast<std::size_t>(id)] != 0;
    if (o.kind == OpKind::kInput && layout_[static_cast<std::size_t>(id)] == Layout::kBatch) {
      in.sample_offset = mb * (plan_.global_batch_size / M_) +
                         rank_in(dev, stage) * local_batch_[static_cast<std::size_t>(stage)];
    }
    if (lay.bias_partial) {
      const auto c = coords(dev, stage);
      for (int m = 0; m < 2; ++m) {
        if ((lay.bias_partial & (1u << m)) && c[static_cast<std::size_t>(m)] != 0) in.drop_bias = true;
      }
    }
    out_->push_back(in);
    if (!per_iter_[static_cast<std::size_t>(id)]) send_sharded(dev, id, mb, stage, task);
  }

  /// A cross entropy or its gradient on the device's block of classes (LossStep): the
  /// forward writes its part of the per-row statistics, all-gathers them over the devices
  /// splitting the class axis, and turns `in` into the step that combines them into the
  /// loss; the gradient reads the statistics its forward gathered (held until then).
  void run_on_class_block(std::int32_t dev, const ir::Op& o, std::int32_t stage, const InstanceKey& key,
                          TaskKind task, const OpLayouts& lay, Instruction& in) {
    auto& statistics = loss_statistics_[static_cast<std::size_t>(dev)];
    if (o.function == "softmax_cross_entropy_grad") {
      in.inputs.push_back(statistics.at(key_of(o.source, key.second)));
      in.loss_step = LossStep::kGradient;
      return;
    }
    ALPASIM_CHECK(o.function == "softmax_cross_entropy") << o.name << ": a class block of no cross entropy";
    const BufferId b = new_buffer(dev, o.id, stage, key.second, BufferRole::kActivation, task);
    Buffer& buf = prog_.buffers[static_cast<std::size_t>(b)];
    const std::vector<std::int32_t> group = group_of(stage, dev, lay.class_split);
    const auto parts = static_cast<std::int64_t>(group.size());
    buf.elements = blocks_->loss_statistics_elements(o.id, lay, stage);
    buf.shape = {parts, buf.elements / (parts * schema::kLossStatisticsPerRow), schema::kLossStatisticsPerRow};
    buf.element_bytes = schema::kLossStatisticsElementBytes;
    buf.bytes = buf.elements * buf.element_bytes;
    buf.superseded = true;  // a step's working values: never reported
    Instruction part = in;
    part.buffer = b;
    part.loss_step = LossStep::kStatistics;
    part.loss_part = static_cast<std::int32_t>(std::find(group.begin(), group.end(), dev) - group.begin());
    out_->push_back(part);
    Instruction gather = make_instruction(InstrKind::kAllGather, task, o.id, stage, key.second, b);
    gather.group = group;
    gather.collective_id = named_collective("loss_statistics|" + std::to_string(o.id) + "|" +
                                                std::to_string(key.second) + "|" + std::to_string(stage) + "|",
                                            group);
    out_->push_back(gather);
    statistics[key] = b;
    in.inputs = {b};
    in.loss_step = LossStep::kCombine;
  }

  /// The optimizer task of a sharded stage: each accumulated gradient is summed over the
  /// mesh axes it is partial on and scaled by 1/(M · k_loss), brought to its parameter's
  /// layout, and the optimizer updates the parameter's block (with weight-update sharding:
  /// 1/k of it per device, k the devices sharing the block, then an all-gather).
  void optimizer_sharded(std::int32_t dev, std::int32_t stage) {
    const ir::Graph& g = prog_.graph_of_stage(stage);
    auto& have = have_[static_cast<std::size_t>(dev)];
    const double scale = 1.0 / static_cast<double>(M_ * k_loss_);
    for (const ir::Op& o : g.ops()) {
      if (!final_grad_[static_cast<std::size_t>(o.id)] || op_stage_[static_cast<std::size_t>(o.id)] != stage) continue;
      auto it = have.find({o.id, -1});
      ALPASIM_CHECK(it != have.end()) << "gradient " << o.name << " never produced";
      const BufferId b = it->second;
      TLayout x = blayout_.at(b);
      emit_all_reduce(dev, b, o.id, stage, -1, TaskKind::kOptimizer, x.partial, scale, "grad");
      x.partial = 0;
      blayout_[b] = x;
      prog_.buffers[static_cast<std::size_t>(b)].partial = false;
      const OpId param = prog_.gradient_of[static_cast<std::size_t>(o.id)];
      const bool local_opt = op_stage_[static_cast<std::size_t>(param)] == stage;
      const TLayout want = local_opt ? param_layout(param, stage) : def_layout(param, stage);
      const BufferId nb = materialize(dev, {o.id, -1}, want, stage, TaskKind::kOptimizer, -1);
      if (nb != b) {
        prog_.buffers[static_cast<std::size_t>(b)].superseded = true;
        prog_.buffers[static_cast<std::size_t>(nb)].superseded = false;
        have[{o.id, -1}] = nb;
        blayout_[nb] = want;
      }
      if (!local_opt) emit_sends(dev, o.id, -1, TaskKind::kOptimizer, nb);
    }
    const auto si = static_cast<std::size_t>(stage);
    receive_inputs(dev, stage, -1, TaskKind::kOptimizer, opt_ops_[si]);
    for (OpId id : opt_ops_[si]) {
      const ir::Op& u = g.op(id);
      const BufferId pb = have.at({u.inputs[0], -1});
      const TLayout p = blayout_.at(pb);
      const BufferId gb = materialize(dev, {u.inputs[1], -1}, p, stage, TaskKind::kOptimizer, -1);
      Instruction in = make_instruction(InstrKind::kRun, TaskKind::kOptimizer, id, stage, -1, pb);
      const BufferId state = new_buffer(dev, id, stage, -1, BufferRole::kOptimizerState, TaskKind::kOptimizer);
      Buffer& sb = prog_.buffers[static_cast<std::size_t>(state)];
      std::int64_t local = prog_.buffers[static_cast<std::size_t>(pb)].elements;
      // Weight-update sharding (Alpa §4.2): the devices holding the same block (those that
      // differ along the mesh axes the parameter is replicated over) each update 1/k of it
      // with 1/k of the optimizer state, then all-gather the block.
      unsigned used = 0;
      for (const auto& a : p.axes) {
        for (int m : a) used |= 1u << m;
      }
      const unsigned replicated = live_axes(stage) & ~used;
      std::int64_t k = 1;
      for (int m = 0; m < 2; ++m) {
        if (replicated & (1u << m)) k *= msize(stage, m);
      }
      const bool zero = plan_.stages[si].weight_update_sharding && k > 1 && local % k == 0;
      std::vector<std::int32_t> group;
      if (zero) {
        group = group_of(stage, dev, replicated);
        const auto r = static_cast<std::int64_t>(std::find(group.begin(), group.end(), dev) - group.begin());
        local /= k;
        in.offset_elements = r * local;
        in.count_elements = local;
      }
      const bool adam = u.function == "adam";
      sb.elements = local * (adam ? 2 : 1);
      sb.bytes = local * ir::optimizer_state_bytes_per_parameter(adam ? ir::OptimizerKind::kAdam : ir::OptimizerKind::kSgd,
                                                                 g.meta.dtype);
      sb.element_bytes = sb.elements > 0 ? sb.bytes / sb.elements : 0;
      in.inputs = {pb, gb, state};
      out_->push_back(in);
      if (zero) {
        Instruction ag = make_instruction(InstrKind::kAllGather, TaskKind::kOptimizer, u.inputs[0],
                                          stage, -1, pb);
        ag.group = group;
        ag.collective_id =
            named_collective("wus|" + std::to_string(u.inputs[0]) + "|" + std::to_string(stage) + "|", group);
        out_->push_back(ag);
      }
    }
  }

  std::int32_t loss_stage() const {
    return op_stage_[static_cast<std::size_t>(prog_.graphs[0].meta.loss)];
  }

  std::int64_t mesh_size(std::int32_t stage) const {
    return static_cast<std::int64_t>(prog_.stage_devices[static_cast<std::size_t>(stage)].size());
  }

  // ---- schedules ----
  core::Status build_schedules() {
    const auto M = static_cast<std::int32_t>(M_);
    mesh_tasks_.assign(static_cast<std::size_t>(P_), {});
    for (std::int32_t p = 0; p < P_; ++p) {
      std::vector<Task>& t = mesh_tasks_[static_cast<std::size_t>(p)];
      if (V_ == 1) {
        if (plan_.schedule == schema::Schedule::kGpipe) {
          for (std::int32_t m = 0; m < M; ++m) t.push_back({TaskType::kForward, p, m});
          for (std::int32_t m = 0; m < M; ++m) t.push_back({TaskType::kBackward, p, m});
        } else {  // 1F1B (PipeDream-flush): warm-up forwards, then one forward, one backward
          const std::int32_t warm = std::min(P_ - p - 1, M);
          for (std::int32_t m = 0; m < warm; ++m) t.push_back({TaskType::kForward, p, m});
          for (std::int32_t i = 0; i < M - warm; ++i) {
            t.push_back({TaskType::kForward, p, warm + i});
            t.push_back({TaskType::kBackward, p, i});
          }
          for (std::int32_t m = M - warm; m < M; ++m) t.push_back({TaskType::kBackward, p, m});
        }
      } else {
        // Megatron-LM's interleaved 1F1B (schedules.py forward_backward_pipelining_with_
        // interleaving): microbatches in groups of P per model chunk.
        if (M % P_ != 0) {
          return core::invalid_argument("plan: /num_microbatches: the interleaved schedule needs "
                                        "a multiple of the " + std::to_string(P_) +
                                        " pipeline meshes, got " + std::to_string(M));
        }
        const std::int32_t total = M * V_;
        auto chunk = [&](std::int32_t k, bool forward) {
          const std::int32_t c = (k % (P_ * V_)) / P_;
          return forward ? c : V_ - 1 - c;
        };
        auto mb = [&](std::int32_t k) { return (k / (P_ * V_)) * P_ + k % P_; };
        std::int32_t warm = M == P_ ? total : std::min((P_ - p - 1) * 2 + (V_ - 1) * P_, total);
        for (std::int32_t k = 0; k < warm; ++k) {
          t.push_back({TaskType::kForward, chunk(k, true) * P_ + p, mb(k)});
        }
        for (std::int32_t i = 0; i < total - warm; ++i) {
          t.push_back({TaskType::kForward, chunk(warm + i, true) * P_ + p, mb(warm + i)});
          t.push_back({TaskType::kBackward, chunk(i, false) * P_ + p, mb(i)});
        }
        for (std::int32_t k = total - warm; k < total; ++k) {
          t.push_back({TaskType::kBackward, chunk(k, false) * P_ + p, mb(k)});
        }
      }
      for (std::int32_t c = 0; c < V_; ++c) t.push_back({TaskType::kOptimizer, c * P_ + p, -1});
      auto& pos = task_pos_.emplace_back();
      for (std::size_t i = 0; i < t.size(); ++i) {
        pos[{static_cast<int>(t[i].type), t[i].stage, t[i].microbatch}] =
            static_cast<std::int32_t>(i);
      }
    }
    return core::ok_status();
  }

  /// Position of the task producing instance `key` in its mesh's schedule (-1: init).
  std::int32_t producer_position(const InstanceKey& key) const {
    const ir::Op& o = prog_.graphs[0].op(key.first);
    const std::int32_t s = op_stage_[static_cast<std::size_t>(key.first)];
    if (o.kind == OpKind::kParameter) return -1;
    TaskType t = final_grad_[static_cast<std::size_t>(key.first)] ? TaskType::kOptimizer
                 : o.phase == ir::Phase::kForward                  ? TaskType::kForward
                                                                   : TaskType::kBackward;
    const auto& pos = task_pos_[static_cast<std::size_t>(s % P_)];
    return pos.at({static_cast<int>(t), s, t == TaskType::kOptimizer ? -1 : key.second});
  }

  // ---- transfers ----
  Transfer transfer(OpId t, std::int32_t from, std::int32_t to) const {
    const auto& A = prog_.stage_devices[static_cast<std::size_t>(from)];
    const auto& B = prog_.stage_devices[static_cast<std::size_t>(to)];
    const auto dA = static_cast<std::int64_t>(A.size()), dB = static_cast<std::int64_t>(B.size());
    const ir::Op& src = prog_.graph_of_stage(from).op(t);
    const std::int64_t n = src.out.num_elements();
    Transfer tr;
    const auto i = static_cast<std::size_t>(t);
    const Layout l = per_iter_[i] ? Layout::kReplicated : layout_[i];
    if (l == Layout::kBatch) {
      const std::int64_t rA = local_batch_[static_cast<std::size_t>(from)];
      const std::int64_t rB = local_batch_[static_cast<std::size_t>(to)];
      const std::int64_t row = n / rA;
      for (std::int64_t j = 0; j < dB; ++j) {
        for (std::int64_t a = 0; a < dA; ++a) {
          const std::int64_t lo = std::max(a * rA, j * rB), hi = std::min((a + 1) * rA, (j + 1) * rB);
          if (lo >= hi) continue;
          tr.pieces.push_back({A[static_cast<std::size_t>(a)], B[static_cast<std::size_t>(j)],
                               (lo - a * rA) * row, (lo - j * rB) * row, (hi - lo) * row});
        }
      }
    } else if (l == Layout::kReplicated && dB > 1 && n % dB == 0) {
      tr.gather = true;
      const std::int64_t part = n / dB;
      for (std::int64_t j = 0; j < dB; ++j) {
        tr.pieces.push_back({A[static_cast<std::size_t>(j % dA)], B[static_cast<std::size_t>(j)],
                             j * part, j * part, part});
      }
    } else {  // replicated without an even split, or a partial sum (equal mesh sizes)
      for (std::int64_t j = 0; j < dB; ++j) {
        tr.pieces.push_back({A[static_cast<std::size_t>(j % dA)], B[static_cast<std::size_t>(j)],
                             0, 0, n});
      }
    }
    return tr;
  }

  std::int64_t tag_of(OpId t, std::int32_t mb, std::int32_t from, std::int32_t to, std::size_t piece) {
    auto key = std::make_tuple(t, mb, from, to, piece);
    auto it = tags_.find(key);
    if (it == tags_.end()) it = tags_.emplace(key, static_cast<std::int64_t>(tags_.size())).first;
    return it->second;
  }

  std::int64_t collective_of(int what, OpId t, std::int32_t mb, std::int32_t stage) {
    auto key = std::make_tuple(what, t, mb, stage);
    auto it = colls_.find(key);
    if (it == colls_.end()) it = colls_.emplace(key, static_cast<std::int64_t>(colls_.size())).first;
    return it->second;
  }

  // ---- emission ----
  BufferId new_buffer(std::int32_t dev, OpId t, std::int32_t stage, std::int32_t mb, BufferRole role,
                      TaskKind task) {
    const ir::Op& o = prog_.graph_of_stage(stage).op(t);
    Buffer b;
    b.id = static_cast<BufferId>(prog_.buffers.size());
    b.device = dev;
    b.tensor = t;
    b.stage = stage;
    b.microbatch = mb;
    b.role = role;
    b.shape = o.out.shape;
    b.elements = o.out.num_elements();
    // Memory accounting only: a flash kernel's s x s tiles stay on chip (0 bytes), though
    // this executor, running the kernel unfused, stores their elements.
    b.element_bytes = b.elements > 0 ? o.out.bytes() / b.elements : 0;
    b.bytes = ir::device_memory_bytes(prog_.graph_of_stage(stage), o);
    prog_.buffers.push_back(b);
    out_->push_back(make_instruction(InstrKind::kAllocate, task, t, stage, mb, b.id));
    return b.id;
  }

  BufferRole role_of(OpId t) const {
    const ir::Graph& g = prog_.graphs[0];
    if (g.op(t).kind == OpKind::kParameter) return BufferRole::kParameter;
    if (final_grad_[static_cast<std::size_t>(t)]) return BufferRole::kGradient;
    if (t == g.meta.loss) return BufferRole::kLoss;
    return BufferRole::kActivation;
  }

  InstanceKey key_of(OpId t, std::int32_t mb) const {
    return {t, per_iter_[static_cast<std::size_t>(t)] ? -1 : mb};
  }

  void emit_sends(std::int32_t dev, OpId t, std::int32_t mb, TaskKind task, BufferId buf = kNoBuffer) {
    const std::int32_t from = op_stage_[static_cast<std::size_t>(t)];
    if (buf == kNoBuffer) buf = have_[static_cast<std::size_t>(dev)].at({t, mb});
    std::set<std::int32_t> meshes;  // stages on one mesh (interleaving) receive one copy
    for (std::int32_t to : consumer_stages_[static_cast<std::size_t>(t)]) {
      if (to == from || on_mesh(dev, to) || !meshes.insert(to % P_).second) continue;
      const Transfer tr = transfer(t, from, to);
      for (std::size_t k = 0; k < tr.pieces.size(); ++k) {
        const Piece& p = tr.pieces[k];
        if (p.src != dev) continue;
        Instruction in = make_instruction(InstrKind::kSend, task, t, from, mb, buf);
        in.peer = p.dst;
        in.tag = tag_of(t, mb, from, to % P_, k);
        in.offset_elements = p.src_off;
        in.count_elements = p.count;
        out_->push_back(in);
      }
    }
  }

  bool on_mesh(std::int32_t dev, std::int32_t stage) const {
    const auto& d = prog_.stage_devices[static_cast<std::size_t>(stage)];
    return std::find(d.begin(), d.end(), dev) != d.end();
  }

  std::int32_t rank_in(std::int32_t dev, std::int32_t stage) const {
    const auto& d = prog_.stage_devices[static_cast<std::size_t>(stage)];
    return static_cast<std::int32_t>(std::find(d.begin(), d.end(), dev) - d.begin());
  }

  /// RECVs (and local all-gathers) of every remote input the ops of a task need.
  void receive_inputs(std::int32_t dev, std::int32_t stage, std::int32_t mb, TaskKind task,
                      const std::vector<OpId>& ops) {
    const ir::Graph& g = prog_.graphs[0];
    auto& have = have_[static_cast<std::size_t>(dev)];
    std::set<std::tuple<std::int32_t, OpId, std::int32_t>> needed;  // (position, tensor, mb)
    for (OpId id : ops) {
      for (OpId in : g.op(id).inputs) {
        const InstanceKey key = key_of(in, mb);
        const std::int32_t from = op_stage_[static_cast<std::size_t>(in)];
        if (have.count(key) || on_mesh(dev, from)) continue;
        needed.insert({producer_position(key), key.first, key.second});
      }
    }
    for (const auto& [pos, t, m] : needed) {
      const std::int32_t from = op_stage_[static_cast<std::size_t>(t)];
      const BufferId buf = new_buffer(dev, t, stage, m, role_of(t), task);
      prog_.buffers[static_cast<std::size_t>(buf)].received = true;
      if (sharded_[static_cast<std::size_t>(stage)]) set_block(buf, t, def_layout(t, stage), stage);
      const Transfer tr = transfer(t, from, stage);
      for (std::size_t k = 0; k < tr.pieces.size(); ++k) {
        const Piece& p = tr.pieces[k];
        if (p.dst != dev) continue;
        Instruction in = make_instruction(InstrKind::kRecv, task, t, stage, m, buf);
        in.peer = p.src;
        in.tag = tag_of(t, m, from, stage % P_, k);
        in.offset_elements = p.dst_off;
        in.count_elements = p.count;
        out_->push_back(in);
      }
      if (tr.gather) {
        Instruction in = make_instruction(InstrKind::kAllGather, task, t, stage, m, buf);
        in.group = prog_.stage_devices[static_cast<std::size_t>(stage)];
        in.collective_id = collective_of(0, t, m, stage);
        out_->push_back(in);
      }
      have[{t, m}] = buf;
    }
  }

  /// `slice_count` > 0 (optimizer ops only): update elements [slice_offset, +slice_count).
  void emit_run(std::int32_t dev, OpId id, std::int32_t stage, std::int32_t mb, TaskKind task,
                std::int64_t slice_offset = 0, std::int64_t slice_count = 0) {
    if (sharded_[static_cast<std::size_t>(stage)]) {
      emit_run_sharded(dev, id, stage, mb, task);
      return;
    }
    const ir::Graph& g = prog_.graph_of_stage(stage);
    const ir::Op& o = g.op(id);
    auto& have = have_[static_cast<std::size_t>(dev)];
    Instruction in = make_instruction(InstrKind::kRun, task, id, stage, mb);
    for (OpId x : o.inputs) {
      auto it = have.find(key_of(x, mb));
      ALPASIM_CHECK(it != have.end()) << "input " << g.op(x).name << " of " << o.name
                                      << " missing on device " << dev;
      in.inputs.push_back(it->second);
    }
    if (o.kind == OpKind::kOptimizer) {
      // In place on the parameter; the optimizer state is a buffer of its own.
      in.buffer = in.inputs[0];
      const BufferId state = new_buffer(dev, id, stage, -1, BufferRole::kOptimizerState, task);
      Buffer& sb = prog_.buffers[static_cast<std::size_t>(state)];
      const std::int64_t slots = o.function == "adam" ? 2 : 1;
      const std::int64_t updated = slice_count > 0 ? slice_count : o.out.num_elements();
      in.offset_elements = slice_offset;
      in.count_elements = slice_count;
      sb.elements = updated * slots;
      sb.bytes = updated *
                 ir::optimizer_state_bytes_per_parameter(
                     o.function == "adam" ? ir::OptimizerKind::kAdam : ir::OptimizerKind::kSgd,
                     g.meta.dtype);
      sb.element_bytes = sb.elements > 0 ? sb.bytes / sb.elements : 0;
      in.inputs.push_back(state);
      out_->push_back(in);
      return;
    }
    const InstanceKey key = key_of(id, mb);
    auto it = have.find(key);
    if (it == have.end()) {
      it = have.emplace(key, new_buffer(dev, id, stage, key.second, role_of(id), task)).first;
    }
    in.buffer = it->second;
    in.accumulate = final_grad_[static_cast<std::size_t>(id)] != 0;
    if (o.kind == OpKind::kInput && layout_[static_cast<std::size_t>(id)] == Layout::kBatch) {
      in.sample_offset = mb * (plan_.global_batch_size / M_) +
                         rank_in(dev, stage) * local_batch_[static_cast<std::size_t>(stage)];
    }
    out_->push_back(in);
    if (!per_iter_[static_cast<std::size_t>(id)]) emit_sends(dev, id, key.second, task);
  }

  core::Status lower_device(std::int32_t dev) {
    out_ = &prog_.code[static_cast<std::size_t>(dev)];
    std::int32_t mesh = -1;
    for (std::int32_t s = 0; s < P_; ++s) {
      if (on_mesh(dev, s)) mesh = s;
    }
    ALPASIM_CHECK(mesh >= 0) << "device " << dev << " is on no stage";
    // Init: parameters of every stage this device serves, then their sends.
    for (std::int32_t c = 0; c < V_; ++c) {
      const std::int32_t s = c * P_ + mesh;
      for (OpId p : param_ops_[static_cast<std::size_t>(s)]) emit_run(dev, p, s, -1, TaskKind::kInit);
    }
    for (std::int32_t c = 0; c < V_; ++c) {
      const std::int32_t s = c * P_ + mesh;
      for (OpId p : param_ops_[static_cast<std::size_t>(s)]) {
        if (sharded_[static_cast<std::size_t>(s)]) {
          send_sharded(dev, p, -1, s, TaskKind::kInit);
        } else {
          emit_sends(dev, p, -1, TaskKind::kInit);
        }
      }
    }
    for (const Task& t : mesh_tasks_[static_cast<std::size_t>(mesh)]) {
      const auto si = static_cast<std::size_t>(t.stage);
      if (t.type == TaskType::kOptimizer && sharded_[si]) {
        optimizer_sharded(dev, t.stage);
        continue;
      }
      if (t.type == TaskType::kOptimizer) {
        const ir::Graph& g = prog_.graph_of_stage(t.stage);
        // Data-parallel gradient sync: sum over the mesh, then · 1/(M · d_loss). Each device
        // of the loss stage seeds the backward pass with the mean over its own rows, so the
        // summed gradients are those of M · d_loss times the batch mean, whatever the mesh
        // sizes of the other stages.
        // With weight-update sharding (Alpa §4.2, ZeRO-like) a gradient whose optimizer is
        // in this stage and whose size the mesh divides is reduce-scattered instead; each
        // device updates its 1/d slice (optimizer state 1/d) and the weights are all-gathered.
        const std::int64_t d = mesh_size(t.stage);
        const bool zero = plan_.stages[si].weight_update_sharding && d > 1;
        std::set<OpId> sharded;
        for (const ir::Op& o : g.ops()) {
          if (!final_grad_[static_cast<std::size_t>(o.id)] || op_stage_[static_cast<std::size_t>(o.id)] != t.stage) continue;
          auto& have = have_[static_cast<std::size_t>(dev)];
          auto it = have.find({o.id, -1});
          ALPASIM_CHECK(it != have.end()) << "gradient " << o.name << " never produced";
          const OpId param = prog_.gradient_of[static_cast<std::size_t>(o.id)];
          const bool shard = zero && op_stage_[static_cast<std::size_t>(param)] == t.stage &&
                             o.out.num_elements() % d == 0;
          Instruction in = make_instruction(shard ? InstrKind::kReduceScatter : InstrKind::kAllReduce,
                                            TaskKind::kOptimizer, o.id, t.stage, -1, it->second);
          in.group = prog_.stage_devices[si];
          in.collective_id = collective_of(shard ? 2 : 1, o.id, -1, t.stage);
          in.scale = 1.0 / static_cast<double>(M_ * k_loss_);
          out_->push_back(in);
          if (shard) {
            sharded.insert(o.id);
            prog_.buffers[static_cast<std::size_t>(it->second)].reduce_scattered = true;
          } else {
            emit_sends(dev, o.id, -1, TaskKind::kOptimizer);
          }
        }
        receive_inputs(dev, t.stage, -1, TaskKind::kOptimizer, opt_ops_[si]);
        for (OpId id : opt_ops_[si]) {
          const ir::Op& u = g.op(id);
          if (!sharded.count(u.inputs[1])) {
            emit_run(dev, id, t.stage, -1, TaskKind::kOptimizer);
            continue;
          }
          const std::int64_t part = u.out.num_elements() / d;
          emit_run(dev, id, t.stage, -1, TaskKind::kOptimizer, rank_in(dev, t.stage) * part, part);
          const BufferId param_buffer = have_[static_cast<std::size_t>(dev)].at({u.inputs[0], -1});
          Instruction ag = make_instruction(InstrKind::kAllGather, TaskKind::kOptimizer, u.inputs[0],
                                            t.stage, -1, param_buffer);
          ag.group = prog_.stage_devices[si];
          ag.collective_id = collective_of(3, u.inputs[0], -1, t.stage);
          out_->push_back(ag);
        }
        continue;
      }
      const bool fwd = t.type == TaskType::kForward;
      const TaskKind tk = fwd ? TaskKind::kForward : TaskKind::kBackward;
      const auto& ops = fwd ? fwd_ops_[si] : bwd_ops_[si];
      receive_inputs(dev, t.stage, t.microbatch, tk, ops);
      for (OpId id : ops) emit_run(dev, id, t.stage, t.microbatch, tk);
    }
    return core::ok_status();
  }

  /// Point-to-point transfers must be received in the order they were sent on each
  /// (sender, receiver) channel (NCCL's rule; the CPU backend matches by tag but keeps the
  /// same order). A receiver that needs a later transfer first gets the earlier ones hoisted
  /// right before it (with their ALLOCATE). Hoisting a RECV earlier cannot deadlock: its send
  /// precedes, in the sender's program, the send the receiver was already waiting for there.
  void fix_channel_order() {
    const std::size_t n = prog_.code.size();
    std::vector<std::map<std::int32_t, std::vector<std::int64_t>>> order(n);  // [dst][src] tags
    for (std::size_t src = 0; src < n; ++src) {
      for (const Instruction& in : prog_.code[src]) {
        if (in.kind == InstrKind::kSend) {
          order[static_cast<std::size_t>(in.peer)][static_cast<std::int32_t>(src)].push_back(in.tag);
        }
      }
    }
    for (std::size_t d = 0; d < n; ++d) {
      std::map<std::int64_t, Instruction> recv_of;
      for (const Instruction& in : prog_.code[d]) {
        if (in.kind == InstrKind::kRecv) recv_of[in.tag] = in;
      }
      std::map<std::int32_t, std::size_t> next;
      std::set<std::int64_t> done;
      std::set<BufferId> allocated;
      std::vector<Instruction> out;
      out.reserve(prog_.code[d].size());
      auto emit_recv = [&](const Instruction& in) {
        if (allocated.insert(in.buffer).second) {
          out.push_back(make_instruction(InstrKind::kAllocate, in.task, in.op, in.stage, in.microbatch,
                                         in.buffer));
        }
        out.push_back(in);
        done.insert(in.tag);
        ++next[in.peer];
      };
      for (const Instruction& in : prog_.code[d]) {
        if (in.kind == InstrKind::kAllocate) {
          if (allocated.insert(in.buffer).second) out.push_back(in);
          continue;
        }
        if (in.kind != InstrKind::kRecv) {
          out.push_back(in);
          continue;
        }
        if (done.count(in.tag)) continue;
        const auto& tags = order[d][in.peer];
        while (next[in.peer] < tags.size() && tags[next[in.peer]] != in.tag) {
          emit_recv(recv_of.at(tags[next[in.peer]]));
        }
        emit_recv(in);
      }
      prog_.code[d] = std::move(out);
    }
  }

  /// FREE each buffer right after the last instruction that touches it.
  void insert_frees() {
    for (auto& code : prog_.code) {
      std::map<BufferId, std::size_t> last;
      for (std::size_t i = 0; i < code.size(); ++i) {
        last[code[i].buffer] = i;
        for (BufferId b : code[i].inputs) last[b] = i;
      }
      std::vector<std::vector<BufferId>> after(code.size());
      for (const auto& [b, i] : last) {
        if (b != kNoBuffer) after[i].push_back(b);
      }
      std::vector<Instruction> out;
      out.reserve(code.size() + last.size());
      for (std::size_t i = 0; i < code.size(); ++i) {
        out.push_back(code[i]);
        for (BufferId b : after[i]) {
          const Buffer& freed = prog_.buffers[static_cast<std::size_t>(b)];
          out.push_back(make_instruction(InstrKind::kFree, code[i].task, freed.tensor, freed.stage,
                                         freed.microbatch, b));
        }
      }
      code = std::move(out);
    }
  }

  /// Gradient accumulation buffers and optimizer states live the whole iteration (as in a
  /// training loop, where they persist across iterations, and as the simulator counts
  /// them): their ALLOCATEs move to the start of the device's program, their FREEs to the
  /// end. Received gradients (sent to another stage's optimizer) stay transient.
  void hoist_persistent() {
    for (auto& code : prog_.code) {
      auto persistent = [&](const Instruction& in) {
        if (in.kind != InstrKind::kAllocate && in.kind != InstrKind::kFree) return false;
        const Buffer& b = prog_.buffers[static_cast<std::size_t>(in.buffer)];
        return (b.role == BufferRole::kGradient && !b.received) || b.role == BufferRole::kOptimizerState;
      };
      std::vector<Instruction> head, body, tail;
      body.reserve(code.size());
      for (const Instruction& in : code) {
        if (!persistent(in)) {
          body.push_back(in);
        } else {
          Instruction moved = in;
          moved.task = TaskKind::kInit;
          moved.microbatch = -1;
          (in.kind == InstrKind::kAllocate ? head : tail).push_back(moved);
          if (in.kind == InstrKind::kFree) tail.back().task = TaskKind::kOptimizer;
        }
      }
      head.insert(head.end(), body.begin(), body.end());
      head.insert(head.end(), tail.begin(), tail.end());
      code = std::move(head);
    }
  }

  const schema::Plan& plan_;
  LowerOptions opt_;
  Program prog_;
  std::int32_t S_ = 0, P_ = 0, V_ = 1;
  std::int64_t M_ = 0;
  std::vector<std::int64_t> local_batch_;
  std::vector<std::int32_t> stage_of_layer_;
  std::vector<Layout> layout_;
  std::vector<std::int32_t> op_stage_;
  std::vector<char> per_iter_, final_grad_;
  std::vector<std::set<std::int32_t>> consumer_stages_;
  std::vector<std::vector<OpId>> fwd_ops_, bwd_ops_, opt_ops_, param_ops_;
  std::vector<std::vector<Task>> mesh_tasks_;
  std::vector<std::map<std::tuple<int, std::int32_t, std::int32_t>, std::int32_t>> task_pos_;
  std::map<std::tuple<OpId, std::int32_t, std::int32_t, std::int32_t, std::size_t>, std::int64_t> tags_;
  std::map<std::tuple<int, OpId, std::int32_t, std::int32_t>, std::int64_t> colls_;
  std::vector<std::map<InstanceKey, BufferId>> have_;
  std::vector<Instruction>* out_ = nullptr;
  // Per-operator shardings.
  std::vector<char> sharded_;                                  // per stage
  std::vector<const schema::OperatorSharding*> hint_;          // per op (its stage's entry)
  std::int32_t full_graph_ = -1;                               // graph at microbatch samples
  std::int64_t k_loss_ = 1;                                    // loss shards (gradient scale)
  std::optional<schema::BlockLayouts> blocks_;                // set when a stage is sharded
  std::map<BufferId, TLayout> blayout_;
  /// Per device: (instance, layout, scope) -> its copy; scope -1, or for a copy scoped to
  /// the task making it (materialize) 2·microbatch + (backward ? 1 : 0).
  std::vector<std::map<std::tuple<InstanceKey, std::string, std::int64_t>, BufferId>> alt_;
  // Per device: the gathered statistics of each vocabulary-split cross entropy instance,
  // read again by its gradient (run_on_class_block).
  std::vector<std::map<InstanceKey, BufferId>> loss_statistics_;
  std::map<std::string, std::int64_t> named_colls_;
};

}  // namespace

ir::OptimizerKind executor_optimizer(const ir::Graph& forward) {
  return forward.meta.family == "wide_resnet" ? ir::OptimizerKind::kSgd : ir::OptimizerKind::kAdam;
}

core::Result<Program> lower_plan(const schema::Plan& plan, const LowerOptions& options) {
  return Lowerer(plan, options).run();
}

}  // namespace alpasim::exec

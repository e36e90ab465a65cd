#include "schema/block_layout.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace alpasim::schema {
namespace {

using ir::OpId;
using ir::OpKind;

void clear_axes(BlockLayout& l, std::size_t from) {
  for (std::size_t a = from; a < l.axes.size(); ++a) l.axes[a].clear();
}

/// Axes of `out` mapped onto an operand of shape `in` that is a suffix (or a prefix when
/// `prefix`) of the output shape; false when it is neither.
bool map_axes(const std::vector<std::int64_t>& in, const std::vector<std::int64_t>& out, const BlockLayout& ol,
              bool prefix, BlockLayout& l) {
  l = BlockLayout{};
  l.axes.resize(in.size());
  if (in.size() > out.size()) return false;
  const std::size_t base = prefix ? 0 : out.size() - in.size();
  for (std::size_t a = 0; a < in.size(); ++a) {
    if (in[a] == out[base + a]) {
      l.axes[a] = ol.axes[base + a];
    } else if (in[a] != 1) {
      return false;
    }
  }
  return true;
}

}  // namespace

core::Result<std::vector<BatchLayout>> classify_batch_layouts(const ir::Graph& g, const ir::Graph& one,
                                                              const ir::Graph& two,
                                                              std::vector<ir::OpId>* inner_batch) {
  const std::size_t n = g.size();
  if (one.size() != n || two.size() != n) {
    return core::unimplemented("model " + g.meta.model_name + ": the graph's operators change with the batch size");
  }
  std::vector<BatchLayout> layout(n, BatchLayout::kReplicated);
  bool any_batch = false;
  for (std::size_t i = 0; i < n; ++i) {
    const ir::Op& a = one.op(static_cast<OpId>(i));
    const ir::Op& b = two.op(static_cast<OpId>(i));
    const ir::Op& o = g.op(static_cast<OpId>(i));
    if (a.out.shape != b.out.shape) {
      bool axis0 = a.out.shape.size() == b.out.shape.size() && !a.out.shape.empty() &&
                   b.out.shape[0] == 2 * a.out.shape[0];
      for (std::size_t k = 1; axis0 && k < a.out.shape.size(); ++k) {
        axis0 = a.out.shape[k] == b.out.shape[k];
      }
      if (!axis0 && inner_batch == nullptr) {
        return core::unimplemented("op " + o.name +
                                   ": the batch is not the leading axis of its output; the "
                                   "executor splits batches along axis 0 only");
      }
      if (!axis0) inner_batch->push_back(static_cast<OpId>(i));
      layout[i] = BatchLayout::kBatch;
      any_batch = true;
      continue;
    }
    if (o.kind == OpKind::kParameter) continue;
    for (OpId in : o.inputs) {
      if (layout[static_cast<std::size_t>(in)] != BatchLayout::kReplicated) layout[i] = BatchLayout::kPartial;
    }
    if (o.kind == OpKind::kOptimizer) layout[i] = BatchLayout::kReplicated;
  }
  if (!any_batch) {
    return core::unimplemented("model " + g.meta.model_name +
                               ": no tensor scales with the batch size (a model file with "
                               "static shapes?); the executor needs a batch axis to split");
  }
  return layout;
}

std::string block_layout_key(const BlockLayout& l) {
  std::string k;
  for (const auto& a : l.axes) {
    k += a.empty() ? "R" : "S";
    for (int m : a) k += static_cast<char>('0' + m);
  }
  return k + "P" + std::to_string(l.partial);
}

core::Result<OperatorShardings> match_operator_shardings(const Plan& plan, const ir::Graph& g,
                                                         const std::vector<BatchLayout>& batch_layout,
                                                         const std::vector<std::int32_t>& op_stage) {
  OperatorShardings r;
  const auto S = static_cast<std::int32_t>(plan.stages.size());
  r.sharded.assign(static_cast<std::size_t>(S), 0);
  r.hint.assign(g.size(), nullptr);
  r.op_sharded.assign(g.size(), 0);
  std::map<std::string, std::vector<OpId>> by_name;  // names may repeat: k-th entry, k-th op
  for (const ir::Op& o : g.ops()) by_name[o.name].push_back(o.id);
  for (std::int32_t s = 0; s < S; ++s) {
    const auto& st = plan.stages[static_cast<std::size_t>(s)];
    const std::int64_t sizes[2] = {st.logical_rows, st.logical_cols};
    std::map<std::string, std::size_t> seen;
    for (std::size_t k = 0; k < st.shardings.size(); ++k) {
      const auto& sh = st.shardings[k];
      const std::string where = "plan: /stages/" + std::to_string(s) + "/shardings/" + std::to_string(k);
      auto it = by_name.find(sh.op);
      if (it == by_name.end()) {
        return core::invalid_argument(where + "/op: expected an operator of the model graph, got \"" + sh.op + "\"");
      }
      const std::size_t occurrence = seen[sh.op]++;
      if (occurrence >= it->second.size()) {
        return core::invalid_argument(where + "/op: expected each operator once per stage, got \"" + sh.op +
                                      "\" " + std::to_string(occurrence + 1) + " times (the model has " +
                                      std::to_string(it->second.size()) + " of that name)");
      }
      const ir::Op& o = g.op(it->second[occurrence]);
      const std::int32_t owner = op_stage[static_cast<std::size_t>(o.id)];
      if (owner == s) {
        r.hint[static_cast<std::size_t>(o.id)] = &sh;
      } else {
        // A tensor of another stage may carry the layout this stage reads it in (a received
        // activation or gradient, a tied weight); an operator this stage neither runs nor
        // reads is a plan for the wrong stage.
        bool read_here = false;
        for (OpId u : g.consumers(o.id)) read_here = read_here || op_stage[static_cast<std::size_t>(u)] == s;
        if (!read_here) {
          return core::invalid_argument(where + "/op: expected an operator of stage " + std::to_string(s) +
                                        " or a tensor it reads, got \"" + sh.op + "\" of stage " +
                                        std::to_string(owner));
        }
      }
      // Each spec must have the rank of the tensor it lays out.
      auto rank_error = [&](const std::string& field, const ShardingSpec& spec, OpId t) -> core::Status {
        const auto rank = static_cast<int>(g.op(t).out.shape.size());
        if (spec.rank() == rank) return core::ok_status();
        return core::invalid_argument(where + "/" + field + ": expected a spec of rank " + std::to_string(rank) +
                                      " (\"" + g.op(t).name + "\" has " + std::to_string(rank) +
                                      " dimensions), got \"" + spec.to_string() + "\"");
      };
      ALPASIM_RETURN_IF_ERROR(rank_error("output", sh.output, o.id));
      if (sh.inputs.size() > o.inputs.size()) {
        return core::invalid_argument(where + "/inputs: expected at most " + std::to_string(o.inputs.size()) +
                                      " specs (\"" + sh.op + "\" has that many operands), got " +
                                      std::to_string(sh.inputs.size()));
      }
      for (std::size_t i = 0; i < sh.inputs.size(); ++i) {
        ALPASIM_RETURN_IF_ERROR(rank_error("inputs/" + std::to_string(i), sh.inputs[i], o.inputs[i]));
      }
      auto data_parallel = [&](OpId t, const ShardingSpec& spec) {
        const bool batch = batch_layout[static_cast<std::size_t>(t)] == BatchLayout::kBatch;
        for (int ax = 0; ax < spec.rank(); ++ax) {
          for (int m : spec.mesh_axes(ax)) {
            if (m < 0 || m > 1) return false;
            if (sizes[m] > 1 && !(batch && ax == 0)) return false;
          }
        }
        if (batch) {
          for (int m = 0; m < 2; ++m) {
            if (sizes[m] > 1 && !spec.uses_mesh_axis(m)) return false;
          }
        }
        return true;
      };
      bool ok = data_parallel(o.id, sh.output);
      for (std::size_t i = 0; ok && i < sh.inputs.size() && i < o.inputs.size(); ++i) {
        ok = data_parallel(o.inputs[i], sh.inputs[i]);
      }
      if (!ok) {
        r.sharded[static_cast<std::size_t>(s)] = 1;
        r.op_sharded[static_cast<std::size_t>(o.id)] = 1;
      }
    }
  }
  return r;
}

BlockLayouts::BlockLayouts(const Plan& plan, const ir::Graph& full, std::vector<BatchLayout> batch_layout,
                           std::vector<char> per_iteration, std::vector<std::int32_t> op_stage,
                           std::vector<const OperatorSharding*> hint)
    : plan_(plan),
      full_(full),
      batch_layout_(std::move(batch_layout)),
      per_iter_(std::move(per_iteration)),
      op_stage_(std::move(op_stage)),
      hint_(std::move(hint)) {
  ALPASIM_CHECK(batch_layout_.size() == full_.size() && per_iter_.size() == full_.size() &&
                op_stage_.size() == full_.size() && hint_.size() == full_.size())
      << "BlockLayouts: per-op tables of another graph";
}

std::int64_t BlockLayouts::mesh_axis_size(std::int32_t stage, int m) const {
  const auto& st = plan_.stages[static_cast<std::size_t>(stage)];
  return m == 0 ? st.logical_rows : st.logical_cols;
}

unsigned BlockLayouts::live_axes(std::int32_t stage) const {
  return (mesh_axis_size(stage, 0) > 1 ? 1u : 0u) | (mesh_axis_size(stage, 1) > 1 ? 2u : 0u);
}

const std::vector<std::int64_t>& BlockLayouts::global_shape(OpId t) const { return full_.op(t).out.shape; }

BlockLayout BlockLayouts::normalize(BlockLayout l, OpId t, std::int32_t stage) const {
  const auto& shape = global_shape(t);
  l.axes.resize(shape.size());
  unsigned used = 0;
  for (std::size_t a = 0; a < shape.size(); ++a) {
    std::vector<int> keep;
    std::int64_t n = 1;
    for (int m : l.axes[a]) {
      if (m < 0 || m > 1 || mesh_axis_size(stage, m) <= 1 || (used & (1u << m))) continue;
      if (shape[a] % (n * mesh_axis_size(stage, m)) != 0) continue;
      keep.push_back(m);
      used |= 1u << m;
      n *= mesh_axis_size(stage, m);
    }
    l.axes[a] = keep;
  }
  l.partial &= live_axes(stage) & ~used;
  return l;
}

BlockLayout BlockLayouts::from_spec(const ShardingSpec* spec, OpId t, std::int32_t stage,
                                    const BlockLayout& fallback) const {
  if (spec == nullptr || spec->rank() != static_cast<int>(global_shape(t).size())) return fallback;
  BlockLayout l;
  for (int a = 0; a < spec->rank(); ++a) l.axes.push_back(spec->mesh_axes(a));
  return normalize(l, t, stage);
}

BlockLayout BlockLayouts::def_layout(OpId t, std::int32_t stage) const {
  BlockLayout l;
  l.axes.resize(global_shape(t).size());
  const auto i = static_cast<std::size_t>(t);
  const BatchLayout kind =
      per_iter_[i] && full_.op(t).kind == OpKind::kParameter ? BatchLayout::kReplicated : batch_layout_[i];
  if (kind == BatchLayout::kBatch) {
    for (int m = 0; m < 2; ++m) {
      if (mesh_axis_size(stage, m) > 1) l.axes[0].push_back(m);
    }
  } else if (kind == BatchLayout::kPartial) {
    l.partial = live_axes(stage);
  }
  return l;
}

BlockLayout BlockLayouts::loss_input_layout(std::int32_t stage) const {
  const ir::Op& loss = full_.op(full_.meta.loss);
  const OpId x = loss.inputs[0];
  const auto* h = hint_[static_cast<std::size_t>(loss.id)];
  BlockLayout l = from_spec(h && !h->inputs.empty() ? &h->inputs[0] : nullptr, x, stage, def_layout(x, stage));
  l.partial = 0;
  return l;
}

void BlockLayouts::block_of(OpId t, const BlockLayout& l, std::int32_t stage, std::array<std::int64_t, 2> c,
                            std::vector<std::int64_t>& off, std::vector<std::int64_t>& local) const {
  const auto& shape = global_shape(t);
  off.assign(shape.size(), 0);
  local = shape;
  for (std::size_t a = 0; a < shape.size(); ++a) {
    std::int64_t idx = 0, n = 1;
    for (int m : l.axes[a]) {
      idx = idx * mesh_axis_size(stage, m) + c[static_cast<std::size_t>(m)];
      n *= mesh_axis_size(stage, m);
    }
    local[a] = shape[a] / n;
    off[a] = idx * local[a];
  }
}

std::int64_t BlockLayouts::block_bytes(OpId t, const BlockLayout& l, std::int32_t stage) const {
  std::vector<std::int64_t> off, local;
  block_of(t, l, stage, {0, 0}, off, local);
  const ir::Op& f = full_.op(t);
  const std::int64_t ge = f.out.num_elements();
  std::int64_t elements = 1;
  for (std::int64_t x : local) elements *= x;
  return ge > 0 ? f.out.bytes() / ge * elements : 0;
}

std::int64_t BlockLayouts::loss_statistics_elements(OpId ce, const OpLayouts& lay, std::int32_t stage) const {
  ALPASIM_CHECK(lay.class_split != 0 && full_.op(ce).function == "softmax_cross_entropy")
      << full_.op(ce).name << ": statistics of no cross entropy on class blocks";
  std::int64_t parts = 1;
  for (int m = 0; m < 2; ++m) {
    if (lay.class_split & (1u << m)) parts *= mesh_axis_size(stage, m);
  }
  std::vector<std::int64_t> off, local;
  block_of(ce, lay.out, stage, {0, 0}, off, local);  // the per-row loss's block
  std::int64_t rows = 1;
  for (std::int64_t v : local) rows *= v;
  return parts * rows * kLossStatisticsPerRow;
}

bool BlockLayouts::copy_scoped_to_forward(OpId t, const BlockLayout& held, const BlockLayout& want,
                                          std::int32_t stage) const {
  if (per_iter_[static_cast<std::size_t>(t)] || block_bytes(t, want, stage) <= block_bytes(t, held, stage)) {
    return false;
  }
  bool read_in_backward = false;
  for (OpId reader : full_.consumers(t)) {
    const ir::Op& r = full_.op(reader);
    if (r.phase != ir::Phase::kBackward) continue;
    if (r.kind != OpKind::kDot || r.grad_role != ir::GradRole::kWeightGrad) return false;
    read_in_backward = true;
  }
  return read_in_backward;
}

bool BlockLayouts::gradient_over_logits(const ir::Op& grad, const OpLayouts& lay) const {
  if (lay.class_split == 0 || grad.function != "softmax_cross_entropy_grad" || grad.inputs.size() != 3 ||
      grad.source == ir::kNoOp) {
    return false;
  }
  const OpId logits = grad.inputs[1];
  if (per_iter_[static_cast<std::size_t>(logits)]) return false;
  for (OpId reader : full_.consumers(logits)) {
    if (reader != grad.source && reader != grad.id) return false;
  }
  return true;
}

OpLayouts BlockLayouts::fallback_layouts(const ir::Op& o, std::int32_t stage) {
  fallbacks_.push_back(o.id);
  OpLayouts r;
  for (OpId x : o.inputs) r.in.push_back(def_layout(x, stage));
  r.out = def_layout(o.id, stage);
  return r;
}

OpLayouts BlockLayouts::layouts_of(const ir::Op& o, std::int32_t stage, const CurrentLayout& current) {
  OpLayouts r = compute(o, stage, current);
  used_in_[o.id] = r.in;
  if (o.function == "softmax_cross_entropy") class_split_[o.id] = r.class_split;
  return r;
}

OpLayouts BlockLayouts::compute(const ir::Op& o, std::int32_t stage, const CurrentLayout& current_layout) {
  auto current = [&](OpId t) {
    BlockLayout l = current_layout(t);
    l.partial = 0;
    return l;
  };
  const auto* h = hint_[static_cast<std::size_t>(o.id)];
  const ir::Graph& gf = full_;
  auto hin = [&](std::size_t i, const BlockLayout& otherwise) {
    return from_spec(h && i < h->inputs.size() ? &h->inputs[i] : nullptr, o.inputs[i], stage, otherwise);
  };
  auto hout = [&](const BlockLayout& otherwise) { return from_spec(h ? &h->output : nullptr, o.id, stage, otherwise); };
  const auto& oshape = global_shape(o.id);
  const std::size_t R = oshape.size();
  OpLayouts r;
  if (o.kind == OpKind::kInput || o.kind == OpKind::kConv2d || o.kind == OpKind::kPool) {
    return fallback_layouts(o, stage);
  }
  if (o.kind == OpKind::kParameter) {
    r.out = param_layout(o.id, stage);
    return r;
  }
  if (o.kind == OpKind::kOptimizer) {
    const BlockLayout p = current(o.inputs[0]);
    r.in = {p, p};
    r.out = p;
    return r;
  }
  if (o.id == gf.meta.loss) {
    r.in = {loss_input_layout(stage)};
    r.out = BlockLayout{};
    r.out.axes.resize(R);
    return r;
  }
  // Operands that are not partial, laid out per the hint or as they are.
  auto operand = [&](std::size_t i) { return hin(i, current(o.inputs[i])); };
  switch (o.kind) {
    case OpKind::kDot: {
      const ir::DotSpec& s = o.dot;
      const std::string labels[2] = {s.lhs, s.rhs};
      BlockLayout ops[2] = {operand(0), operand(1)};
      std::map<char, std::vector<int>> label_axes;
      unsigned used = 0;
      // A gradient of a weight of this stage without a spec of its own is written in its
      // weight's layout, as Megatron writes its block of a split weight's gradient (it
      // gathers a sequence-split input again rather than sum whole partial gradients).
      ir::OpId weight = ir::kNoOp;
      if (h == nullptr && o.grad_role == ir::GradRole::kWeightGrad && o.source != ir::kNoOp &&
          gf.op(o.source).is_einsum()) {
        const ir::Op& src = gf.op(o.source);
        for (std::size_t i = 0; i < 2 && i < src.inputs.size(); ++i) {
          const ir::OpId w = src.inputs[i];
          if (s.out == (i == 0 ? src.dot.lhs : src.dot.rhs) && gf.op(w).kind == OpKind::kParameter &&
              op_stage_[static_cast<std::size_t>(w)] == stage) {
            weight = w;
          }
        }
      }
      if ((h != nullptr && h->output.rank() == static_cast<int>(R)) || weight != ir::kNoOp) {
        // The output's labels take their splits first, from the plan's spec (Megatron's
        // column-parallel linear gathers its sequence-split input and writes its block of
        // columns) or the weight's layout; operands are laid out to them, and a contracting
        // label takes only the mesh axes left.
        const BlockLayout want = h != nullptr ? hout(BlockLayout{}) : param_layout(weight, stage);
        // A spec's output keeps off the mesh axes the operands split a contracted letter
        // over: a row-parallel GEMM sums partial products and reduce-scatters them onto the
        // sequence (Megatron), rather than gathering its operands. A weight's gradient takes
        // its weight's layout whatever the operands hold (Megatron gathers the input again).
        unsigned contracted = 0;
        if (weight == ir::kNoOp) {
          for (int k = 0; k < 2; ++k) {
            for (std::size_t a = 0; a < labels[k].size(); ++a) {
              if (s.out.find(labels[k][a]) != std::string::npos) continue;
              for (int m : ops[k].axes[a]) contracted |= 1u << m;
            }
          }
        }
        for (std::size_t a = 0; a < s.out.size() && a < R; ++a) {
          std::vector<int> keep;
          for (int m : want.axes[a]) {
            if (!(used & (1u << m)) && !(contracted & (1u << m))) keep.push_back(m);
          }
          for (int m : keep) used |= 1u << m;
          label_axes[s.out[a]] = keep;
        }
      }
      for (int k = 0; k < 2; ++k) {
        for (std::size_t a = 0; a < labels[k].size(); ++a) {
          const char c = labels[k][a];
          if (label_axes.count(c)) continue;
          std::vector<int> keep;
          for (int m : ops[k].axes[a]) {
            if (!(used & (1u << m))) keep.push_back(m);
          }
          for (int m : keep) used |= 1u << m;
          label_axes[c] = keep;
        }
      }
      for (int k = 0; k < 2; ++k) {
        for (std::size_t a = 0; a < labels[k].size(); ++a) ops[k].axes[a] = label_axes[labels[k][a]];
        r.in.push_back(normalize(ops[k], o.inputs[static_cast<std::size_t>(k)], stage));
      }
      r.out.axes.resize(R);
      for (std::size_t a = 0; a < s.out.size() && a < R; ++a) r.out.axes[a] = label_axes[s.out[a]];
      for (const auto& [c, axes] : label_axes) {
        if (s.out.find(c) != std::string::npos) continue;
        for (int m : axes) r.out.partial |= 1u << m;
      }
      // normalize() must not drop a split the operands use (shapes agree by construction).
      if (o.inputs.size() > 2) {
        BlockLayout bias;
        if (!map_axes(global_shape(o.inputs[2]), oshape, r.out, false, bias)) return fallback_layouts(o, stage);
        r.in.push_back(bias);
        r.bias_partial = r.out.partial;
      }
      return r;
    }
    case OpKind::kElementwise: {
      const std::string& fn = o.function;
      if (fn == "broadcast") {
        auto it = used_in_.find(o.source);
        if (o.source == ir::kNoOp || it == used_in_.end() || it->second.empty()) return fallback_layouts(o, stage);
        r.out = it->second[0];
        r.out.partial = 0;
        BlockLayout l;
        if (!map_axes(global_shape(o.inputs[0]), oshape, r.out, false, l)) return fallback_layouts(o, stage);
        // reduce_map also needs the kept axes whole where the reduction maps them.
        r.in = {l};
        return r;
      }
      // A sum of partial sums over the same mesh axes in the same layout (the input gradient
      // of Q, K and V, or of any tensor read by several row-split GEMMs) stays partial: one
      // all-reduce of the sum where its reader needs it whole, as Megatron sums before it
      // reduces (its fused QKV linear), not one per addend.
      if (fn == "add" && o.inputs.size() >= 2) {
        const BlockLayout held = current_layout(o.inputs[0]);
        bool partial_sum = held.partial != 0 && hout(held).axes == held.axes;
        for (OpId x : o.inputs) {
          partial_sum = partial_sum && global_shape(x) == oshape && current_layout(x) == held &&
                        (h == nullptr || h->inputs.empty());
        }
        if (partial_sum) {
          r.out = held;
          r.in.assign(o.inputs.size(), held);
          return r;
        }
      }
      BlockLayout first;
      bool have_first = false;
      // A weight's gradient summed from two readers (GPT's tied word embedding: the head's
      // part, received from the last stage, and the lookup's) takes the layout of the part
      // written here, the weight's block, rather than the received whole.
      const bool weight_gradient = o.grad_role == ir::GradRole::kWeightGrad;
      for (int pass = weight_gradient ? 0 : 1; pass < 2 && !have_first; ++pass) {
        for (std::size_t i = 0; i < o.inputs.size(); ++i) {
          if (global_shape(o.inputs[i]) != oshape) continue;
          if (pass == 0 && op_stage_[static_cast<std::size_t>(o.inputs[i])] != stage) continue;
          first = operand(i);
          have_first = true;
          break;
        }
      }
      r.out = hout(have_first ? first : [&] { BlockLayout t; t.axes.resize(R); return t; }());
      r.out.partial = 0;
      const bool rowwise = fn == "softmax_grad" || fn == "softmax_cross_entropy_grad";
      if (fn == "softmax_cross_entropy_grad" && R > 0 && o.source != ir::kNoOp && o.inputs.size() == 3) {
        // On the class block its forward read (the rows its statistics hold), whatever the
        // gradient's own spec: the statistics are per row of that block.
        // Only when the forward itself ran on class blocks (a loss that is the graph's
        // meta.loss reads its input whole, whatever layout it was given).
        auto it = used_in_.find(o.source);
        auto split = class_split_.find(o.source);
        if (it != used_in_.end() && split != class_split_.end() && split->second != 0 && !it->second.empty() &&
            it->second[0].axes.size() == R) {
          const BlockLayout& x = it->second[0];
          r.class_split = split->second;
          r.out = x;
          r.out.partial = 0;
          BlockLayout dy, labels;
          if (!map_axes(global_shape(o.inputs[0]), oshape, r.out, true, dy) ||
              !map_axes(global_shape(o.inputs[2]), oshape, r.out, true, labels) ||
              global_shape(o.inputs[1]) != oshape) {
            return fallback_layouts(o, stage);
          }
          r.in = {dy, r.out, labels};
          return r;
        }
      }
      if (rowwise && R > 0) clear_axes(r.out, R - 1);
      const bool reshape = fn == "reshape" || fn == "identity" || fn == "cast";
      for (std::size_t i = 0; i < o.inputs.size(); ++i) {
        const auto& ishape = global_shape(o.inputs[i]);
        BlockLayout l;
        if (ishape == oshape) {
          l = r.out;
        } else if (reshape) {
          std::size_t p = 0;
          while (p < ishape.size() && p < R && ishape[p] == oshape[p]) ++p;
          clear_axes(r.out, p);
          l.axes.assign(ishape.size(), {});
          for (std::size_t a = 0; a < p; ++a) l.axes[a] = r.out.axes[a];
        } else if (map_axes(ishape, oshape, r.out, false, l)) {
        } else if (rowwise && map_axes(ishape, oshape, r.out, true, l)) {
        } else {
          return fallback_layouts(o, stage);
        }
        r.in.push_back(l);
      }
      // A reshape may have cleared axes after the inputs before it were set.
      for (std::size_t i = 0; i < o.inputs.size(); ++i) {
        if (global_shape(o.inputs[i]) == oshape) r.in[i] = r.out;
      }
      return r;
    }
    case OpKind::kSoftmax:
    case OpKind::kNorm: {
      if (o.kind == OpKind::kNorm) {
        const ir::Op& src = o.source != ir::kNoOp ? gf.op(o.source) : o;
        if (src.norm == ir::NormType::kBatchNorm) return fallback_layouts(o, stage);
      }
      r.out = hout(operand(0));
      r.out.partial = 0;
      if (R > 0) clear_axes(r.out, o.kind == OpKind::kSoftmax && R >= 2 ? R - 2 : R - 1);
      for (std::size_t i = 0; i < o.inputs.size(); ++i) {
        const auto& ishape = global_shape(o.inputs[i]);
        BlockLayout l;
        if (ishape == oshape) {
          l = r.out;
        } else {
          l.axes.assign(ishape.size(), {});  // scale, shift: whole
        }
        r.in.push_back(l);
      }
      return r;
    }
    case OpKind::kReduce: {
      const std::string& fn = o.function;
      const auto& ishape = global_shape(o.inputs[0]);
      BlockLayout x = operand(0);
      if (fn == "norm_scale_grad") {
        // Batch-norm statistics are those of the device's rows: keep the forward's groups.
        const ir::Op& src = o.source != ir::kNoOp ? gf.op(o.source) : o;
        if (src.norm == ir::NormType::kBatchNorm) return fallback_layouts(o, stage);
      }
      if (fn == "softmax_cross_entropy" || fn == "norm_scale_grad") {
        // A cross entropy keeps the logits' class axis split (vocab_parallel_cross_entropy:
        // per-row statistics are gathered, never the logits); a norm's scale gradient needs
        // whole rows.
        if (fn == "softmax_cross_entropy" && !ishape.empty()) {
          for (int m : x.axes[ishape.size() - 1]) r.class_split |= 1u << m;
        }
        if (!ishape.empty() && r.class_split == 0) clear_axes(x, ishape.size() - 1);
        r.in.push_back(x);
        for (std::size_t i = 1; i < o.inputs.size(); ++i) {
          BlockLayout l;
          if (global_shape(o.inputs[i]) == ishape) {
            l = x;
          } else if (!map_axes(global_shape(o.inputs[i]), ishape, x, true, l)) {
            return fallback_layouts(o, stage);
          }
          r.in.push_back(l);
        }
        if (fn == "softmax_cross_entropy") {
          if (!map_axes(oshape, ishape, x, true, r.out)) return fallback_layouts(o, stage);
        } else {
          r.out.axes.assign(R, {});
          for (const auto& a : x.axes) {
            for (int m : a) r.out.partial |= 1u << m;
          }
        }
        return r;
      }
      if (fn != "sum" && fn != "mean") return fallback_layouts(o, stage);
      std::int64_t on = 1;
      for (std::int64_t v : oshape) on *= v;
      const bool suffix = R <= ishape.size() && std::equal(oshape.begin(), oshape.end(), ishape.end() - static_cast<std::ptrdiff_t>(R));
      if (on != 1 && !suffix) return fallback_layouts(o, stage);
      const std::size_t lead = on == 1 ? ishape.size() : ishape.size() - R;
      if (fn == "mean") clear_axes(x, 0);  // a mean of local means is not a sum: reduce whole
      r.in = {x};
      r.out.axes.assign(R, {});
      if (on != 1) {
        for (std::size_t a = 0; a < R; ++a) r.out.axes[a] = x.axes[lead + a];
      }
      for (std::size_t a = 0; a < lead; ++a) {
        for (int m : x.axes[a]) r.out.partial |= 1u << m;
      }
      return r;
    }
    case OpKind::kEmbedding: {
      // A table split over its rows only, on mesh axes `rows` (Megatron's
      // VocabParallelEmbedding): each device looks up every token of its batch shard in its
      // block of rows (zero rows for ids outside it), so the lookup's output is a partial sum
      // over `rows`; the gradient is written into the same block, from the tokens' whole
      // gradient. Otherwise the lookup reads the whole table and the gradient is summed whole.
      auto row_split = [&](const BlockLayout& table) -> unsigned {
        unsigned rows = 0;
        for (std::size_t a = 0; a < table.axes.size(); ++a) {
          for (int m : table.axes[a]) {
            if (a != 0) return 0;
            rows |= 1u << m;
          }
        }
        return rows;
      };
      auto without = [](BlockLayout l, unsigned mesh_axes) {
        for (auto& a : l.axes) {
          a.erase(std::remove_if(a.begin(), a.end(), [&](int m) { return (mesh_axes >> m) & 1u; }), a.end());
        }
        return l;
      };
      if (o.function == "gather") {
        BlockLayout table = current(o.inputs[0]);
        const unsigned rows = row_split(table);
        if (rows == 0) table.axes.assign(global_shape(o.inputs[0]).size(), {});
        r.out = hout(current(o.inputs[1]).axes.size() + 1 == R
                         ? [&] { BlockLayout t = current(o.inputs[1]); t.axes.emplace_back(); return t; }()
                         : def_layout(o.id, stage));
        r.out = without(r.out, rows);
        r.out.partial = rows;
        if (R > 0) clear_axes(r.out, R - 1);
        BlockLayout ids;
        if (!map_axes(global_shape(o.inputs[1]), oshape, r.out, true, ids)) return fallback_layouts(o, stage);
        r.in = {table, ids};
        return r;
      }
      if (o.function == "scatter_add") {
        // The table's block: its weight's layout when the weight is this stage's.
        unsigned rows = 0;
        BlockLayout block;
        if (o.source != ir::kNoOp && !gf.op(o.source).inputs.empty()) {
          const OpId table = gf.op(o.source).inputs[0];
          if (gf.op(table).kind == OpKind::kParameter && op_stage_[static_cast<std::size_t>(table)] == stage) {
            block = param_layout(table, stage);
            rows = row_split(block);
          }
        }
        const auto& dshape = global_shape(o.inputs[0]);
        BlockLayout dy = without(operand(0), rows);
        if (!dshape.empty()) clear_axes(dy, dshape.size() - 1);
        BlockLayout ids;
        if (!map_axes(global_shape(o.inputs[1]), dshape, dy, true, ids)) return fallback_layouts(o, stage);
        // A gradient that arrives as a partial sum (the position table's: its tokens' gradient
        // summed over the batch rows each device holds) is scattered as it is, the table's
        // gradient partial over the same axes: summed once, with the other gradients, rather
        // than all-reduced every microbatch. Not where the read splits or re-lays it out.
        const BlockLayout held = current_layout(o.inputs[0]);
        unsigned used = rows;
        for (const auto& a : dy.axes) {
          for (int m : a) used |= 1u << m;
        }
        BlockLayout as_held = held;
        as_held.partial = 0;
        if ((held.partial & used) == 0 && as_held == dy) dy.partial = held.partial;
        r.in = {dy, ids};
        r.out.axes.assign(R, {});
        if (rows != 0 && R > 0) r.out.axes[0] = block.axes[0];
        r.out.partial = dy.partial;
        for (const auto& a : dy.axes) {
          for (int m : a) r.out.partial |= 1u << m;
        }
        return r;
      }
      return fallback_layouts(o, stage);
    }
    default: return fallback_layouts(o, stage);
  }
}

BlockLayout BlockLayouts::param_layout(OpId p, std::int32_t stage) {
  auto it = param_layout_.find(p);
  if (it != param_layout_.end()) return it->second;
  BlockLayout l;
  l.axes.assign(global_shape(p).size(), {});
  const ir::Graph& gf = full_;
  // A spec written on the parameter itself (Megatron plan files write one per operator's
  // output and none for its inputs) is its storage layout; otherwise the first reader's.
  const auto* own = hint_[static_cast<std::size_t>(p)];
  if (own != nullptr && own->output.rank() == static_cast<int>(global_shape(p).size())) {
    l = from_spec(&own->output, p, stage, l);
    l.partial = 0;
    param_layout_[p] = l;
    return l;
  }
  for (const ir::Op& o : gf.ops()) {
    if (op_stage_[static_cast<std::size_t>(o.id)] != stage || o.kind == OpKind::kOptimizer) continue;
    const auto* h = hint_[static_cast<std::size_t>(o.id)];
    bool found = false;
    for (std::size_t i = 0; i < o.inputs.size(); ++i) {
      if (o.inputs[i] != p) continue;
      found = true;
      if (h && i < h->inputs.size()) l = from_spec(&h->inputs[i], p, stage, l);
      break;
    }
    if (found) break;
  }
  l.partial = 0;
  param_layout_[p] = l;
  return l;
}

}  // namespace alpasim::schema

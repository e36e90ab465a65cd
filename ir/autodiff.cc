#include "ir/autodiff.h"

#include <algorithm>

#include "core/check.h"

namespace alpasim::ir {
namespace {

// FLOPs per parameter of one update (estimates for a memory-bound op; the cost model
// times it by bytes). Adam: 2 moment updates (3 + 4), bias-corrected step (4), weight
// decay (1). SGD with momentum: momentum update (2), step (2).
constexpr std::int64_t kAdamFlopsPerParameter = 12;
constexpr std::int64_t kSgdFlopsPerParameter = 4;

bool is_16_bit(core::DType t) { return core::dtype_bytes(t) == 2; }

bool is_block_layer(const Graph& g, std::int32_t layer) {
  if (layer < 0 || static_cast<std::size_t>(layer) >= g.layers.size()) return false;
  const std::string& kind = g.layers[static_cast<std::size_t>(layer)].kind;
  return kind != "prologue" && kind != "epilogue";
}

bool is_linear_unary(const std::string& fn) {
  return fn == "rotary" || fn == "scale" || fn == "cast" || fn == "broadcast" || fn == "identity";
}

class Differentiator {
 public:
  Differentiator(const Graph& forward, const TrainingOptions& options)
      : fwd_(forward), opt_(options), g_(forward), n_(forward.size()) {}

  Graph run() {
    ALPASIM_CHECK(fwd_.meta.loss != kNoOp) << fwd_.meta.model_name << ": graph has no loss";
    ALPASIM_CHECK(!fwd_.meta.has_backward) << "graph already has a backward pass";
    mark_requires_grad();
    mark_recompute();
    grad_.assign(n_, kNoOp);
    const Op& loss = fwd_.op(fwd_.meta.loss);
    OpId seed = g_.add_elementwise(loss.name + "/grad_seed", "ones", {}, 0, loss.layer, {1});
    finish(seed, loss, GradRole::kInputGrad);
    grad_[static_cast<std::size_t>(loss.id)] = seed;
    for (std::size_t i = n_; i-- > 0;) {
      const Op& o = fwd_.op(static_cast<OpId>(i));
      if (grad_[i] == kNoOp || o.is_source() || !needs_[i]) continue;
      backward(o, grad_[i]);
    }
    add_optimizer();
    g_.meta.has_backward = true;
    g_.meta.has_optimizer = true;
    g_.meta.optimizer = std::string(optimizer_kind_name(opt_.optimizer));
    g_.meta.recompute = std::string(recompute_policy_name(opt_.recompute));
    return std::move(g_);
  }

 private:
  void mark_requires_grad() {
    needs_.assign(n_, 0);
    for (const Op& o : fwd_.ops()) {
      if (o.kind == OpKind::kParameter) {
        needs_[static_cast<std::size_t>(o.id)] = 1;
        continue;
      }
      for (std::size_t i = 0; i < o.inputs.size(); ++i) {
        if (o.input_has_grad(i) && needs_[static_cast<std::size_t>(o.inputs[i])]) {
          needs_[static_cast<std::size_t>(o.id)] = 1;
        }
      }
    }
  }

  void mark_recompute() {
    in_r_.assign(n_, 0);
    by_layer_.assign(static_cast<std::size_t>(fwd_.num_layers()), {});
    cloned_layer_.assign(by_layer_.size(), 0);
    clone_.assign(n_, kNoOp);
    for (const Op& o : fwd_.ops()) {
      if (o.is_source() || o.phase != Phase::kForward) continue;
      if (!o.fused_attention && !o.fused_swiglu && !by_policy(o)) continue;
      in_r_[static_cast<std::size_t>(o.id)] = 1;
      by_layer_[static_cast<std::size_t>(o.layer)].push_back(o.id);
    }
  }

  /// Recomputed by the training's recomputation policy (not only by a fused kernel).
  bool by_policy(const Op& o) const {
    return opt_.recompute == RecomputePolicy::kSelective ? o.selective_recompute
           : opt_.recompute == RecomputePolicy::kFull    ? is_block_layer(fwd_, o.layer)
                                                         : false;
  }

  bool same_region(OpId a, OpId b) const {
    return in_r_[static_cast<std::size_t>(a)] && in_r_[static_cast<std::size_t>(b)] &&
           fwd_.op(a).layer == fwd_.op(b).layer;
  }

  /// Re-runs the ops of `layer`'s recompute region that `keep` selects (in id order), each
  /// once; an input in the region reads its recomputed copy.
  template <typename Keep>
  void clone_region(std::int32_t layer, Keep keep) {
    for (OpId id : by_layer_[static_cast<std::size_t>(layer)]) {
      if (clone_[static_cast<std::size_t>(id)] != kNoOp || !keep(fwd_.op(id))) continue;
      Op c = fwd_.op(id);
      c.phase = Phase::kRecompute;
      c.source = id;
      c.name += "/recompute";
      for (OpId& in : c.inputs) {
        if (!same_region(id, in)) continue;
        ALPASIM_CHECK(clone_[static_cast<std::size_t>(in)] != kNoOp)
            << fwd_.op(id).name << " is recomputed before its input " << fwd_.op(in).name;
        in = clone_[static_cast<std::size_t>(in)];
      }
      clone_[static_cast<std::size_t>(id)] = g_.add(std::move(c));
    }
  }

  /// Re-runs the whole recompute region of `layer` (the policy's: Megatron recomputes a
  /// layer's forward, or its attention core, where its backward starts), once.
  void ensure_clones(std::int32_t layer) {
    auto l = static_cast<std::size_t>(layer);
    if (cloned_layer_[l]) return;
    cloned_layer_[l] = 1;
    clone_region(layer, [](const Op&) { return true; });
  }

  /// The tensor a backward op of forward op `user` reads in place of forward tensor `t`:
  /// the recomputed copy when both lie in the same recompute region, or when `t` is one
  /// of a fused kernel's recomputed tensors (a flash attention's backward, attention x V's
  /// included, reads the probabilities it recomputes; a fused SwiGLU's, the SiLU), else
  /// the stash. A fused kernel's tensors the policy does not recompute are recomputed where
  /// that kernel's backward runs (only that kernel's ops: a SwiGLU backward does not
  /// recompute the attention scores, which would then be held through the MLP's backward).
  OpId fwd_tensor(const Op& user, OpId t) {
    const Op& produced = fwd_.op(t);
    const bool fused = (produced.fused_attention || produced.fused_swiglu) && in_r_[static_cast<std::size_t>(t)] &&
                       produced.layer == user.layer;
    if (!fused && !same_region(user.id, t)) return t;
    if (by_policy(produced)) {
      ensure_clones(user.layer);
    } else {
      clone_region(user.layer, [&](const Op& o) {
        return !by_policy(o) && o.fused_attention == produced.fused_attention && o.fused_swiglu == produced.fused_swiglu;
      });
    }
    return clone_[static_cast<std::size_t>(t)];
  }

  void finish(OpId id, const Op& source, GradRole role) {
    Op& o = g_.mutable_op(id);
    o.phase = Phase::kBackward;
    o.layer = source.layer;
    o.source = source.id;
    o.grad_role = role;
  }

  GradRole role_for(OpId input) const {
    return fwd_.op(input).kind == OpKind::kParameter ? GradRole::kWeightGrad
                                                     : GradRole::kInputGrad;
  }

  bool wants_grad(const Op& o, std::size_t i) const {
    return o.input_has_grad(i) && needs_[static_cast<std::size_t>(o.inputs[i])];
  }

  void accumulate(OpId t, OpId g, const Op& source) {
    OpId& slot = grad_[static_cast<std::size_t>(t)];
    if (slot == kNoOp) {
      slot = g;
      return;
    }
    OpId sum = g_.add_elementwise(fwd_.op(t).name + "/grad_sum", "add", {slot, g}, 1,
                                  source.layer);
    finish(sum, source, role_for(t));
    slot = sum;
  }

  /// Sums `g` (shaped like `source`'s output) down to the shape of input `t` when the
  /// forward op broadcast it, then accumulates.
  void accumulate_broadcast(OpId t, OpId g, const Op& source, const std::string& what) {
    const auto& shape = fwd_.op(t).out.shape;
    if (g_.op(g).out.shape != shape) {
      g = g_.add_reduce(source.name + "/" + what + "_reduce", "sum", {g}, shape, 1, source.layer);
      finish(g, source, role_for(t));
    }
    accumulate(t, g, source);
  }

  OpId ew(const Op& src, OpId target, const std::string& suffix, std::string fn,
          std::vector<OpId> in, std::int64_t fpe, std::vector<std::int64_t> shape) {
    OpId id = g_.add_elementwise(src.name + "/" + suffix, std::move(fn), std::move(in), fpe,
                                 src.layer, std::move(shape), fwd_.op(target).out.dtype);
    finish(id, src, role_for(target));
    return id;
  }

  void backward(const Op& o, OpId dy) {
    const auto out_elems = std::max<std::int64_t>(1, o.out.num_elements());
    switch (o.kind) {
      case OpKind::kDot:
      case OpKind::kMoeDispatch:
      case OpKind::kMoeCombine: backward_einsum(o, dy); break;
      case OpKind::kConv2d: backward_conv(o, dy); break;
      case OpKind::kElementwise: backward_elementwise(o, dy, o.flops / out_elems); break;
      case OpKind::kReduce: {
        const OpId x = o.inputs[0];
        if (!wants_grad(o, 0)) break;
        const auto& shape = fwd_.op(x).out.shape;
        OpId d = o.function == "softmax_cross_entropy"
                     ? ew(o, x, "grad_logits", "softmax_cross_entropy_grad",
                          {dy, fwd_tensor(o, x), fwd_tensor(o, o.inputs[1])}, 5, shape)
                     : ew(o, x, "grad_in", "broadcast", {dy}, 1, shape);
        if (o.function == "softmax_cross_entropy") {
          const TensorType& logits = fwd_.op(x).out;
          const LogitTraffic t = cross_entropy_logit_traffic(o.loss_kernel, logits.element_bytes(),
                                                             logits.num_elements(), Phase::kBackward);
          Op& grad = g_.mutable_op(d);
          grad.bytes_read = t.read + g_.op(dy).out.bytes() + fwd_.op(o.inputs[1]).out.bytes();
          grad.bytes_written = t.written;
        }
        accumulate(x, d, o);
        break;
      }
      case OpKind::kSoftmax: {
        if (!wants_grad(o, 0)) break;
        OpId d = ew(o, o.inputs[0], "grad_in", "softmax_grad", {dy, fwd_tensor(o, o.id)}, 3,
                    o.out.shape);
        accumulate(o.inputs[0], d, o);
        break;
      }
      case OpKind::kNorm: backward_norm(o, dy); break;
      case OpKind::kEmbedding: {
        if (!wants_grad(o, 0)) break;
        const OpId table = o.inputs[0];
        Op d;
        d.kind = OpKind::kEmbedding;
        d.name = o.name + "/grad_table";
        d.function = "scatter_add";
        d.inputs = {dy, fwd_tensor(o, o.inputs[1])};
        d.out = fwd_.op(table).out;
        d.flops = g_.op(dy).out.num_elements();
        d.bytes_read = g_.op(dy).out.bytes() + g_.op(o.inputs[1]).out.bytes();
        d.bytes_written = d.out.bytes();  // the dense gradient buffer
        OpId id = g_.add(std::move(d));
        finish(id, o, role_for(table));
        accumulate(table, id, o);
        break;
      }
      case OpKind::kPool: {
        if (!wants_grad(o, 0)) break;
        OpId id = ew(o, o.inputs[0], "grad_in", "max_pool_grad", {dy, fwd_tensor(o, o.inputs[0])},
                     1, fwd_.op(o.inputs[0]).out.shape);
        g_.mutable_op(id).kind = OpKind::kPool;
        accumulate(o.inputs[0], id, o);
        break;
      }
      case OpKind::kMoeGate: {
        if (!wants_grad(o, 0)) break;
        OpId id = g_.add_reduce(o.name + "/grad_in", "moe_gate_grad",
                                {dy, fwd_tensor(o, o.inputs[0])}, fwd_.op(o.inputs[0]).out.shape, 2,
                                o.layer);
        finish(id, o, GradRole::kInputGrad);
        accumulate(o.inputs[0], id, o);
        break;
      }
      case OpKind::kParameter:
      case OpKind::kInput:
      case OpKind::kOptimizer: break;
    }
  }

  void backward_einsum(const Op& o, OpId dy) {
    const DotSpec& s = o.dot;
    const std::string d_out = s.out;
    // Gradient w.r.t. an expert-sharded operand of dispatch is a combine and vice versa:
    // both keep the all-to-all shape (GShard).
    auto grad_kind = [&](bool lhs) {
      if (o.kind == OpKind::kMoeDispatch) return OpKind::kMoeCombine;
      if (o.kind == OpKind::kMoeCombine) return lhs ? OpKind::kMoeCombine : OpKind::kMoeDispatch;
      return OpKind::kDot;
    };
    if (wants_grad(o, 0)) {
      const OpId a = o.inputs[0];
      OpId id = g_.add_einsum(o.name + "/grad_lhs", grad_kind(true), d_out + "," + s.rhs + "->" + s.lhs,
                              dy, fwd_tensor(o, o.inputs[1]), kNoOp, o.layer);
      finish(id, o, role_for(a));
      accumulate(a, id, o);
    }
    if (wants_grad(o, 1)) {
      const OpId b = o.inputs[1];
      OpId id = g_.add_einsum(o.name + "/grad_rhs", grad_kind(false), s.lhs + "," + d_out + "->" + s.rhs,
                              fwd_tensor(o, o.inputs[0]), dy, kNoOp, o.layer);
      finish(id, o, role_for(b));
      accumulate(b, id, o);
    }
    if (o.inputs.size() > 2 && wants_grad(o, 2)) {
      const OpId bias = o.inputs[2];
      OpId id = g_.add_reduce(o.name + "/grad_bias", "sum", {dy}, fwd_.op(bias).out.shape, 1, o.layer);
      finish(id, o, role_for(bias));
      accumulate(bias, id, o);
    }
  }

  void backward_conv(const Op& o, OpId dy) {
    auto emit = [&](std::size_t which, ConvSpec::Variant variant, std::vector<OpId> in,
                    const std::string& suffix) {
      const OpId target = o.inputs[which];
      Op d;
      d.kind = OpKind::kConv2d;
      d.name = o.name + "/" + suffix;
      d.conv = o.conv;
      d.conv.variant = variant;
      d.dot_dims = o.dot_dims;
      d.flops = o.flops;
      d.out = fwd_.op(target).out;
      for (OpId i : in) d.bytes_read += g_.op(i).out.bytes();
      d.inputs = std::move(in);
      d.bytes_written = d.out.bytes();
      OpId id = g_.add(std::move(d));
      finish(id, o, role_for(target));
      accumulate(target, id, o);
    };
    if (wants_grad(o, 0)) {
      emit(0, ConvSpec::Variant::kGradInput, {dy, fwd_tensor(o, o.inputs[1])}, "grad_input");
    }
    if (wants_grad(o, 1)) {
      emit(1, ConvSpec::Variant::kGradFilter, {fwd_tensor(o, o.inputs[0]), dy}, "grad_filter");
    }
  }

  void backward_elementwise(const Op& o, OpId dy, std::int64_t fpe) {
    const std::string& fn = o.function;
    for (std::size_t i = 0; i < o.inputs.size(); ++i) {
      if (!wants_grad(o, i)) continue;
      const OpId x = o.inputs[i];
      const std::string which = "grad_in" + std::to_string(i);
      if (fn == "add") {
        accumulate_broadcast(x, dy, o, which);
      } else if (fn == "mul") {
        const OpId other = o.inputs[1 - i];
        OpId d = ew(o, x, which, "mul", {dy, fwd_tensor(o, other)}, 1, o.out.shape);
        accumulate_broadcast(x, d, o, which);
      } else if (fn == "reshape" || fn == "transpose") {
        // The inverse view (reshape: free) or the inverse permutation (moves the data).
        OpId d = ew(o, x, which, fn, {dy}, 0, fwd_.op(x).out.shape);
        if (fn == "reshape") {
          g_.mutable_op(d).bytes_read = 0;
          g_.mutable_op(d).bytes_written = 0;
        }
        accumulate(x, d, o);
      } else if (is_linear_unary(fn)) {
        OpId d = ew(o, x, which, fn + "_grad", {dy}, fpe, o.out.shape);
        accumulate_broadcast(x, d, o, which);
      } else {
        // Nonlinear pointwise functions (gelu, silu, relu, ...) need their input.
        OpId d = ew(o, x, which, fn + "_grad", {dy, fwd_tensor(o, x)}, fpe + 1, o.out.shape);
        if (fn == "squared_relu") {
          // As the forward (ir/builders.cc), two kernels: pow's backward reads dy and
          // relu(x) and writes 2·relu(x)·dy; relu's reads that and relu(x), writes dx.
          const std::int64_t bytes = g_.op(dy).out.bytes();
          g_.mutable_op(d).bytes_read = 4 * bytes;
          g_.mutable_op(d).bytes_written = 2 * bytes;
        }
        accumulate_broadcast(x, d, o, which);
      }
    }
  }

  void backward_norm(const Op& o, OpId dy) {
    const OpId x = o.inputs[0];
    const OpId xs = fwd_tensor(o, x);
    const std::int64_t fpe = o.flops / std::max<std::int64_t>(1, o.out.num_elements());
    if (wants_grad(o, 0)) {
      OpId d = ew(o, x, "grad_in", std::string(norm_type_name(o.norm)) + "_grad",
                  {dy, xs, o.inputs[1]}, fpe + 2, o.out.shape);
      Op& op = g_.mutable_op(d);
      op.kind = OpKind::kNorm;
      op.norm = o.norm;
      accumulate(x, d, o);
    }
    if (wants_grad(o, 1)) {
      OpId d = g_.add_reduce(o.name + "/grad_scale", "norm_scale_grad", {dy, xs},
                             fwd_.op(o.inputs[1]).out.shape, 2, o.layer);
      finish(d, o, role_for(o.inputs[1]));
      accumulate(o.inputs[1], d, o);
    }
    if (o.inputs.size() > 2 && wants_grad(o, 2)) {
      OpId d = g_.add_reduce(o.name + "/grad_shift", "sum", {dy}, fwd_.op(o.inputs[2]).out.shape, 1,
                             o.layer);
      finish(d, o, role_for(o.inputs[2]));
      accumulate(o.inputs[2], d, o);
    }
  }

  void add_optimizer() {
    const bool mixed = is_16_bit(fwd_.meta.dtype);
    for (const Op& p : fwd_.ops()) {
      if (p.kind != OpKind::kParameter) continue;
      const OpId grad = grad_[static_cast<std::size_t>(p.id)];
      if (grad == kNoOp) continue;  // unused parameter
      const std::int64_t n = p.out.num_elements();
      const std::int64_t wb = p.out.element_bytes();
      Op u;
      u.kind = OpKind::kOptimizer;
      u.phase = Phase::kOptimizer;
      u.name = p.name + "/update";
      u.layer = p.layer;
      u.source = p.id;
      u.inputs = {p.id, grad};
      u.out = p.out;
      const std::int64_t state = optimizer_state_bytes_per_parameter(opt_.optimizer, fwd_.meta.dtype);
      if (opt_.optimizer == OptimizerKind::kAdam) {
        u.function = "adam";
        u.flops = kAdamFlopsPerParameter * n;
      } else {
        u.function = "sgd_momentum";
        u.flops = kSgdFlopsPerParameter * n;
      }
      // Reads the gradient, the weights (the fp32 master copy when mixed, which is part
      // of `state`) and the states; writes the states and the weights.
      u.bytes_read = n * (wb + state + (mixed ? 0 : wb));
      u.bytes_written = n * (state + wb);
      g_.add(std::move(u));
    }
  }

  const Graph& fwd_;
  TrainingOptions opt_;
  Graph g_;
  std::size_t n_;
  std::vector<char> needs_;
  std::vector<char> in_r_;
  std::vector<std::vector<OpId>> by_layer_;
  std::vector<char> cloned_layer_;
  std::vector<OpId> clone_;
  std::vector<OpId> grad_;
};

}  // namespace

std::string_view recompute_policy_name(RecomputePolicy r) {
  switch (r) {
    case RecomputePolicy::kNone: return "none";
    case RecomputePolicy::kSelective: return "selective";
    case RecomputePolicy::kFull: return "full";
  }
  return "?";
}

std::string_view optimizer_kind_name(OptimizerKind o) {
  return o == OptimizerKind::kAdam ? "adam" : "sgd";
}

bool parse_recompute_policy(std::string_view name, RecomputePolicy* out) {
  for (auto r : {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    if (recompute_policy_name(r) == name) {
      *out = r;
      return true;
    }
  }
  return false;
}

bool parse_optimizer_kind(std::string_view name, OptimizerKind* out) {
  for (auto o : {OptimizerKind::kAdam, OptimizerKind::kSgd}) {
    if (optimizer_kind_name(o) == name) {
      *out = o;
      return true;
    }
  }
  return false;
}

std::int64_t optimizer_state_bytes_per_parameter(OptimizerKind o, core::DType dtype) {
  const std::int64_t master = is_16_bit(dtype) ? 4 : 0;  // fp32 master weights
  return master + (o == OptimizerKind::kAdam ? 8 : 4);   // 2 fp32 moments or 1 fp32 momentum
}

std::int64_t mixed_precision_step_bytes_per_parameter(core::DType dtype) {
  if (dtype == core::DType::kFp16) return 2 + 6 + 8 + 4 + 6;
  if (dtype == core::DType::kBf16) return 4 + 4 + 6;
  return 0;
}

std::int64_t gradient_accumulation_bytes_per_parameter(core::DType dtype) {
  const std::int64_t buffer = dtype == core::DType::kBf16 ? 4 : core::dtype_bytes(dtype);
  return core::dtype_bytes(dtype) + 2 * buffer;
}

Graph derive_training_graph(const Graph& forward, const TrainingOptions& options) {
  return Differentiator(forward, options).run();
}

}  // namespace alpasim::ir

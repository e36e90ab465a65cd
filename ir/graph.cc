#include "ir/graph.h"

#include <algorithm>
#include <array>
#include <iterator>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/topological_sort.hpp>

#include "core/check.h"

namespace alpasim::ir {
namespace {

// Per-element FLOP estimates of the memory-bound operators. They only feed "total FLOPs"
// (which no published formula counts) and never the matmul FLOPs of Megatron's
// formulas; the cost model times these ops by bytes moved, not by FLOPs.
constexpr std::int64_t kSoftmaxFlopsPerElement = 5;    // max, subtract, exp, sum, divide
constexpr std::int64_t kLayerNormFlopsPerElement = 8;  // mean, var (2), normalize (3), affine (2)
constexpr std::int64_t kRmsNormFlopsPerElement = 5;    // square, mean, rsqrt-scale (2), affine
constexpr std::int64_t kBatchNormFlopsPerElement = 8;  // as layer-norm, over n·h·w per channel

using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

BoostGraph to_boost(const Graph& g) {
  BoostGraph bg(g.size());
  for (const Op& op : g.ops()) {
    for (OpId in : op.inputs) {
      boost::add_edge(static_cast<std::size_t>(in), static_cast<std::size_t>(op.id), bg);
    }
  }
  return bg;
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kParameter: return "parameter";
    case OpKind::kInput: return "input";
    case OpKind::kDot: return "dot";
    case OpKind::kConv2d: return "conv2d";
    case OpKind::kElementwise: return "elementwise";
    case OpKind::kReduce: return "reduce";
    case OpKind::kSoftmax: return "softmax";
    case OpKind::kNorm: return "norm";
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kPool: return "max_pool";
    case OpKind::kMoeGate: return "moe_gate";
    case OpKind::kMoeDispatch: return "moe_dispatch";
    case OpKind::kMoeCombine: return "moe_combine";
    case OpKind::kOptimizer: return "optimizer";
  }
  return "?";
}

std::string_view phase_name(Phase phase) {
  switch (phase) {
    case Phase::kForward: return "forward";
    case Phase::kRecompute: return "recompute";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
  }
  return "?";
}

std::string_view norm_type_name(NormType type) {
  switch (type) {
    case NormType::kLayerNorm: return "layer_norm";
    case NormType::kRmsNorm: return "rms_norm";
    case NormType::kBatchNorm: return "batch_norm";
  }
  return "?";
}

std::string_view loss_kernel_name(LossKernel kernel) {
  switch (kernel) {
    case LossKernel::kUnfused: return "unfused";
    case LossKernel::kNativeFused: return "native";
    case LossKernel::kTeFused: return "te";
  }
  return "?";
}

std::int64_t TensorType::num_elements() const { return product(shape); }

std::optional<DotSpec> parse_dot_spec(std::string_view text) {
  const auto arrow = text.find("->");
  const auto comma = text.find(',');
  if (arrow == std::string_view::npos || comma == std::string_view::npos || comma > arrow) {
    return std::nullopt;
  }
  DotSpec spec{std::string(text.substr(0, comma)),
               std::string(text.substr(comma + 1, arrow - comma - 1)),
               std::string(text.substr(arrow + 2))};
  for (const std::string* term : {&spec.lhs, &spec.rhs, &spec.out}) {
    std::array<bool, 256> seen{};
    for (char c : *term) {
      const auto u = static_cast<unsigned char>(c);
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) || seen[u]) return std::nullopt;
      seen[u] = true;
    }
  }
  auto count = [&](char c) {
    return (spec.lhs.find(c) != std::string::npos ? 1 : 0) +
           (spec.rhs.find(c) != std::string::npos ? 1 : 0) +
           (spec.out.find(c) != std::string::npos ? 1 : 0);
  };
  for (const std::string* term : {&spec.lhs, &spec.rhs, &spec.out}) {
    for (char c : *term) {
      if (count(c) < 2) return std::nullopt;
    }
  }
  return spec;
}

std::string dot_spec_string(const DotSpec& spec) {
  return spec.lhs + "," + spec.rhs + "->" + spec.out;
}

DotDimClass dot_dim_class(const DotSpec& spec, char c) {
  const bool l = spec.lhs.find(c) != std::string::npos;
  const bool r = spec.rhs.find(c) != std::string::npos;
  const bool o = spec.out.find(c) != std::string::npos;
  if (l && r && o) return DotDimClass::kBatch;
  if (l && r) return DotDimClass::kContracting;
  if (l) return DotDimClass::kLhsFree;
  ALPASIM_CHECK(r && o) << "letter " << c << " of " << dot_spec_string(spec);
  return DotDimClass::kRhsFree;
}

OpId Graph::add(Op op) {
  op.id = static_cast<OpId>(ops_.size());
  for (OpId in : op.inputs) {
    ALPASIM_CHECK(in >= 0 && in < op.id) << op.name << ": input " << in << " does not exist";
    consumers_[static_cast<std::size_t>(in)].push_back(op.id);
  }
  ops_.push_back(std::move(op));
  consumers_.emplace_back();
  return ops_.back().id;
}

OpId Graph::add_parameter(std::string name, std::vector<std::int64_t> shape, std::int32_t layer) {
  Op op;
  op.kind = OpKind::kParameter;
  op.name = std::move(name);
  op.out = {std::move(shape), meta.dtype, false};
  op.layer = layer;
  return add(std::move(op));
}

OpId Graph::add_input(std::string name, std::vector<std::int64_t> shape, bool is_index,
                      std::int32_t layer) {
  Op op;
  op.kind = OpKind::kInput;
  op.name = std::move(name);
  op.out = {std::move(shape), meta.dtype, is_index};
  op.layer = layer;
  return add(std::move(op));
}

OpId Graph::add_einsum(std::string name, OpKind kind, std::string_view spec_text, OpId lhs,
                       OpId rhs, OpId bias, std::int32_t layer) {
  auto spec = parse_dot_spec(spec_text);
  ALPASIM_CHECK(spec.has_value()) << name << ": bad einsum " << spec_text;
  const TensorType& a = op(lhs).out;
  const TensorType& b = op(rhs).out;
  ALPASIM_CHECK(a.shape.size() == spec->lhs.size() && b.shape.size() == spec->rhs.size())
      << name << ": einsum " << spec_text << " does not match operand ranks";
  std::array<std::int64_t, 256> size{};
  auto bind = [&](const std::string& labels, const std::vector<std::int64_t>& shape) {
    for (std::size_t i = 0; i < labels.size(); ++i) {
      auto& s = size[static_cast<unsigned char>(labels[i])];
      ALPASIM_CHECK(s == 0 || s == shape[i])
          << name << ": dim " << labels[i] << " is " << s << " and " << shape[i];
      s = shape[i];
    }
  };
  bind(spec->lhs, a.shape);
  bind(spec->rhs, b.shape);
  Op o;
  o.kind = kind;
  o.name = std::move(name);
  o.dot = *spec;
  o.layer = layer;
  o.inputs = {lhs, rhs};
  o.out.dtype = a.is_index ? meta.dtype : a.dtype;
  for (char c : spec->out) o.out.shape.push_back(size[static_cast<unsigned char>(c)]);
  std::string all = spec->lhs + spec->rhs;
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  std::int64_t loops = 1;
  for (char c : all) {
    const std::int64_t s = size[static_cast<unsigned char>(c)];
    loops *= s;
    switch (dot_dim_class(*spec, c)) {
      case DotDimClass::kBatch: o.dot_dims.batch *= s; break;
      case DotDimClass::kLhsFree: o.dot_dims.m *= s; break;
      case DotDimClass::kRhsFree: o.dot_dims.n *= s; break;
      case DotDimClass::kContracting: o.dot_dims.k *= s; break;
    }
  }
  o.flops = 2 * loops;  // one multiply-add per point of the loop nest
  o.bytes_read = a.bytes() + b.bytes();
  if (bias != kNoOp) {
    const TensorType& c = op(bias).out;
    ALPASIM_CHECK(c.shape.size() <= o.out.shape.size() &&
                  std::equal(c.shape.rbegin(), c.shape.rend(), o.out.shape.rbegin()))
        << o.name << ": bias shape is not a suffix of the output shape";
    o.inputs.push_back(bias);
    // The fused bias add is not counted, as in Megatron's and Alpa's FLOP formulas
    // (out.num_elements() FLOPs, < 1/(2K) of the dot).
    o.bytes_read += c.bytes();
  }
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

OpId Graph::add_conv2d(std::string name, OpId x, OpId filter, std::int64_t stride,
                       std::int32_t layer) {
  const TensorType& in = op(x).out;
  const TensorType& f = op(filter).out;
  ALPASIM_CHECK(in.shape.size() == 4 && f.shape.size() == 4 && in.shape[3] == f.shape[2])
      << name << ": conv2d needs NHWC input and HWIO filter with matching channels";
  Op o;
  o.kind = OpKind::kConv2d;
  o.name = std::move(name);
  o.layer = layer;
  o.inputs = {x, filter};
  o.conv = {ConvSpec::Variant::kForward, in.shape[0], in.shape[1], in.shape[2], in.shape[3],
            f.shape[3], f.shape[0], f.shape[1], stride};
  o.out = {{o.conv.n, o.conv.out_h(), o.conv.out_w(), o.conv.co}, in.dtype, false};
  o.dot_dims = o.conv.gemm_dims();
  o.flops = 2 * o.dot_dims.m * o.dot_dims.n * o.dot_dims.k;
  o.bytes_read = in.bytes() + f.bytes();
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

OpId Graph::add_elementwise(std::string name, std::string function, std::vector<OpId> inputs,
                            std::int64_t flops_per_element, std::int32_t layer,
                            std::vector<std::int64_t> out_shape,
                            std::optional<core::DType> out_dtype) {
  Op o;
  o.kind = OpKind::kElementwise;
  o.name = std::move(name);
  o.function = std::move(function);
  o.layer = layer;
  if (out_shape.empty()) {
    ALPASIM_CHECK(!inputs.empty()) << o.name << ": elementwise op without shape";
    out_shape = op(inputs[0]).out.shape;
  }
  o.out = {std::move(out_shape),
           out_dtype ? *out_dtype : (inputs.empty() ? meta.dtype : op(inputs[0]).out.dtype),
           false};
  for (OpId in : inputs) o.bytes_read += op(in).out.bytes();
  o.inputs = std::move(inputs);
  o.flops = flops_per_element * o.out.num_elements();
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

OpId Graph::add_reduce(std::string name, std::string function, std::vector<OpId> inputs,
                       std::vector<std::int64_t> out_shape, std::int64_t flops_per_element,
                       std::int32_t layer, std::optional<core::DType> out_dtype) {
  ALPASIM_CHECK(!inputs.empty()) << name << ": reduce without input";
  Op o;
  o.kind = OpKind::kReduce;
  o.name = std::move(name);
  o.function = std::move(function);
  o.layer = layer;
  o.out = {std::move(out_shape), out_dtype ? *out_dtype : op(inputs[0]).out.dtype, false};
  for (OpId in : inputs) o.bytes_read += op(in).out.bytes();
  o.flops = flops_per_element * op(inputs[0]).out.num_elements();
  o.inputs = std::move(inputs);
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

OpId Graph::add_softmax_cross_entropy(std::string name, OpId logits, OpId labels, LossKernel kernel,
                                      std::int32_t layer) {
  const std::vector<std::int64_t>& shape = op(logits).out.shape;
  ALPASIM_CHECK(!shape.empty()) << name << ": logits without a vocabulary axis";
  std::vector<std::int64_t> per_position(shape.begin(), shape.end() - 1);
  if (per_position.empty()) per_position = {1};
  // softmax (max, subtract, exp, sum) and the label's log-probability
  constexpr std::int64_t kCrossEntropyFlopsPerLogit = 5;
  const OpId ce = add_reduce(std::move(name), "softmax_cross_entropy", {logits, labels}, std::move(per_position),
                             kCrossEntropyFlopsPerLogit, layer);
  mutable_op(ce).no_grad_inputs = 1u << 1;
  set_loss_kernel(ce, kernel);
  return ce;
}

LogitTraffic cross_entropy_logit_traffic(LossKernel kernel, std::int64_t logit_bytes, std::int64_t logits,
                                         Phase phase) {
  ALPASIM_CHECK(phase == Phase::kForward || phase == Phase::kBackward) << "a loss runs forward or backward";
  const bool forward = phase == Phase::kForward;
  const std::int64_t fp32 = core::dtype_bytes(core::DType::kFp32);
  // Megatron starts with logits.float(), a copy unless they are fp32 already; autograd
  // casts the gradient back.
  const bool copied = logit_bytes < fp32;
  std::int64_t read = 0, written = 0;  // per logit
  if (kernel == LossKernel::kTeFused) {
    // forward: an online-softmax pass, then a pass writing the gradient over the logits;
    // backward: that gradient scaled in place
    read = (forward ? 2 : 1) * logit_bytes;
    written = logit_bytes;
  } else if (!forward) {
    // unfused and native alike: the saved softmax scaled in place (the label's entry
    // corrected first, per position), then cast back to the logits' type
    read = (copied ? 2 : 1) * fp32;
    written = copied ? fp32 + logit_bytes : fp32;
  } else if (kernel == LossKernel::kUnfused) {
    // the copy; max, subtract, exp, sum and divide each read it, and subtract, exp and
    // divide write it in place (megatron/core/tensor_parallel/cross_entropy.py)
    read = (copied ? logit_bytes : 0) + 5 * fp32;
    written = (copied ? fp32 : 0) + 3 * fp32;
  } else {
    // jit-fused: the max read with the copy, subtract with exp, then sum, then divide
    // (megatron/core/fusions/fused_cross_entropy.py)
    read = logit_bytes + 3 * fp32;
    written = (copied ? fp32 : 0) + 2 * fp32;
  }
  return {read * logits, written * logits};
}

void Graph::set_loss_kernel(OpId cross_entropy, LossKernel kernel) {
  Op& o = mutable_op(cross_entropy);
  ALPASIM_CHECK(o.function == "softmax_cross_entropy" && o.inputs.size() == 2) << o.name << ": not a cross entropy";
  const TensorType& in = op(o.inputs[0]).out;
  const LogitTraffic t = cross_entropy_logit_traffic(kernel, in.element_bytes(), in.num_elements(), Phase::kForward);
  o.loss_kernel = kernel;
  o.bytes_read = t.read + op(o.inputs[1]).out.bytes();  // and the labels
  o.bytes_written = t.written + o.out.bytes();          // and the per-position loss
}

OpId Graph::add_softmax(std::string name, OpId x, std::int32_t layer) {
  Op o;
  o.kind = OpKind::kSoftmax;
  o.name = std::move(name);
  o.function = "softmax";
  o.layer = layer;
  o.inputs = {x};
  o.out = op(x).out;
  o.flops = kSoftmaxFlopsPerElement * o.out.num_elements();
  o.bytes_read = op(x).out.bytes();
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

OpId Graph::add_norm(std::string name, NormType type, OpId x, OpId gamma, OpId beta,
                     std::int32_t layer) {
  Op o;
  o.kind = OpKind::kNorm;
  o.name = std::move(name);
  o.function = std::string(norm_type_name(type));
  o.norm = type;
  o.layer = layer;
  o.inputs = {x, gamma};
  if (beta != kNoOp) o.inputs.push_back(beta);
  o.out = op(x).out;
  const std::int64_t per = type == NormType::kRmsNorm     ? kRmsNormFlopsPerElement
                           : type == NormType::kLayerNorm ? kLayerNormFlopsPerElement
                                                          : kBatchNormFlopsPerElement;
  o.flops = per * o.out.num_elements();
  for (OpId in : o.inputs) o.bytes_read += op(in).out.bytes();
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

OpId Graph::add_embedding(std::string name, OpId table, OpId ids, std::int32_t layer) {
  const TensorType& t = op(table).out;
  ALPASIM_CHECK(t.shape.size() == 2) << name << ": embedding table must be 2-D";
  Op o;
  o.kind = OpKind::kEmbedding;
  o.name = std::move(name);
  o.function = "gather";
  o.layer = layer;
  o.inputs = {table, ids};
  o.no_grad_inputs = 1u << 1;
  o.out = {op(ids).out.shape, t.dtype, false};
  o.out.shape.push_back(t.shape[1]);
  // A gather touches only the selected rows, not the whole table.
  o.bytes_read = o.out.bytes() + op(ids).out.bytes();
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

OpId Graph::add_max_pool(std::string name, OpId x, std::int64_t window, std::int64_t stride,
                         std::int32_t layer) {
  const TensorType& in = op(x).out;
  ALPASIM_CHECK(in.shape.size() == 4) << name << ": max_pool needs NHWC input";
  Op o;
  o.kind = OpKind::kPool;
  o.name = std::move(name);
  o.function = "max";
  o.layer = layer;
  o.inputs = {x};
  o.pool_window = window;
  o.pool_stride = stride;
  o.out = {{in.shape[0], (in.shape[1] + stride - 1) / stride, (in.shape[2] + stride - 1) / stride,
            in.shape[3]},
           in.dtype, false};
  o.flops = window * window * o.out.num_elements();
  o.bytes_read = in.bytes();
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

OpId Graph::add_moe_gate(std::string name, OpId probs, std::int64_t top_k, std::int64_t capacity,
                         std::int32_t layer) {
  const TensorType& p = op(probs).out;
  ALPASIM_CHECK(p.shape.size() == 3) << name << ": gate probabilities must be [g, s, e]";
  Op o;
  o.kind = OpKind::kMoeGate;
  o.name = std::move(name);
  o.function = "top" + std::to_string(top_k);
  o.layer = layer;
  o.inputs = {probs};
  o.out = {{p.shape[0], p.shape[1], p.shape[2], capacity}, p.dtype, false};
  // Per token and chosen expert: a pass over e probabilities (argmax), a position
  // cumulative sum and a write of the one-hot row: ~2·e·top_k.
  o.flops = 2 * p.shape[0] * p.shape[1] * p.shape[2] * top_k;
  o.bytes_read = p.bytes();
  o.bytes_written = o.out.bytes();
  return add(std::move(o));
}

std::vector<OpId> Graph::topological_order() const {
  BoostGraph bg = to_boost(*this);
  std::vector<std::size_t> reversed;
  reversed.reserve(size());
  boost::topological_sort(bg, std::back_inserter(reversed));
  std::vector<OpId> order(reversed.rbegin(), reversed.rend());
  std::vector<OpId> ids;
  ids.reserve(order.size());
  for (auto v : order) ids.push_back(static_cast<OpId>(v));
  return ids;
}

std::vector<std::int32_t> Graph::bfs_depth() const {
  // A virtual root (vertex `size()`) feeds every op without inputs, so one BFS from it
  // gives each op its shortest hop count from any source, minus one.
  BoostGraph bg = to_boost(*this);
  const std::size_t root = boost::add_vertex(bg);
  for (const Op& o : ops_) {
    if (o.inputs.empty()) boost::add_edge(root, static_cast<std::size_t>(o.id), bg);
  }
  std::vector<std::int32_t> dist(boost::num_vertices(bg), 0);
  boost::breadth_first_search(
      bg, root,
      boost::visitor(boost::make_bfs_visitor(boost::record_distances(
          boost::make_iterator_property_map(dist.begin(), boost::get(boost::vertex_index, bg)),
          boost::on_tree_edge()))));
  std::vector<std::int32_t> depth(size());
  for (std::size_t i = 0; i < size(); ++i) depth[i] = dist[i] - 1;
  return depth;
}

std::vector<OpId> Graph::reachable_from(OpId from) const {
  BoostGraph bg = to_boost(*this);
  std::vector<boost::default_color_type> color(size(), boost::white_color);
  auto color_map =
      boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, bg));
  boost::breadth_first_visit(bg, static_cast<std::size_t>(from), boost::color_map(color_map));
  std::vector<OpId> out;
  for (std::size_t i = 0; i < size(); ++i) {
    if (color[i] != boost::white_color) out.push_back(static_cast<OpId>(i));
  }
  return out;
}

bool Graph::is_reachable(OpId from, OpId to) const {
  if (from == to) return true;
  if (to < from) return false;  // ids are topological: no path runs backwards
  auto r = reachable_from(from);
  return std::binary_search(r.begin(), r.end(), to);
}

std::vector<OpId> Graph::parameters() const {
  std::vector<OpId> out;
  for (const Op& o : ops_) {
    if (o.kind == OpKind::kParameter) out.push_back(o.id);
  }
  return out;
}

std::int32_t Graph::num_layers() const {
  std::int32_t n = 0;
  for (const Op& o : ops_) n = std::max(n, o.layer + 1);
  return n;
}

namespace {

// The forward op a derived op comes from (itself when forward): the key of the flash tests.
const Op& forward_origin(const Graph& g, const Op& op) {
  return op.phase != Phase::kForward && op.source != kNoOp ? g.op(op.source) : op;
}

// The fused op (scores, softmax or dropout) that `f` is or reads: attention x V reads the
// fused probabilities. Null when `f` is not in a flash kernel.
const Op* fused_attention_op(const Graph& g, const Op& f) {
  if (f.phase != Phase::kForward) return nullptr;
  if (f.fused_attention) return &f;
  if (!f.is_einsum() || !f.selective_recompute) return nullptr;
  for (OpId in : f.inputs) {
    if (g.op(in).fused_attention) return &g.op(in);
  }
  return nullptr;
}

}  // namespace

bool runs_in_flash_attention(const Graph& g, const Op& op) {
  return fused_attention_op(g, forward_origin(g, op)) != nullptr;
}

bool kept_on_chip_by_flash_attention(const Graph& g, const Op& op) {
  const Op& origin = forward_origin(g, op);
  if (fused_attention_op(g, origin) == nullptr) return false;
  // By role, not by shape (the context's [b, s, k, g, d] equals the scores' [b, k, g, s, t]
  // when s = k = g = d): every non-GEMM op of the kernel (softmax, dropout, their gradients,
  // MLA's score sum) works on scores; a forward or recomputed GEMM is on chip when it is a
  // scores GEMM (not the context); a backward GEMM when it is the gradient of a fused operand
  // (dP, of the probabilities; not dV, dQ or dK).
  if (op.kind == OpKind::kElementwise && op.phase == Phase::kBackward && op.function == "add" &&
      op.name.ends_with("/grad_sum")) {
    // A sum of two partial gradients of one tensor (ir/autodiff.cc, accumulate): on chip
    // exactly when that tensor's gradient is.
    return kept_on_chip_by_flash_attention(g, g.op(op.inputs[0]));
  }
  if (!op.is_einsum()) return true;
  if (op.phase != Phase::kBackward) return origin.fused_attention;
  const std::string operand_specs[2] = {origin.dot.lhs, origin.dot.rhs};
  for (std::size_t i = 0; i < 2 && i < origin.inputs.size(); ++i) {
    if (op.dot.out == operand_specs[i] && g.op(origin.inputs[i]).fused_attention) return true;
  }
  return false;
}

std::int64_t device_memory_bytes(const Graph& g, const Op& op) {
  return kept_on_chip_by_flash_attention(g, op) ? 0 : op.out.bytes();
}

std::int64_t memory_traffic_bytes(const Graph& g, const Op& op) {
  if (!op.is_einsum() && runs_in_flash_attention(g, op)) return 0;
  return op.bytes_read + op.bytes_written;
}

std::int64_t split_memory_traffic_bytes(const Graph& g, const Op& op, std::int64_t read_shards,
                                        std::int64_t write_shards) {
  ALPASIM_CHECK(read_shards >= 1 && write_shards >= 1) << read_shards << ", " << write_shards;
  if (!op.is_einsum() && runs_in_flash_attention(g, op)) return 0;
  return (op.bytes_read + read_shards - 1) / read_shards + (op.bytes_written + write_shards - 1) / write_shards;
}

double flash_attention_work_fraction(const Graph& g, const Op& op) {
  if (!op.is_einsum()) return 1.0;
  const Op* fused = fused_attention_op(g, forward_origin(g, op));
  if (fused == nullptr || fused->out.shape.empty()) return 1.0;
  // scores and softmax: (..., s, t)
  return attention_tile_fraction(fused->out.shape.back(), fused->attention_window);
}

namespace {

// A fused scores dot that is not the first of its kernel: multi-head latent attention's rope
// part, summed with the no-rope part (a dot of smaller id) by the op that reads both.
bool second_scores_dot(const Graph& g, const Op& scores) {
  for (OpId user : g.consumers(scores.id)) {
    const Op& u = g.op(user);
    if (u.phase != Phase::kForward || u.is_einsum()) continue;
    for (OpId in : u.inputs) {
      const Op& other = g.op(in);
      if (in < scores.id && other.fused_attention && other.is_einsum()) return true;
    }
  }
  return false;
}

}  // namespace

FlashDotRole flash_dot_role(const Graph& g, const Op& op) {
  FlashDotRole role;
  if (!op.is_einsum()) return role;
  const Op& origin = forward_origin(g, op);
  const Op* fused = fused_attention_op(g, origin);
  if (fused == nullptr) return role;
  role.in_kernel = true;
  const bool scores_dot = origin.fused_attention;  // the scores (QK^T), forward or recomputed
  const bool first_scores = scores_dot && !second_scores_dot(g, origin);
  const bool forward_rerun = g.meta.recompute != "none";
  core::FlashDotShare& share = role.share;
  share.in_forward_kernel = op.phase == Phase::kForward || (op.phase == Phase::kRecompute && forward_rerun);
  share.in_backward_kernel =
      op.phase == Phase::kRecompute ? scores_dot || !forward_rerun : op.phase != Phase::kForward;
  // The scores (the first of MLA's two dots) and dP; not the rope part, nor dQ and dK.
  // By role, as kept_on_chip_by_flash_attention decides (a shape test would mistake the
  // context for scores when s = k = g = d).
  const bool queries_by_keys = kept_on_chip_by_flash_attention(g, op);
  share.score_shaped = queries_by_keys && (!scores_dot || first_scores);
  share.writes_output = !queries_by_keys && !(scores_dot && op.phase != Phase::kBackward);
  share.starts_kernel = first_scores && op.phase != Phase::kBackward;
  share.work_fraction = flash_attention_work_fraction(g, op);
  return role;
}

std::vector<OpId> weight_gradient_parameters(const Graph& g) {
  std::vector<OpId> param(g.size(), kNoOp);
  for (const Op& update : g.ops()) {
    if (update.phase != Phase::kOptimizer || update.source == kNoOp || update.inputs.size() < 2) continue;
    std::vector<OpId> todo = {update.inputs[1]};  // the accumulated gradient
    while (!todo.empty()) {
      const Op& o = g.op(todo.back());
      todo.pop_back();
      if (o.grad_role != GradRole::kWeightGrad || param[static_cast<std::size_t>(o.id)] != kNoOp) continue;
      param[static_cast<std::size_t>(o.id)] = update.source;
      for (OpId in : o.inputs) todo.push_back(in);
    }
  }
  return param;
}

std::vector<char> kernel_weight_parameters(const Graph& g) {
  std::vector<char> weight(g.size(), 0);
  for (const Op& op : g.ops()) {
    if (op.phase == Phase::kForward && (op.is_einsum() || op.kind == OpKind::kConv2d) && op.inputs.size() >= 2 &&
        g.op(op.inputs[1]).kind == OpKind::kParameter) {
      weight[static_cast<std::size_t>(op.inputs[1])] = 1;
    }
  }
  return weight;
}

}  // namespace alpasim::ir

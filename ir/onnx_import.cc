// ONNX importer, built only when Debian's libonnx-dev (ONNX protobuf classes) is found;
// onnx_import_unavailable.cc stands in otherwise (ir/CMakeLists.txt chooses).
#include "ir/onnx_import.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "core/text.h"

namespace alpasim::ir {
namespace {

using core::Result;
using core::Status;
using Shape = std::vector<std::int64_t>;

const std::vector<std::string>& supported_ops() {
  static const std::vector<std::string> k = {
      "Add", "BatchNormalization", "Cast", "Constant", "Conv", "Div", "Dropout", "Erf", "Exp",
      "Flatten", "Gather", "Gelu", "Gemm", "GlobalAveragePool", "Identity", "LayerNormalization",
      "MatMul", "MaxPool", "Mul", "Neg", "ReduceMean", "Relu", "Reshape", "Sigmoid", "Softmax",
      "Sqrt", "Sub", "Tanh", "Transpose"};
  return k;
}

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// A value of the ONNX graph: the op that holds it, and whether that op's shape is the
/// NHWC permutation of the ONNX (NCHW) shape. Rank-4 activations are kept NHWC because
/// alpa-sim's conv2d is NHWC/HWIO; FLOPs and bytes do not depend on the layout.
struct Value {
  OpId op = kNoOp;
  bool nhwc = false;
};

Shape to_nhwc(const Shape& nchw) { return {nchw[0], nchw[2], nchw[3], nchw[1]}; }
Shape to_nchw(const Shape& nhwc) { return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]}; }

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string file, const BuildOptions& options)
      : model_(model), file_(std::move(file)), options_(options) {}

  Result<Graph> run() {
    const onnx::GraphProto& graph = model_.graph();
    g_.meta.family = "onnx";
    g_.meta.model_name = graph.name().empty() ? file_ : graph.name();
    g_.meta.dtype = options_.dtype;
    g_.layers.push_back({"graph", "block"});
    for (const auto& init : graph.initializer()) initializers_[init.name()] = &init;
    bool first = true;
    for (const auto& in : graph.input()) {
      if (initializers_.count(in.name())) continue;  // old exporters list weights as inputs
      ALPASIM_RETURN_IF_ERROR(add_graph_input(in, first));
      first = false;
    }
    for (int i = 0; i < graph.node_size(); ++i) {
      ALPASIM_RETURN_IF_ERROR(import_node(graph.node(i), i));
    }
    if (graph.output_size() == 0) return error("the graph has no output");
    const std::string& out_name = graph.output(graph.output_size() - 1).name();
    auto it = values_.find(out_name);
    if (it == values_.end()) return error("output \"" + out_name + "\" is not produced by any node");
    // Training needs a scalar: the mean of the last output stands in for the loss.
    OpId loss = g_.add_reduce("loss", "mean", {it->second.op}, {1}, 1, 0);
    g_.meta.loss = loss;
    return std::move(g_);
  }

 private:
  // Names in the file (nodes, ops, domains, inputs) may hold any bytes: the message is
  // escaped so it stays one line (found by fuzz_onnx).
  Status error(const std::string& message) const {
    return core::invalid_argument(file_ + ": " + core::escape_control_chars(message));
  }

  Status node_error(const onnx::NodeProto& n, int index, const std::string& message) const {
    return error("node " + std::to_string(index) + " (\"" + n.name() + "\", op " + n.op_type() +
                 "): " + message);
  }

  Status add_graph_input(const onnx::ValueInfoProto& in, bool first) {
    if (!in.type().has_tensor_type()) return error("input \"" + in.name() + "\" is not a tensor");
    const auto& tt = in.type().tensor_type();
    Shape shape;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      if (!dim.has_dim_value() || dim.dim_value() <= 0) {
        return error("input \"" + in.name() + "\" has a dynamic dimension " + std::to_string(d) +
                     (dim.has_dim_param() ? " (\"" + dim.dim_param() + "\")" : std::string()) +
                     "; alpa-sim needs static shapes");
      }
      shape.push_back(dim.dim_value());
    }
    if (shape.empty()) return error("input \"" + in.name() + "\" is a scalar");
    const int et = tt.elem_type();
    const bool index = et == onnx::TensorProto::INT64 || et == onnx::TensorProto::INT32;
    Value v;
    if (shape.size() == 4 && !index) {
      shape = to_nhwc(shape);
      v.nhwc = true;
    }
    v.op = g_.add_input(in.name(), shape, index, 0);
    if (first) g_.meta.samples_per_microbatch = shape[0];
    values_[in.name()] = v;
    return core::ok_status();
  }

  /// The ONNX (logical) shape of a value.
  Shape onnx_shape(const Value& v) const {
    const Shape s = g_.op(v.op).out.shape;
    return v.nhwc ? to_nchw(s) : s;
  }

  static const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) {
    for (const auto& a : n.attribute()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }
  static std::int64_t attr_int(const onnx::NodeProto& n, const std::string& name, std::int64_t fallback) {
    const auto* a = attr(n, name);
    return a ? a->i() : fallback;
  }
  static std::vector<std::int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name) {
    const auto* a = attr(n, name);
    if (!a) return {};
    return {a->ints().begin(), a->ints().end()};
  }

  static Shape dims_of(const onnx::TensorProto& t) { return {t.dims().begin(), t.dims().end()}; }

  /// Integer contents of a constant (initializer or Constant node), for Reshape shapes
  /// and ReduceMean axes.
  std::optional<std::vector<std::int64_t>> int_constant(const std::string& name) const {
    const onnx::TensorProto* t = nullptr;
    if (auto it = initializers_.find(name); it != initializers_.end()) t = it->second;
    if (auto it = constants_.find(name); it != constants_.end()) t = &it->second;
    if (!t || t->data_type() != onnx::TensorProto::INT64) return std::nullopt;
    std::vector<std::int64_t> out(t->int64_data().begin(), t->int64_data().end());
    if (out.empty() && !t->raw_data().empty()) {
      out.resize(t->raw_data().size() / sizeof(std::int64_t));
      std::copy_n(t->raw_data().data(), out.size() * sizeof(std::int64_t),
                  reinterpret_cast<char*>(out.data()));
    }
    return out;
  }

  /// The value named `name`; an initializer becomes a parameter of shape `want` (same
  /// element count as its ONNX dims) the first time it is used.
  Result<Value> value(const onnx::NodeProto& n, int index, const std::string& name,
                      const Shape& want = {}) {
    if (auto it = values_.find(name); it != values_.end()) return it->second;
    auto init = initializers_.find(name);
    if (init == initializers_.end()) {
      return node_error(n, index, "input \"" + name + "\" is not produced by an earlier node");
    }
    Shape dims = dims_of(*init->second);
    if (dims.empty()) dims = {1};
    // Dims come from the file: each positive and their product far from int64 overflow.
    std::int64_t count = 1;
    for (std::int64_t d : dims) {
      if (d < 1 || __builtin_mul_overflow(count, d, &count) || count > (std::int64_t{1} << 40)) {
        return node_error(n, index, "initializer \"" + name +
                                        "\": expected positive dims of at most 2^40 elements in all");
      }
    }
    Shape shape = want.empty() ? dims : want;
    // A file can pair an initializer with an operator that needs another element count
    // (found by fuzz_onnx): an error in the file, not a bug here.
    if (TensorType{shape}.num_elements() != TensorType{dims}.num_elements()) {
      return node_error(n, index,
                        "initializer \"" + name + "\" has " +
                            std::to_string(TensorType{dims}.num_elements()) +
                            " elements, but this operator needs " +
                            std::to_string(TensorType{shape}.num_elements()));
    }
    Value v{g_.add_parameter(name, shape, 0), false};
    values_[name] = v;
    return v;
  }

  /// Shape `other` right-aligned to rank 4 and permuted like an NHWC activation.
  static Shape nhwc_broadcast_shape(Shape other) {
    while (other.size() < 4) other.insert(other.begin(), 1);
    return to_nhwc(other);
  }

  Status binary(const onnx::NodeProto& n, int index, const std::string& fn) {
    std::vector<Value> in(2);
    std::vector<bool> is_init(2);
    for (int i = 0; i < 2; ++i) is_init[static_cast<std::size_t>(i)] = !values_.count(n.input(i)) && initializers_.count(n.input(i));
    // Activations first so that an initializer operand can take their layout.
    bool nhwc = false;
    for (int i = 0; i < 2; ++i) {
      if (is_init[static_cast<std::size_t>(i)]) continue;
      ALPASIM_ASSIGN_OR_RETURN(in[static_cast<std::size_t>(i)], value(n, index, n.input(i)));
      nhwc = nhwc || in[static_cast<std::size_t>(i)].nhwc;
    }
    for (int i = 0; i < 2; ++i) {
      if (!is_init[static_cast<std::size_t>(i)]) continue;
      Shape dims = dims_of(*initializers_.at(n.input(i)));
      if (dims.empty()) dims = {1};
      if (nhwc) dims = nhwc_broadcast_shape(dims);
      ALPASIM_ASSIGN_OR_RETURN(in[static_cast<std::size_t>(i)], value(n, index, n.input(i), dims));
    }
    const Shape a = g_.op(in[0].op).out.shape;
    const Shape b = g_.op(in[1].op).out.shape;
    if (in[0].nhwc != in[1].nhwc && a.size() == 4 && b.size() == 4) {
      return node_error(n, index, "unsupported broadcast of " + shape_string(onnx_shape(in[0])) +
                                      " with " + shape_string(onnx_shape(in[1])));
    }
    Shape out(std::max(a.size(), b.size()), 1);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const std::int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
      const std::int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
      if (x != y && x != 1 && y != 1) {
        return node_error(n, index, "shapes " + shape_string(onnx_shape(in[0])) + " and " +
                                        shape_string(onnx_shape(in[1])) + " do not broadcast");
      }
      out[out.size() - 1 - i] = std::max(x, y);
    }
    OpId id = g_.add_elementwise(node_name(n, index), fn, {in[0].op, in[1].op}, 1, 0, out);
    set(n.output(0), {id, nhwc && out.size() == 4});
    return core::ok_status();
  }

  std::string node_name(const onnx::NodeProto& n, int index) const {
    return n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
  }

  void set(const std::string& name, Value v) { values_[name] = v; }

  Status unary(const onnx::NodeProto& n, int index, const std::string& fn, std::int64_t fpe) {
    ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
    OpId id = g_.add_elementwise(node_name(n, index), fn, {x.op}, fpe, 0);
    set(n.output(0), {id, x.nhwc});
    return core::ok_status();
  }

  Status reshape_to(const onnx::NodeProto& n, int index, const Value& x, Shape onnx_out) {
    Value v;
    Shape internal = onnx_out;
    if (onnx_out.size() == 4) {
      internal = to_nhwc(onnx_out);
      v.nhwc = true;
    }
    v.op = g_.add_elementwise(node_name(n, index), "reshape", {x.op}, 0, 0, internal);
    g_.mutable_op(v.op).bytes_read = 0;  // a view
    g_.mutable_op(v.op).bytes_written = 0;
    set(n.output(0), v);
    return core::ok_status();
  }

  Status import_node(const onnx::NodeProto& n, int index) {
    const std::string& t = n.op_type();
    const auto& ops = supported_ops();
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      return node_error(n, index, "unsupported operator domain \"" + n.domain() + "\"");
    }
    if (!std::binary_search(ops.begin(), ops.end(), t)) {
      std::ostringstream list;
      for (std::size_t i = 0; i < ops.size(); ++i) list << (i ? ", " : "") << ops[i];
      return node_error(n, index, "unsupported operator " + t + " (supported: " + list.str() + ")");
    }
    if (n.output_size() < 1) return node_error(n, index, "node has no output");
    // The inputs each operator reads unconditionally (optional ones are checked where
    // read): a file may give fewer (heap-buffer-overflow in protobuf found by fuzz_onnx).
    static const std::map<std::string, int> kMinInputs = {
        {"Add", 2}, {"Sub", 2}, {"Mul", 2}, {"Div", 2}, {"MatMul", 2}, {"Gemm", 2},
        {"Conv", 2}, {"Gather", 2}, {"Constant", 0}};  // norms: checked below, with their name
    const auto min_inputs = kMinInputs.find(t);
    const int need = min_inputs == kMinInputs.end() ? 1 : min_inputs->second;
    if (n.input_size() < need) {
      return node_error(n, index, "expected at least " + std::to_string(need) + " input" +
                                      (need == 1 ? "" : "s") + ", got " +
                                      std::to_string(n.input_size()));
    }
    const std::string name = node_name(n, index);
    if (t == "Constant") {
      const auto* a = attr(n, "value");
      if (!a || !a->has_t()) return node_error(n, index, "expected a tensor \"value\" attribute");
      constants_[n.output(0)] = a->t();
      return core::ok_status();
    }
    if (t == "Identity" || t == "Dropout" || t == "Cast") {
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      set(n.output(0), x);
      return core::ok_status();
    }
    if (t == "Add") return binary(n, index, "add");
    if (t == "Sub") return binary(n, index, "sub");
    if (t == "Mul") return binary(n, index, "mul");
    if (t == "Div") return binary(n, index, "div");
    if (t == "Relu") return unary(n, index, "relu", 1);
    if (t == "Gelu") return unary(n, index, "gelu", 8);
    if (t == "Sigmoid") return unary(n, index, "sigmoid", 4);
    if (t == "Tanh") return unary(n, index, "tanh", 4);
    if (t == "Erf") return unary(n, index, "erf", 4);
    if (t == "Exp") return unary(n, index, "exp", 4);
    if (t == "Sqrt") return unary(n, index, "sqrt", 4);
    if (t == "Neg") return unary(n, index, "scale", 1);
    if (t == "MatMul") return matmul(n, index);
    if (t == "Gemm") return gemm(n, index);
    if (t == "Conv") return conv(n, index);
    if (t == "Softmax") {
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      const auto rank = static_cast<std::int64_t>(g_.op(x.op).out.shape.size());
      const std::int64_t axis = attr_int(n, "axis", -1);
      if (x.nhwc || (axis != -1 && axis != rank - 1)) {
        return node_error(n, index, "expected softmax over the last axis, got axis " + std::to_string(axis));
      }
      set(n.output(0), {g_.add_softmax(name, x.op, 0), false});
      return core::ok_status();
    }
    if (t == "LayerNormalization" || t == "BatchNormalization") {
      const bool batch = t == "BatchNormalization";
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      // Shapes are copied, never referenced: value() may add a parameter, and a reference
      // into the graph's ops then dangles (heap-use-after-free found by fuzz_onnx).
      const Shape xs = g_.op(x.op).out.shape;
      if (!batch) {
        const std::int64_t axis = attr_int(n, "axis", -1);
        if (x.nhwc || (axis != -1 && axis != static_cast<std::int64_t>(xs.size()) - 1)) {
          return node_error(n, index, "expected normalization over the last axis, got axis " +
                                          std::to_string(axis));
        }
      } else if (!x.nhwc) {
        return node_error(n, index, "expected an NCHW input of rank 4, got " + shape_string(xs));
      }
      if (n.input_size() < (batch ? 3 : 2)) return node_error(n, index, "missing scale or bias input");
      ALPASIM_ASSIGN_OR_RETURN(Value scale, value(n, index, n.input(1), {xs.back()}));
      OpId bias = kNoOp;
      if (n.input_size() > 2 && !n.input(2).empty()) {
        ALPASIM_ASSIGN_OR_RETURN(Value b, value(n, index, n.input(2), {xs.back()}));
        bias = b.op;
      }
      if (bias == kNoOp) {
        // LayerNormalization without bias: add a zero-initialised shift so the op keeps
        // the layer-norm form (2 params per channel: a documented +C parameters).
        bias = g_.add_parameter(name + "_bias", {xs.back()}, 0);
      }
      OpId id = g_.add_norm(name, batch ? NormType::kBatchNorm : NormType::kLayerNorm, x.op, scale.op,
                            bias, 0);
      set(n.output(0), {id, x.nhwc});
      return core::ok_status();
    }
    if (t == "MaxPool") {
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      if (!x.nhwc) return node_error(n, index, "expected an NCHW input of rank 4");
      auto k = attr_ints(n, "kernel_shape");
      auto s = attr_ints(n, "strides");
      if (k.size() != 2 || k[0] != k[1]) return node_error(n, index, "expected a square 2-D kernel_shape");
      const std::int64_t stride = s.empty() ? 1 : s[0];
      if (!s.empty() && (s.size() != 2 || s[0] != s[1])) return node_error(n, index, "expected equal strides");
      ALPASIM_RETURN_IF_ERROR(check_same_padding(n, index, g_.op(x.op).out.shape[1], k[0], stride));
      set(n.output(0), {g_.add_max_pool(name, x.op, k[0], stride, 0), true});
      return core::ok_status();
    }
    if (t == "GlobalAveragePool") {
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      if (!x.nhwc) return node_error(n, index, "expected an NCHW input of rank 4");
      const Shape xs = g_.op(x.op).out.shape;
      OpId id = g_.add_reduce(name, "mean", {x.op}, {xs[0], 1, 1, xs[3]}, 1, 0);
      set(n.output(0), {id, true});
      return core::ok_status();
    }
    if (t == "ReduceMean") {
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      std::vector<std::int64_t> axes = attr_ints(n, "axes");
      if (axes.empty() && n.input_size() > 1) {
        auto c = int_constant(n.input(1));
        if (!c) return node_error(n, index, "expected constant axes");
        axes = *c;
      }
      Shape in = onnx_shape(x);
      const auto rank = static_cast<std::int64_t>(in.size());
      if (axes.empty()) for (std::int64_t a = 0; a < rank; ++a) axes.push_back(a);
      Shape out = in;
      for (std::int64_t a : axes) out[static_cast<std::size_t>((a + rank) % rank)] = 1;
      if (attr_int(n, "keepdims", 1) == 0) {
        Shape kept;
        for (std::size_t i = 0; i < out.size(); ++i) {
          if (std::find_if(axes.begin(), axes.end(), [&](std::int64_t a) {
                return static_cast<std::size_t>((a + rank) % rank) == i;
              }) == axes.end()) {
            kept.push_back(out[i]);
          }
        }
        out = kept.empty() ? Shape{1} : kept;
      }
      const bool nhwc = x.nhwc && out.size() == 4;
      OpId id = g_.add_reduce(name, "mean", {x.op}, nhwc ? to_nhwc(out) : out, 1, 0);
      set(n.output(0), {id, nhwc});
      return core::ok_status();
    }
    if (t == "Flatten") {
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      Shape in = onnx_shape(x);
      auto axis = attr_int(n, "axis", 1);
      if (axis < 0) axis += static_cast<std::int64_t>(in.size());
      const auto mid = in.begin() + axis;
      const std::int64_t a = std::accumulate(in.begin(), mid, std::int64_t{1}, std::multiplies<>());
      const std::int64_t b = std::accumulate(mid, in.end(), std::int64_t{1}, std::multiplies<>());
      return reshape_to(n, index, x, {a, b});
    }
    if (t == "Reshape") {
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      auto target = n.input_size() > 1 ? int_constant(n.input(1)) : std::nullopt;
      if (!target) return node_error(n, index, "expected a constant int64 shape input");
      Shape in = onnx_shape(x);
      const std::int64_t total = TensorType{in}.num_elements();
      Shape out;
      std::int64_t known = 1;
      int infer = -1;
      for (std::size_t i = 0; i < target->size(); ++i) {
        std::int64_t d = (*target)[i];
        if (d == 0) d = in.at(i);
        if (d == -1) {
          infer = static_cast<int>(i);
          out.push_back(1);
          continue;
        }
        out.push_back(d);
        known *= d;
      }
      if (infer >= 0 && known > 0) out[static_cast<std::size_t>(infer)] = total / known;
      if (TensorType{out}.num_elements() != total) {
        return node_error(n, index, "cannot reshape " + shape_string(in) + " to " + shape_string(out));
      }
      return reshape_to(n, index, x, out);
    }
    if (t == "Transpose") {
      ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
      if (x.nhwc) return node_error(n, index, "transposing a rank-4 image tensor is not supported");
      Shape in = g_.op(x.op).out.shape;
      auto perm = attr_ints(n, "perm");
      if (perm.empty()) {
        for (std::size_t i = in.size(); i-- > 0;) perm.push_back(static_cast<std::int64_t>(i));
      }
      Shape out;
      for (std::int64_t p : perm) out.push_back(in.at(static_cast<std::size_t>(p)));
      OpId id = g_.add_elementwise(name, "transpose", {x.op}, 0, 0, out);
      set(n.output(0), {id, false});
      return core::ok_status();
    }
    // Gather: an embedding lookup of a 2-D initializer by integer indices.
    if (attr_int(n, "axis", 0) != 0) return node_error(n, index, "expected axis 0");
    if (!initializers_.count(n.input(0))) {
      return node_error(n, index, "expected a weight table (initializer) as the data input");
    }
    ALPASIM_ASSIGN_OR_RETURN(Value table, value(n, index, n.input(0)));
    ALPASIM_ASSIGN_OR_RETURN(Value ids, value(n, index, n.input(1)));
    if (g_.op(table.op).out.shape.size() != 2 || !g_.op(ids.op).out.is_index) {
      return node_error(n, index, "expected a 2-D table and integer indices");
    }
    set(n.output(0), {g_.add_embedding(name, table.op, ids.op, 0), false});
    return core::ok_status();
  }

  Status check_same_padding(const onnx::NodeProto& n, int index, std::int64_t size, std::int64_t k,
                            std::int64_t stride) const {
    auto pads = attr_ints(n, "pads");
    std::int64_t p = 0;
    if (!pads.empty()) {
      if (pads.size() != 4 || !std::all_of(pads.begin(), pads.end(), [&](std::int64_t v) { return v == pads[0]; })) {
        return node_error(n, index, "expected equal pads on all sides");
      }
      p = pads[0];
    }
    const std::int64_t onnx_out = (size + 2 * p - k) / stride + 1;
    const std::int64_t same_out = (size + stride - 1) / stride;
    if (onnx_out != same_out) {
      return node_error(n, index, "padding gives output size " + std::to_string(onnx_out) +
                                      "; alpa-sim supports \"same\" padding (size " +
                                      std::to_string(same_out) + ") only");
    }
    return core::ok_status();
  }

  Status matmul(const onnx::NodeProto& n, int index) {
    ALPASIM_ASSIGN_OR_RETURN(Value a, value(n, index, n.input(0)));
    ALPASIM_ASSIGN_OR_RETURN(Value b, value(n, index, n.input(1)));
    const Shape as = g_.op(a.op).out.shape;
    const Shape bs = g_.op(b.op).out.shape;
    if (a.nhwc || b.nhwc || as.size() < 2 || bs.size() < 2) {
      return node_error(n, index, "expected operands of rank >= 2 that are not image tensors, got " +
                                      shape_string(onnx_shape(a)) + " and " + shape_string(onnx_shape(b)));
    }
    const std::size_t batch_a = as.size() - 2;
    const std::size_t batch_b = bs.size() - 2;
    if (batch_b > batch_a) return node_error(n, index, "expected the right operand to have no more batch dims");
    if (as.back() != bs[bs.size() - 2]) {
      return node_error(n, index, "contracting dims differ: " + shape_string(as) + " x " + shape_string(bs));
    }
    static const std::string kBatch = "abcdefgh";
    if (batch_a > kBatch.size()) return node_error(n, index, "too many batch dims");
    std::string lhs = kBatch.substr(0, batch_a) + "mk";
    std::string rhs = kBatch.substr(batch_a - batch_b, batch_b) + "kn";
    for (std::size_t i = 0; i < batch_b; ++i) {
      if (bs[i] != as[batch_a - batch_b + i]) {
        return node_error(n, index, "broadcasting batch dims is not supported: " + shape_string(as) +
                                        " x " + shape_string(bs));
      }
    }
    std::string out = kBatch.substr(0, batch_a) + "mn";
    OpId id = g_.add_dot(node_name(n, index), lhs + "," + rhs + "->" + out, a.op, b.op, 0);
    set(n.output(0), {id, false});
    return core::ok_status();
  }

  Status gemm(const onnx::NodeProto& n, int index) {
    ALPASIM_ASSIGN_OR_RETURN(Value a, value(n, index, n.input(0)));
    ALPASIM_ASSIGN_OR_RETURN(Value b, value(n, index, n.input(1)));
    const bool ta = attr_int(n, "transA", 0) != 0;
    const bool tb = attr_int(n, "transB", 0) != 0;
    const Shape as = g_.op(a.op).out.shape;
    const Shape bs = g_.op(b.op).out.shape;
    if (as.size() != 2 || bs.size() != 2) return node_error(n, index, "expected 2-D operands");
    const std::int64_t ka = ta ? as[0] : as[1];
    const std::int64_t kb = tb ? bs[1] : bs[0];
    if (ka != kb) return node_error(n, index, "contracting dims differ: " + std::to_string(ka) + " and " + std::to_string(kb));
    const std::string spec = std::string(ta ? "km" : "mk") + "," + (tb ? "nk" : "kn") + "->mn";
    OpId bias = kNoOp;
    const std::int64_t N = tb ? bs[0] : bs[1];
    if (n.input_size() > 2 && !n.input(2).empty()) {
      const auto it = initializers_.find(n.input(2));
      const bool vector_bias = it != initializers_.end() && TensorType{dims_of(*it->second)}.num_elements() == N;
      if (!vector_bias) return node_error(n, index, "expected a bias initializer of " + std::to_string(N) + " elements");
      ALPASIM_ASSIGN_OR_RETURN(Value c, value(n, index, n.input(2), {N}));
      bias = c.op;
    }
    set(n.output(0), {g_.add_dot(node_name(n, index), spec, a.op, b.op, 0, bias), false});
    return core::ok_status();
  }

  Status conv(const onnx::NodeProto& n, int index) {
    ALPASIM_ASSIGN_OR_RETURN(Value x, value(n, index, n.input(0)));
    if (!x.nhwc) return node_error(n, index, "expected an NCHW input of rank 4");
    if (attr_int(n, "group", 1) != 1) return node_error(n, index, "grouped convolution is not supported");
    for (std::int64_t d : attr_ints(n, "dilations")) {
      if (d != 1) return node_error(n, index, "dilated convolution is not supported");
    }
    auto it = initializers_.find(n.input(1));
    if (it == initializers_.end()) return node_error(n, index, "expected the weights as an initializer");
    const Shape w = dims_of(*it->second);  // [co, ci, kh, kw]
    const Shape xs = g_.op(x.op).out.shape;
    if (w.size() != 4 || w[2] != w[3] || w[1] != xs[3]) {
      return node_error(n, index, "expected square [out, " + std::to_string(xs[3]) + ", k, k] weights, got " +
                                      shape_string(w));
    }
    auto s = attr_ints(n, "strides");
    if (!s.empty() && (s.size() != 2 || s[0] != s[1])) return node_error(n, index, "expected equal strides");
    const std::int64_t stride = s.empty() ? 1 : s[0];
    ALPASIM_RETURN_IF_ERROR(check_same_padding(n, index, xs[1], w[2], stride));
    ALPASIM_ASSIGN_OR_RETURN(Value filter, value(n, index, n.input(1), {w[2], w[3], w[1], w[0]}));
    OpId y = g_.add_conv2d(node_name(n, index), x.op, filter.op, stride, 0);
    if (n.input_size() > 2 && !n.input(2).empty()) {
      ALPASIM_ASSIGN_OR_RETURN(Value b, value(n, index, n.input(2), {w[0]}));
      y = g_.add_elementwise(node_name(n, index) + "_bias", "add", {y, b.op}, 1, 0);
    }
    set(n.output(0), {y, true});
    return core::ok_status();
  }

  const onnx::ModelProto& model_;
  std::string file_;
  BuildOptions options_;
  Graph g_;
  std::map<std::string, const onnx::TensorProto*> initializers_;
  std::map<std::string, onnx::TensorProto> constants_;
  std::map<std::string, Value> values_;
};

}  // namespace

bool onnx_import_available() { return true; }

Result<Graph> import_onnx(const std::filesystem::path& path, const std::string& path_as_written,
                          const BuildOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return core::not_found(path_as_written + ": cannot open file");
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in)) {
    return core::invalid_argument(path_as_written + ": not an ONNX model (protobuf parse failed)");
  }
  return Importer(model, path_as_written, options).run();
}

Result<Graph> import_onnx_bytes(std::string_view bytes, const std::string& name,
                                const BuildOptions& options) {
  onnx::ModelProto model;
  // ParseFromArray takes an int size: larger inputs are not models this tool can hold.
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return core::invalid_argument(name + ": not an ONNX model (protobuf parse failed)");
  }
  return Importer(model, name, options).run();
}

}  // namespace alpasim::ir

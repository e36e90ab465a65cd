#include "ir/graph_json.h"

#include <algorithm>
#include <map>

#include "core/limits.h"
#include "core/text.h"
#include "ir/model_config.h"

namespace alpasim::ir {
namespace {

using core::Json;
using core::JsonObject;
using core::JsonValue;
using core::Result;
using core::Status;
using Shape = std::vector<std::int64_t>;

const std::vector<std::string>& op_names() {
  static const std::vector<std::string> k = {
      "parameter", "input",      "dot",        "moe_dispatch", "moe_combine",   "conv2d",
      "elementwise", "reduce",   "softmax",    "layer_norm",   "rms_norm",      "batch_norm",
      "embedding", "max_pool",   "moe_gate",   "reshape",      "cross_entropy"};
  return k;
}

const std::vector<std::string>& layer_kinds() {
  static const std::vector<std::string> k = {"prologue", "block", "transformer",
                                             "moe_transformer", "resnet_block", "epilogue"};
  return k;
}

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Result<Shape> read_shape(const JsonValue& v) {
  ALPASIM_ASSIGN_OR_RETURN(auto items, v.as_array());
  if (items.empty()) return v.type_error("a non-empty array of positive integers");
  Shape s;
  for (const JsonValue& d : items) {
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t x, d.as_positive_int());
    s.push_back(x);
  }
  return s;
}

/// numpy broadcasting of `a` and `b`; nullopt when incompatible.
std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const std::int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[out.size() - 1 - i] = std::max(x, y);
  }
  return out;
}

class Reader {
 public:
  explicit Reader(Graph& g) : g_(g) {}

  Status read_op(const JsonValue& v, std::int32_t& layer) {
    ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, v.as_object());
    ALPASIM_ASSIGN_OR_RETURN(JsonValue name_v, obj.required("name", "a unique op name"));
    ALPASIM_ASSIGN_OR_RETURN(std::string name, name_v.as_string());
    if (name.empty()) return name_v.type_error("a non-empty string");
    if (names_.count(name)) return name_v.error("duplicate op name \"" + name + "\"");
    ALPASIM_ASSIGN_OR_RETURN(std::string kind, obj.get_enum("op", op_names()));
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t l, obj.get_non_negative_int_or("layer", layer));
    layer = static_cast<std::int32_t>(l);
    std::vector<OpId> in;
    std::vector<JsonValue> in_v;
    if (auto inputs = obj.optional("inputs")) {
      ALPASIM_ASSIGN_OR_RETURN(in_v, inputs->as_array());
      for (const JsonValue& i : in_v) {
        ALPASIM_ASSIGN_OR_RETURN(std::string ref, i.as_string());
        auto it = names_.find(ref);
        if (it == names_.end()) return i.type_error("the name of an earlier op");
        in.push_back(it->second);
      }
    }
    auto need_inputs = [&](std::size_t lo, std::size_t hi) -> Status {
      if (in.size() < lo || in.size() > hi) {
        const std::string want = lo == hi ? std::to_string(lo)
                                          : std::to_string(lo) + " to " + std::to_string(hi);
        return obj.value().error("expected " + want + " inputs for op \"" + kind + "\", got " +
                                 std::to_string(in.size()));
      }
      return core::ok_status();
    };
    auto shape_of = [&](std::size_t i) -> const Shape& { return g_.op(in[i]).out.shape; };
    OpId id = kNoOp;
    if (kind == "parameter" || kind == "input") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(0, 0));
      ALPASIM_ASSIGN_OR_RETURN(JsonValue sv, obj.required("shape", "an array of positive integers"));
      ALPASIM_ASSIGN_OR_RETURN(Shape shape, read_shape(sv));
      if (kind == "parameter") {
        id = g_.add_parameter(name, shape, layer);
      } else {
        ALPASIM_ASSIGN_OR_RETURN(bool index, obj.get_bool_or("index", false));
        id = g_.add_input(name, shape, index, layer);
      }
    } else if (kind == "dot" || kind == "moe_dispatch" || kind == "moe_combine") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(2, 3));
      ALPASIM_ASSIGN_OR_RETURN(JsonValue ev, obj.required("einsum", "an einsum such as \"bh,hf->bf\""));
      ALPASIM_ASSIGN_OR_RETURN(std::string text, ev.as_string());
      auto spec = parse_dot_spec(text);
      if (!spec) {
        return ev.type_error("an einsum of two operands with one letter per dimension, each "
                             "letter in at least two terms");
      }
      ALPASIM_RETURN_IF_ERROR(check_einsum(ev, *spec, shape_of(0), shape_of(1)));
      if (in.size() == 3) {
        Shape out;
        std::map<char, std::int64_t> size;
        for (std::size_t i = 0; i < spec->lhs.size(); ++i) size[spec->lhs[i]] = shape_of(0)[i];
        for (std::size_t i = 0; i < spec->rhs.size(); ++i) size[spec->rhs[i]] = shape_of(1)[i];
        for (char c : spec->out) out.push_back(size[c]);
        const Shape& bias = shape_of(2);
        if (bias.size() > out.size() || !std::equal(bias.rbegin(), bias.rend(), out.rbegin())) {
          return in_v[2].error("expected a bias whose shape is a suffix of the output shape " +
                               shape_string(out) + ", got " + shape_string(bias));
        }
      }
      const OpKind k = kind == "dot" ? OpKind::kDot
                       : kind == "moe_dispatch" ? OpKind::kMoeDispatch : OpKind::kMoeCombine;
      id = g_.add_einsum(name, k, text, in[0], in[1], in.size() == 3 ? in[2] : kNoOp, layer);
    } else if (kind == "conv2d") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(2, 2));
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t stride, obj.get_positive_int_or("stride", 1));
      if (shape_of(0).size() != 4) return in_v[0].error("expected an NHWC input of rank 4, got " + shape_string(shape_of(0)));
      if (shape_of(1).size() != 4 || shape_of(1)[2] != shape_of(0)[3]) {
        return in_v[1].error("expected an HWIO filter with " + std::to_string(shape_of(0)[3]) +
                             " input channels, got " + shape_string(shape_of(1)));
      }
      id = g_.add_conv2d(name, in[0], in[1], stride, layer);
    } else if (kind == "elementwise") {
      ALPASIM_ASSIGN_OR_RETURN(std::string fn, obj.get_string("function"));
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t fpe, obj.get_non_negative_int_or("flops_per_element", 1));
      Shape out;
      if (auto sv = obj.optional("shape")) {
        ALPASIM_ASSIGN_OR_RETURN(out, read_shape(*sv));
      } else if (in.empty()) {
        return obj.value().error("missing required key \"shape\" (an elementwise op without inputs needs it)");
      }
      Shape b = in.empty() ? out : shape_of(0);
      for (std::size_t i = 1; i < in.size(); ++i) {
        auto r = broadcast(b, shape_of(i));
        if (!r) {
          return in_v[i].error("expected a shape broadcastable with " + shape_string(b) + ", got " +
                               shape_string(shape_of(i)));
        }
        b = *r;
      }
      if (!out.empty() && !in.empty() && broadcast(b, out) != out) {
        return obj.value().error("expected inputs broadcastable to shape " + shape_string(out) +
                                 ", got " + shape_string(b));
      }
      if (out.empty()) out = b;
      std::optional<core::DType> dtype;
      if (auto dv = obj.optional("dtype")) {
        ALPASIM_ASSIGN_OR_RETURN(std::string d, dv->as_enum(core::dtype_names()));
        dtype = core::parse_dtype(d);
      }
      id = g_.add_elementwise(name, fn, in, fpe, layer, out, dtype);
    } else if (kind == "reduce") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(1, 8));
      ALPASIM_ASSIGN_OR_RETURN(std::string fn, obj.get_string("function"));
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t fpe, obj.get_non_negative_int_or("flops_per_element", 1));
      ALPASIM_ASSIGN_OR_RETURN(JsonValue sv, obj.required("shape", "an array of positive integers"));
      ALPASIM_ASSIGN_OR_RETURN(Shape out, read_shape(sv));
      id = g_.add_reduce(name, fn, in, out, fpe, layer);
      if (fn == "softmax_cross_entropy") {
        // As written by graph_to_json: the logits and the labels.
        ALPASIM_RETURN_IF_ERROR(need_inputs(2, 2));
        ALPASIM_ASSIGN_OR_RETURN(LossKernel kernel, parse_loss_kernel(obj));
        g_.set_loss_kernel(id, kernel);
      }
    } else if (kind == "softmax") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(1, 1));
      id = g_.add_softmax(name, in[0], layer);
    } else if (kind == "layer_norm" || kind == "rms_norm" || kind == "batch_norm") {
      const bool rms = kind == "rms_norm";
      ALPASIM_RETURN_IF_ERROR(rms ? need_inputs(2, 2) : need_inputs(3, 3));
      const Shape want = {shape_of(0).back()};
      for (std::size_t i = 1; i < in.size(); ++i) {
        if (shape_of(i) != want) {
          return in_v[i].error("expected a parameter of shape " + shape_string(want) + ", got " +
                               shape_string(shape_of(i)));
        }
      }
      const NormType t = rms ? NormType::kRmsNorm
                         : kind == "layer_norm" ? NormType::kLayerNorm : NormType::kBatchNorm;
      id = g_.add_norm(name, t, in[0], in[1], rms ? kNoOp : in[2], layer);
    } else if (kind == "embedding") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(2, 2));
      if (shape_of(0).size() != 2) return in_v[0].error("expected a 2-D table, got " + shape_string(shape_of(0)));
      if (!g_.op(in[1]).out.is_index) return in_v[1].error("expected an index input (\"index\": true)");
      id = g_.add_embedding(name, in[0], in[1], layer);
    } else if (kind == "max_pool") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(1, 1));
      if (shape_of(0).size() != 4) return in_v[0].error("expected an NHWC input of rank 4, got " + shape_string(shape_of(0)));
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t window, obj.get_positive_int("window"));
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t stride, obj.get_positive_int_or("stride", window));
      id = g_.add_max_pool(name, in[0], window, stride, layer);
    } else if (kind == "moe_gate") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(1, 1));
      if (shape_of(0).size() != 3) return in_v[0].error("expected router probabilities [groups, tokens, experts], got " + shape_string(shape_of(0)));
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t top_k, obj.get_positive_int("top_k"));
      ALPASIM_ASSIGN_OR_RETURN(std::int64_t capacity, obj.get_positive_int("capacity"));
      id = g_.add_moe_gate(name, in[0], top_k, capacity, layer);
    } else if (kind == "reshape") {
      ALPASIM_RETURN_IF_ERROR(need_inputs(1, 1));
      ALPASIM_ASSIGN_OR_RETURN(JsonValue sv, obj.required("shape", "an array of positive integers"));
      ALPASIM_ASSIGN_OR_RETURN(Shape out, read_shape(sv));
      if (TensorType{out}.num_elements() != g_.op(in[0]).out.num_elements()) {
        return sv.error("expected " + std::to_string(g_.op(in[0]).out.num_elements()) +
                        " elements like the input " + shape_string(shape_of(0)) + ", got " +
                        shape_string(out));
      }
      id = g_.add_elementwise(name, "reshape", in, 0, layer, out);
      g_.mutable_op(id).bytes_read = 0;
      g_.mutable_op(id).bytes_written = 0;
    } else {  // cross_entropy
      ALPASIM_RETURN_IF_ERROR(need_inputs(2, 2));
      Shape per(shape_of(0).begin(), shape_of(0).end() - 1);
      if (!g_.op(in[1]).out.is_index || shape_of(1) != per) {
        return in_v[1].error("expected index labels of shape " + shape_string(per) + ", got " +
                             shape_string(shape_of(1)));
      }
      ALPASIM_ASSIGN_OR_RETURN(LossKernel kernel, parse_loss_kernel(obj));
      OpId ce = g_.add_softmax_cross_entropy(name + "/per_sample", in[0], in[1], kernel, layer);
      id = g_.add_reduce(name, "mean", {ce}, {1}, 1, layer);
      g_.meta.loss = id;
    }
    if (auto ng = obj.optional("no_grad_inputs")) {
      ALPASIM_ASSIGN_OR_RETURN(auto items, ng->as_array());
      for (const JsonValue& i : items) {
        ALPASIM_ASSIGN_OR_RETURN(std::int64_t k, i.as_int(0, static_cast<std::int64_t>(in.size()) - 1,
                                                          "an input index"));
        g_.mutable_op(id).no_grad_inputs |= 1u << k;
      }
    }
    ALPASIM_ASSIGN_OR_RETURN(bool sel, obj.get_bool_or("selective_recompute", false));
    g_.mutable_op(id).selective_recompute = sel;
    ALPASIM_ASSIGN_OR_RETURN(bool fused, obj.get_bool_or("fused_attention", false));
    g_.mutable_op(id).fused_attention = fused;
    ALPASIM_ASSIGN_OR_RETURN(std::int64_t window,
                             obj.get_count_or("attention_window", core::limits::kMaxSeqLen, 0));
    g_.mutable_op(id).attention_window = window;
    ALPASIM_ASSIGN_OR_RETURN(bool swiglu, obj.get_bool_or("fused_swiglu", false));
    g_.mutable_op(id).fused_swiglu = swiglu;
    ALPASIM_RETURN_IF_ERROR(obj.finish());
    names_[name] = id;
    return core::ok_status();
  }

  const std::map<std::string, OpId>& names() const { return names_; }

 private:
  static Status check_einsum(const JsonValue& ev, const DotSpec& s, const Shape& a, const Shape& b) {
    if (a.size() != s.lhs.size() || b.size() != s.rhs.size()) {
      return ev.error("expected operand ranks " + std::to_string(s.lhs.size()) + " and " +
                      std::to_string(s.rhs.size()) + ", got shapes " + shape_string(a) + " and " +
                      shape_string(b));
    }
    for (std::size_t i = 0; i < s.lhs.size(); ++i) {
      auto j = s.rhs.find(s.lhs[i]);
      if (j != std::string::npos && b[j] != a[i]) {
        return ev.error(std::string("expected dimension '") + s.lhs[i] + "' to agree, got " +
                        std::to_string(a[i]) + " and " + std::to_string(b[j]));
      }
    }
    return core::ok_status();
  }

  Graph& g_;
  std::map<std::string, OpId> names_;
};

}  // namespace

Result<Graph> parse_graph_json(const JsonValue& root, const BuildOptions& options) {
  ALPASIM_ASSIGN_OR_RETURN(JsonObject obj, root.as_object());
  ALPASIM_ASSIGN_OR_RETURN(JsonValue fmt, obj.required("format", "\"alpa-sim-graph\""));
  static const std::vector<std::string> kFormat = {"alpa-sim-graph"};
  ALPASIM_RETURN_IF_ERROR(fmt.as_enum(kFormat));
  ALPASIM_ASSIGN_OR_RETURN(JsonValue ver, obj.required("version", "1"));
  ALPASIM_RETURN_IF_ERROR(ver.as_int(1, 1, "1"));
  Graph g;
  g.meta.family = "graph_json";
  ALPASIM_ASSIGN_OR_RETURN(g.meta.model_name, obj.get_string_or("name", root.file()));
  ALPASIM_ASSIGN_OR_RETURN(std::string dtype,
                           obj.get_enum_or("dtype", core::dtype_names(),
                                           std::string(core::dtype_name(options.dtype))));
  g.meta.dtype = *core::parse_dtype(dtype);
  ALPASIM_ASSIGN_OR_RETURN(g.meta.samples_per_microbatch,
                           obj.get_positive_int_or("batch_size", options.microbatch_size));
  ALPASIM_ASSIGN_OR_RETURN(g.meta.seq_len, obj.get_non_negative_int_or("seq_len", 0));
  ALPASIM_ASSIGN_OR_RETURN(JsonValue ops_v, obj.required("ops", "an array of ops"));
  ALPASIM_ASSIGN_OR_RETURN(auto ops, ops_v.as_array());
  if (ops.empty()) return ops_v.type_error("a non-empty array of ops");
  Reader reader(g);
  std::int32_t layer = 0;
  for (const JsonValue& op : ops) ALPASIM_RETURN_IF_ERROR(reader.read_op(op, layer));
  if (auto loss = obj.optional("loss")) {
    ALPASIM_ASSIGN_OR_RETURN(std::string name, loss->as_string());
    auto it = reader.names().find(name);
    if (it == reader.names().end()) return loss->type_error("the name of an op");
    if (g.op(it->second).out.num_elements() != 1) {
      return loss->error("expected a scalar op (shape [1]), got shape " +
                         shape_string(g.op(it->second).out.shape));
    }
    g.meta.loss = it->second;
  }
  if (g.meta.loss == kNoOp) {
    return root.error("expected a \"cross_entropy\" op or a top-level \"loss\" naming a scalar "
                      "op (training needs a loss), got neither");
  }
  const std::int32_t n_layers = g.num_layers();
  if (auto lv = obj.optional("layers")) {
    ALPASIM_ASSIGN_OR_RETURN(auto items, lv->as_array());
    if (static_cast<std::int32_t>(items.size()) != n_layers) {
      return lv->error("expected " + std::to_string(n_layers) +
                       " layers (1 + the largest op \"layer\"), got " + std::to_string(items.size()));
    }
    for (const JsonValue& item : items) {
      ALPASIM_ASSIGN_OR_RETURN(JsonObject lo, item.as_object());
      LayerInfo info;
      ALPASIM_ASSIGN_OR_RETURN(info.name, lo.get_string("name"));
      ALPASIM_ASSIGN_OR_RETURN(info.kind, lo.get_enum_or("kind", layer_kinds(), "block"));
      ALPASIM_RETURN_IF_ERROR(lo.finish());
      g.layers.push_back(std::move(info));
    }
  } else {
    for (std::int32_t l = 0; l < n_layers; ++l) g.layers.push_back({"layer" + std::to_string(l), "block"});
  }
  ALPASIM_RETURN_IF_ERROR(obj.finish());
  return g;
}

Result<Graph> read_graph_json(const std::filesystem::path& path, const std::string& path_as_written,
                              const BuildOptions& options) {
  ALPASIM_ASSIGN_OR_RETURN(core::JsonDocument doc, core::read_json_file(path));
  doc.file = path_as_written;
  return parse_graph_json(JsonValue::root(doc), options);
}

Json graph_to_json(const Graph& g) {
  Json j;
  j["format"] = "alpa-sim-graph";
  j["version"] = 1;
  j["name"] = g.meta.model_name;
  j["dtype"] = std::string(core::dtype_name(g.meta.dtype));
  j["batch_size"] = g.meta.samples_per_microbatch;
  if (g.meta.seq_len > 0) j["seq_len"] = g.meta.seq_len;
  Json layers = Json::array();
  for (const LayerInfo& l : g.layers) {
    std::string kind = l.kind;
    if (std::find(layer_kinds().begin(), layer_kinds().end(), kind) == layer_kinds().end()) kind = "block";
    layers.push_back({{"name", l.name}, {"kind", kind}});
  }
  j["layers"] = layers;
  Json ops = Json::array();
  for (const Op& o : g.ops()) {
    ALPASIM_CHECK(o.phase == Phase::kForward) << "graph_to_json writes forward graphs only";
    Json e;
    e["name"] = o.name;
    e["layer"] = o.layer;
    Json in = Json::array();
    for (OpId i : o.inputs) in.push_back(g.op(i).name);
    switch (o.kind) {
      case OpKind::kParameter: e["op"] = "parameter"; e["shape"] = o.out.shape; break;
      case OpKind::kInput:
        e["op"] = "input";
        e["shape"] = o.out.shape;
        if (o.out.is_index) e["index"] = true;
        break;
      case OpKind::kDot:
      case OpKind::kMoeDispatch:
      case OpKind::kMoeCombine:
        e["op"] = std::string(op_kind_name(o.kind));
        e["einsum"] = dot_spec_string(o.dot);
        break;
      case OpKind::kConv2d: e["op"] = "conv2d"; e["stride"] = o.conv.stride; break;
      case OpKind::kElementwise:
        if (o.function == "reshape") {
          e["op"] = "reshape";
          e["shape"] = o.out.shape;
        } else {
          e["op"] = "elementwise";
          e["function"] = o.function;
          e["flops_per_element"] = o.flops / std::max<std::int64_t>(1, o.out.num_elements());
          e["shape"] = o.out.shape;
          e["dtype"] = std::string(core::dtype_name(o.out.dtype));
        }
        break;
      case OpKind::kReduce: {
        e["op"] = "reduce";
        e["function"] = o.function;
        const std::int64_t n0 = std::max<std::int64_t>(1, g.op(o.inputs[0]).out.num_elements());
        e["flops_per_element"] = o.flops / n0;
        e["shape"] = o.out.shape;
        if (o.function == "softmax_cross_entropy") write_loss_kernel(o.loss_kernel, e);
        break;
      }
      case OpKind::kSoftmax: e["op"] = "softmax"; break;
      case OpKind::kNorm: e["op"] = std::string(norm_type_name(o.norm)); break;
      case OpKind::kEmbedding: e["op"] = "embedding"; break;
      case OpKind::kPool:
        e["op"] = "max_pool";
        e["window"] = o.pool_window;
        e["stride"] = o.pool_stride;
        break;
      case OpKind::kMoeGate:
        e["op"] = "moe_gate";
        e["top_k"] = std::stoll(o.function.substr(3));
        e["capacity"] = o.out.shape.back();
        break;
      case OpKind::kOptimizer: ALPASIM_CHECK(false) << "optimizer op in a forward graph"; break;
    }
    if (!o.inputs.empty()) e["inputs"] = in;
    Json ng = Json::array();
    for (std::size_t i = 0; i < o.inputs.size(); ++i) {
      // Embedding ids never get gradients anyway; writing it keeps the form uniform.
      if (!o.input_has_grad(i)) ng.push_back(i);
    }
    if (!ng.empty()) e["no_grad_inputs"] = ng;
    if (o.selective_recompute) e["selective_recompute"] = true;
    if (o.fused_attention) e["fused_attention"] = true;
    if (o.attention_window > 0) e["attention_window"] = o.attention_window;
    if (o.fused_swiglu) e["fused_swiglu"] = true;
    ops.push_back(std::move(e));
  }
  j["ops"] = ops;
  if (g.meta.loss != kNoOp) j["loss"] = g.op(g.meta.loss).name;
  return j;
}

}  // namespace alpasim::ir

#include "tests/unit/ir/onnx_fixtures.h"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <vector>

namespace alpasim::ir::testing {
namespace {

void add_input(onnx::GraphProto* g, const std::string& name, const std::vector<std::int64_t>& dims,
               const std::string& symbolic_dim0 = "") {
  auto* in = g->add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    auto* d = tt->mutable_shape()->add_dim();
    if (i == 0 && !symbolic_dim0.empty()) {
      d->set_dim_param(symbolic_dim0);
    } else {
      d->set_dim_value(dims[i]);
    }
  }
}

void add_index_input(onnx::GraphProto* g, const std::string& name, const std::vector<std::int64_t>& dims) {
  auto* in = g->add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::INT64);
  for (std::int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

void add_output(onnx::GraphProto* g, const std::string& name) {
  auto* out = g->add_output();
  out->set_name(name);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
}

// Weights are zeros: only shapes matter to the importer.
void add_weight(onnx::GraphProto* g, const std::string& name, const std::vector<std::int64_t>& dims) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  std::int64_t n = 1;
  for (std::int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (std::int64_t i = 0; i < n; ++i) t->add_float_data(0.0f);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, const std::string& name,
                          const std::vector<std::string>& inputs, const std::string& output) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : inputs) n->add_input(i);
  n->add_output(output);
  return n;
}

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (std::int64_t x : v) a->add_ints(x);
}

void set_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

onnx::ModelProto model(const std::string& name) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("alpa-sim tests");
  m.add_opset_import()->set_version(17);
  m.mutable_graph()->set_name(name);
  return m;
}

std::string serialize(const onnx::ModelProto& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

onnx::ModelProto mlp(bool lrn, const std::string& symbolic) {
  onnx::ModelProto m = model("tiny_mlp");
  auto* g = m.mutable_graph();
  add_input(g, "x", {8, 32}, symbolic);
  add_weight(g, "w1", {32, 64});
  add_weight(g, "b1", {64});
  add_weight(g, "w2", {64, 10});
  add_node(g, "MatMul", "fc1", {"x", "w1"}, "h");
  std::string h = "h";
  if (lrn) {
    add_node(g, "LRN", "norm", {"h"}, "hn");
    h = "hn";
  }
  add_node(g, "Add", "fc1_bias", {h, "b1"}, "hb");
  add_node(g, "Relu", "relu", {"hb"}, "a");
  add_node(g, "MatMul", "fc2", {"a", "w2"}, "logits");
  add_node(g, "Softmax", "softmax", {"logits"}, "probs");
  add_output(g, "probs");
  return m;
}

}  // namespace

std::string tiny_mlp_onnx() { return serialize(mlp(false, "")); }
std::string unsupported_op_onnx() { return serialize(mlp(true, "")); }
std::string dynamic_shape_onnx() { return serialize(mlp(false, "batch")); }

std::string tiny_attention_onnx() {
  onnx::ModelProto m = model("tiny_attention");
  auto* g = m.mutable_graph();
  add_index_input(g, "ids", {2, 4});
  add_weight(g, "table", {50, 16});
  add_weight(g, "ln_scale", {16});
  add_weight(g, "ln_bias", {16});
  for (const char* w : {"wq", "wk", "wv"}) add_weight(g, w, {16, 16});
  add_weight(g, "w_out", {16, 50});
  add_node(g, "Gather", "embed", {"table", "ids"}, "x");
  add_node(g, "LayerNormalization", "ln", {"x", "ln_scale", "ln_bias"}, "xn");
  add_node(g, "MatMul", "q", {"xn", "wq"}, "q");
  add_node(g, "MatMul", "k", {"xn", "wk"}, "k");
  add_node(g, "MatMul", "v", {"xn", "wv"}, "v");
  auto* t = add_node(g, "Transpose", "kt", {"k"}, "kt");
  set_ints(t, "perm", {0, 2, 1});
  add_node(g, "MatMul", "scores", {"q", "kt"}, "s");
  add_node(g, "Softmax", "softmax", {"s"}, "p");
  add_node(g, "MatMul", "context", {"p", "v"}, "c");
  add_node(g, "Add", "residual", {"x", "c"}, "r");
  add_node(g, "MatMul", "logits", {"r", "w_out"}, "logits");
  add_output(g, "logits");
  return serialize(m);
}

std::string tiny_cnn_onnx() {
  onnx::ModelProto m = model("tiny_cnn");
  auto* g = m.mutable_graph();
  add_input(g, "image", {2, 3, 16, 16});
  add_weight(g, "conv1_w", {8, 3, 3, 3});
  add_weight(g, "conv1_b", {8});
  for (const char* p : {"bn_scale", "bn_bias", "bn_mean", "bn_var"}) add_weight(g, p, {8});
  add_weight(g, "conv2_w", {16, 8, 3, 3});
  add_weight(g, "fc_w", {10, 16});
  add_weight(g, "fc_b", {10});
  auto* c1 = add_node(g, "Conv", "conv1", {"image", "conv1_w", "conv1_b"}, "c1");
  set_ints(c1, "kernel_shape", {3, 3});
  set_ints(c1, "pads", {1, 1, 1, 1});
  add_node(g, "BatchNormalization", "bn", {"c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"}, "b1");
  add_node(g, "Relu", "relu", {"b1"}, "r1");
  auto* p = add_node(g, "MaxPool", "pool", {"r1"}, "p1");
  set_ints(p, "kernel_shape", {2, 2});
  set_ints(p, "strides", {2, 2});
  auto* c2 = add_node(g, "Conv", "conv2", {"p1", "conv2_w"}, "c2");
  set_ints(c2, "kernel_shape", {3, 3});
  set_ints(c2, "pads", {1, 1, 1, 1});
  set_ints(c2, "strides", {2, 2});
  add_node(g, "GlobalAveragePool", "gap", {"c2"}, "g");
  add_node(g, "Flatten", "flatten", {"g"}, "f");
  auto* fc = add_node(g, "Gemm", "fc", {"f", "fc_w", "fc_b"}, "logits");
  set_int(fc, "transB", 1);
  add_output(g, "logits");
  return serialize(m);
}

}  // namespace alpasim::ir::testing

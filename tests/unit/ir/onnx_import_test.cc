#include "ir/onnx_import.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/accounting.h"
#include "ir/autodiff.h"
#include "tests/unit/ir/onnx_fixtures.h"
#include "tests/unit/ir/reference_data.h"

namespace alpasim::ir {
namespace {

std::filesystem::path write(const std::string& name, const std::string& bytes) {
  const auto dir = std::filesystem::path(ALPASIM_BINARY_DIR) / "ir_onnx_test";
  std::filesystem::create_directories(dir);
  // CTest runs test cases in parallel processes, several writing the same model: one file
  // per process and call, so none reads another's half-written file.
  static int calls = 0;
  const auto p = dir / (std::to_string(::getpid()) + "_" + std::to_string(calls++) + "_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

core::Result<Graph> import_bytes(const std::string& name, const std::string& bytes) {
  return import_onnx(write(name, bytes), name, {});
}

// A fuzzer's input kept in tests/data/reliability, imported under the name "fuzz.onnx".
core::Result<Graph> import_repro(const std::string& file) {
  return import_onnx(std::filesystem::path(ALPASIM_SOURCE_DIR) / "tests/data/reliability" / file,
                     "fuzz.onnx", {});
}

TEST_CASE("a small ONNX MLP imports with its parameters and matmul FLOPs") {
  REQUIRE(onnx_import_available());
  auto g = import_bytes("mlp.onnx", testing::tiny_mlp_onnx());
  REQUIRE_MESSAGE(g.ok(), g.status().to_string());
  CHECK(parameter_count(*g) == 32 * 64 + 64 + 64 * 10);
  CHECK(g->meta.samples_per_microbatch == 8);
  const Graph t = derive_training_graph(*g, {});
  const PhaseFlops p = phase_flops(t);
  // Forward: 2·8·32·64 + 2·8·64·10. Backward: dW1, dW2 and dX of fc2 (x needs none).
  CHECK(p.matmul_forward == 2 * 8 * 32 * 64 + 2 * 8 * 64 * 10);
  CHECK(p.matmul_backward == 2 * 8 * 32 * 64 + 2 * (2 * 8 * 64 * 10));
}

TEST_CASE("import_onnx_bytes reads the model from memory exactly as import_onnx reads the file") {
  auto from_file = import_bytes("cnn.onnx", testing::tiny_cnn_onnx());
  auto from_memory = import_onnx_bytes(testing::tiny_cnn_onnx(), "cnn.onnx", {});
  REQUIRE_MESSAGE(from_file.ok(), from_file.status().to_string());
  REQUIRE_MESSAGE(from_memory.ok(), from_memory.status().to_string());
  REQUIRE(from_memory->ops().size() == from_file->ops().size());
  for (std::size_t i = 0; i < from_file->ops().size(); ++i) {
    CHECK(from_memory->ops()[i].name == from_file->ops()[i].name);
    CHECK(from_memory->ops()[i].flops == from_file->ops()[i].flops);
  }
  CHECK(parameter_count(*from_memory) == parameter_count(*from_file));
  auto garbage = import_onnx_bytes("\x08\xff\xff", "junk.onnx", {});
  REQUIRE_FALSE(garbage.ok());
  CHECK(garbage.status().message() == "junk.onnx: not an ONNX model (protobuf parse failed)");
}

TEST_CASE("a small ONNX CNN imports: NCHW convolutions become NHWC conv2d ops") {
  auto g = import_bytes("cnn.onnx", testing::tiny_cnn_onnx());
  REQUIRE_MESSAGE(g.ok(), g.status().to_string());
  // conv1 8·3·3·3 + 8, batch-norm scale and shift 2·8 (running stats are not
  // parameters), conv2 16·8·3·3, fc 16·10 + 10.
  CHECK(parameter_count(*g) == 216 + 8 + 16 + 1152 + 170);
  std::vector<std::int64_t> conv_flops;
  for (const Op& o : g->ops()) {
    if (o.kind == OpKind::kConv2d) conv_flops.push_back(o.flops);
  }
  // conv1: M = 2·16·16, N = 8, K = 27; conv2 (stride 2): M = 2·4·4, N = 16, K = 72.
  CHECK(conv_flops == std::vector<std::int64_t>{2 * 512 * 8 * 27, 2 * 32 * 16 * 72});
  const Graph t = derive_training_graph(*g, {OptimizerKind::kSgd});
  int grad_input = 0, grad_filter = 0;
  for (const Op& o : t.ops()) {
    if (o.kind != OpKind::kConv2d || o.phase != Phase::kBackward) continue;
    (o.conv.variant == ConvSpec::Variant::kGradFilter ? grad_filter : grad_input)++;
  }
  CHECK(grad_filter == 2);
  CHECK(grad_input == 1);  // the image needs no gradient
}

TEST_CASE("a small ONNX attention block imports with batched matmuls") {
  auto g = import_bytes("attn.onnx", testing::tiny_attention_onnx());
  REQUIRE_MESSAGE(g.ok(), g.status().to_string());
  CHECK(parameter_count(*g) == 50 * 16 + 2 * 16 + 3 * 16 * 16 + 16 * 50);
  std::vector<DotDims> dims;
  for (const Op& o : g->ops()) {
    if (o.kind == OpKind::kDot) dims.push_back(o.dot_dims);
  }
  // q, k, v ([2,4,16] x a 2-D weight): the weight has no batch dims, so the leading dim
  // is a free dim of the left operand: M = 2·4, N = 16, K = 16.
  // Scores [2,4,16] x [2,16,4]: batch 2, M 4, N 4, K 16; context: batch 2, M 4, N 16, K 4.
  REQUIRE(dims.size() == 6);
  CHECK(dims[0] == DotDims{1, 8, 16, 16});
  CHECK(dims[3] == DotDims{2, 4, 4, 16});
  CHECK(dims[4] == DotDims{2, 4, 16, 4});
  CHECK(dims[5] == DotDims{1, 8, 50, 16});
  const Graph t = derive_training_graph(*g, {});
  CHECK(phase_flops(t).matmul_backward > phase_flops(t).matmul_forward);
}

TEST_CASE("ONNX errors name the node and the unsupported operator or dynamic dim") {
  const std::string unsupported = import_bytes("bad.onnx", testing::unsupported_op_onnx()).status().message();
  CHECK(unsupported.rfind("bad.onnx: node 1 (\"norm\", op LRN): unsupported operator LRN (supported: Add, "
                          "BatchNormalization, ", 0) == 0);
  CHECK(import_bytes("dyn.onnx", testing::dynamic_shape_onnx()).status().message() ==
        "dyn.onnx: input \"x\" has a dynamic dimension 0 (\"batch\"); alpa-sim needs static shapes");
  CHECK(import_bytes("junk.onnx", "not a protobuf").status().message() ==
        "junk.onnx: not an ONNX model (protobuf parse failed)");
}

// Found by fuzz_onnx (docs/fuzzing.md): an initializer used where another element count is
// needed reached a CHECK (abort) instead of an error naming the node.
TEST_CASE("an initializer with the wrong element count is an error, not a crash") {
  REQUIRE(onnx_import_available());
  auto g = import_repro("fuzz_onnx_bn_scale_count.onnx");
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().message() ==
        "fuzz.onnx: node 1 (\"bn\", op BatchNormalization): initializer \"bn_scale\" has 8 "
        "elements, but this operator needs 3");
}

// Found by fuzz_onnx: names in the file (here the operator domain) may hold control
// characters; the message escapes them and stays one line.
TEST_CASE("names with control characters keep an ONNX error on one line") {
  REQUIRE(onnx_import_available());
  auto g = import_repro("fuzz_onnx_domain_newline.onnx");
  REQUIRE_FALSE(g.ok());
  const std::string m = g.status().message();
  CHECK(m.rfind("fuzz.onnx: node 0 (\"conv1\", op Conv): unsupported operator domain \"", 0) == 0);
  for (const char c : m) CHECK(static_cast<unsigned char>(c) >= 0x20);
}

// Found by fuzz_onnx under AddressSanitizer: a normalization whose scale was an initializer
// read its input's shape through a reference into the graph's ops after adding the
// parameter had reallocated them (heap-use-after-free). The fuzz/onnx CTest (ASan) would
// catch a relapse on this input; here it must import or fail with one line.
TEST_CASE("a normalization adding its scale parameter reads no freed shape") {
  REQUIRE(onnx_import_available());
  auto g = import_repro("fuzz_onnx_norm_shape_realloc.onnx");
  if (!g.ok()) {
    const std::string m = g.status().message();
    CHECK(m.rfind("fuzz.onnx: ", 0) == 0);
    CHECK(m.find('\n') == std::string::npos);
  }
}

// Found by fuzz_onnx under AddressSanitizer: a Gemm with one input made the importer read
// past the node's inputs (heap-buffer-overflow); now an error naming the node.
TEST_CASE("an operator with too few inputs is an error naming the node") {
  REQUIRE(onnx_import_available());
  auto g = import_repro("fuzz_onnx_gemm_one_input.onnx");
  REQUIRE_FALSE(g.ok());
  const std::string m = g.status().message();
  CHECK(m.rfind("fuzz.onnx: node ", 0) == 0);
  CHECK(m.find("op Gemm): expected at least 2 inputs, got 1") != std::string::npos);
}

TEST_CASE("the checked-in tests/data/ir ONNX files are the generator's output") {
  for (auto [file, bytes] : {std::pair{"mlp.onnx", testing::tiny_mlp_onnx()},
                             std::pair{"cnn.onnx", testing::tiny_cnn_onnx()}}) {
    CAPTURE(file);
    std::ifstream in(testing::data_file(file), std::ios::binary);
    REQUIRE(in.good());
    std::stringstream ss;
    ss << in.rdbuf();
    CHECK(ss.str() == bytes);
  }
}

}  // namespace
}  // namespace alpasim::ir

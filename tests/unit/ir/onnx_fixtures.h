#pragma once

// Tiny ONNX models built with the ONNX protobuf classes (Debian's libonnx-dev): the
// importer's test inputs. tests/data/ir/{mlp,cnn}.onnx are these bytes, checked in so
// that the files can also be used from scenarios; onnx_import_test checks they agree.

#include <string>

namespace alpasim::ir::testing {

/// x [8, 32] -> MatMul W1 [32, 64] -> Add b1 [64] -> Relu -> MatMul W2 [64, 10] ->
/// Softmax. 32·64 + 64 + 64·10 = 2,752 parameters.
std::string tiny_mlp_onnx();

/// x [2, 3, 16, 16] -> Conv 3x3 (8, pads 1, bias) -> BatchNormalization -> Relu ->
/// MaxPool 2x2/2 -> Conv 3x3/2 (16, pads 1) -> GlobalAveragePool -> Flatten ->
/// Gemm (transB, [10, 16] + bias). 216 + 8 + 16 + 1,152 + 170 = 1,562 parameters.
std::string tiny_cnn_onnx();

/// A one-block attention model: ids [2, 4] (int64) -> Gather table [50, 16] ->
/// LayerNormalization -> q, k, v MatMuls [16, 16] -> Transpose k -> batched MatMul ->
/// Softmax -> batched MatMul with v -> Add residual -> MatMul [16, 50].
/// 800 + 32 + 3·256 + 800 = 2,400 parameters.
std::string tiny_attention_onnx();

/// The MLP with an LRN node (unsupported) after the first MatMul.
std::string unsupported_op_onnx();

/// The MLP whose input has a symbolic batch dimension "batch".
std::string dynamic_shape_onnx();

}  // namespace alpasim::ir::testing

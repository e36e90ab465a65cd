#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "core/status.h"
#include "ir/builders.h"
#include "ir/graph.h"

namespace alpasim::ir {

/// True when alpa-sim was built with Debian's libonnx-dev (the ONNX protobuf classes).
bool onnx_import_available();

/// Imports an ONNX model with static shapes (MLP, CNN, transformer): MatMul, Gemm,
/// Conv (2-D, square kernels, symmetric padding), Add/Sub/Mul/Div, Relu/Gelu/Sigmoid/
/// Tanh/Erf, Softmax, LayerNormalization, BatchNormalization, MaxPool,
/// GlobalAveragePool, ReduceMean, Flatten, Reshape, Transpose (as layout-only views),
/// Gather (embedding lookup), Identity/Dropout, plus initializers as parameters.
/// The graph's last output becomes a mean-reduced loss so that the training step can be
/// derived. Errors: `m.onnx: node 3 ("conv_7", op LRN): unsupported operator LRN
/// (supported: ...)`, `m.onnx: input "x" has a dynamic dimension 0 ("batch")`.
/// Without libonnx-dev it returns kUnavailable.
core::Result<Graph> import_onnx(const std::filesystem::path& path,
                                const std::string& path_as_written, const BuildOptions& options);

/// The same from the serialized model in memory (`bytes`); `name` stands for the file in
/// messages. For callers that hold the bytes already (the fuzz target: no temporary file).
core::Result<Graph> import_onnx_bytes(std::string_view bytes, const std::string& name,
                                      const BuildOptions& options);

}  // namespace alpasim::ir

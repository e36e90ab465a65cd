#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace alpasim::core {

/// Numeric formats of tensors and of the arithmetic units that process them.
/// kTf32 is fp32 storage computed on tensor cores (A100 and later).
enum class DType { kFp32, kTf32, kFp16, kBf16, kFp8 };

/// Bytes per element in memory (tf32 is stored as fp32; fp8 as one byte).
constexpr std::int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kFp32:
    case DType::kTf32: return 4;
    case DType::kFp16:
    case DType::kBf16: return 2;
    case DType::kFp8: return 1;
  }
  return 0;
}

/// The dtype tensors of a run training in `t` are kept in (weights, gradients,
/// activations): fp8 training (Transformer Engine's recipe) keeps bf16 tensors and runs only
/// the block linears' GEMMs in fp8; every other dtype keeps its own.
constexpr DType storage_dtype(DType t) { return t == DType::kFp8 ? DType::kBf16 : t; }

/// "fp32", "tf32", "fp16", "bf16", "fp8".
std::string_view dtype_name(DType t);
/// Inverse of dtype_name.
std::optional<DType> parse_dtype(std::string_view name);
/// Every name parse_dtype accepts, in enum order.
const std::vector<std::string>& dtype_names();

}  // namespace alpasim::core

#include "core/dtype.h"

namespace alpasim::core {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kFp32: return "fp32";
    case DType::kTf32: return "tf32";
    case DType::kFp16: return "fp16";
    case DType::kBf16: return "bf16";
    case DType::kFp8: return "fp8";
  }
  return "?";
}

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> kNames = {"fp32", "tf32", "fp16", "bf16", "fp8"};
  return kNames;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : {DType::kFp32, DType::kTf32, DType::kFp16, DType::kBf16, DType::kFp8}) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

}  // namespace alpasim::core

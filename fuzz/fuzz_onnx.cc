// libFuzzer target: the ONNX importer on the serialized model in memory
// (ir::import_onnx_bytes, the parser and importer behind ir::import_onnx).
#include <string_view>

#include "fuzz/fuzz_common.h"
#include "ir/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace alpasim;
  if (!ir::onnx_import_available()) return 0;
  ir::BuildOptions options;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fuzz::check_error(ir::import_onnx_bytes(bytes, "m.onnx", options).status());
  return 0;
}

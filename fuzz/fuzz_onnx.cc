// libFuzzer target: the ONNX importer (ir::import_onnx), which reads a file: each input is
// written to a per-process temporary file first.
#include <unistd.h>

#include <fstream>

#include "fuzz/fuzz_common.h"
#include "ir/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace alpasim;
  if (!ir::onnx_import_available()) return 0;
  static const std::string path = "/tmp/alpasim-fuzz-onnx-" + std::to_string(::getpid()) + ".onnx";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  ir::BuildOptions options;
  fuzz::check_error(ir::import_onnx(path, "m.onnx", options).status());
  return 0;
}

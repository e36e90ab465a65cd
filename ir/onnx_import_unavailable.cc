// Stand-in for onnx_import.cc when libonnx-dev was not found at configure time
// (ir/CMakeLists.txt chooses one of the two).
#include "ir/onnx_import.h"

namespace alpasim::ir {

bool onnx_import_available() { return false; }

core::Result<Graph> import_onnx(const std::filesystem::path&, const std::string& path_as_written,
                                const BuildOptions&) {
  return core::unavailable(path_as_written +
                           ": alpa-sim was built without ONNX support (install Debian's "
                           "libonnx-dev and libprotobuf-dev, then re-run CMake)");
}

core::Result<Graph> import_onnx_bytes(std::string_view, const std::string& name, const BuildOptions& options) {
  return import_onnx(name, name, options);
}

}  // namespace alpasim::ir

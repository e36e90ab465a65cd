#pragma once

#include <string_view>

namespace alpasim::core {

/// alpa-sim's version (semantic versioning; from the CMake project version).
std::string_view version();

}  // namespace alpasim::core

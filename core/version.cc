#include "core/version.h"

namespace alpasim::core {

std::string_view version() { return ALPASIM_VERSION; }

}  // namespace alpasim::core

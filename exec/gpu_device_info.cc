#include "exec/gpu_device_info.h"

#include "core/text.h"

namespace alpasim::exec {

std::string describe(const GpuDeviceInfo& info) {
  return std::to_string(info.index) + ": " + info.name + ", sm_" +
         std::to_string(info.compute_capability_major) +
         std::to_string(info.compute_capability_minor) + ", " +
         std::to_string(info.multiprocessor_count) + " SMs, " +
         core::format_bytes(info.memory.value());
}

}  // namespace alpasim::exec

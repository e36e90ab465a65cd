#pragma once

#include <string>

#include "core/units.h"

namespace alpasim::exec {

/// What the executor needs to know of one GPU. Plain C++: no CUDA types, so every module
/// can hold it; only exec/cuda/ fills it in.
struct GpuDeviceInfo {
  int index = 0;
  std::string name;  ///< e.g. "NVIDIA H100 80GB HBM3"
  core::Bytes memory{0};
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
};

/// "0: NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.19 GiB".
std::string describe(const GpuDeviceInfo& info);

}  // namespace alpasim::exec

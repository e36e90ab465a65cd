#pragma once

#include <string>

#include "core/status.h"
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

/// cudaError_t values the classification below needs (fixed by the CUDA runtime's ABI;
/// exec/cuda/cuda_devices.cc static_asserts them against cuda_runtime_api.h).
inline constexpr int kCudaErrorStubLibrary = 34;
inline constexpr int kCudaErrorInsufficientDriver = 35;
inline constexpr int kCudaErrorNoDevice = 100;

/// The Status of a failed CUDA device query (cudaGetDeviceCount returned `cuda_error`, with
/// CUDA's text `cuda_message`; `driver_version` from cudaDriverGetVersion, 0 when no driver
/// is installed; `runtime_version` from cudaRuntimeGetVersion; versions as 1000·major +
/// 10·minor). kUnavailable ("no usable CUDA device: ...", which the tools turn into exit 77,
/// skipped) only where this machine has no GPU (cudaErrorNoDevice, e.g. CUDA_VISIBLE_DEVICES
/// empty) or no driver (the stub library, or an "insufficient driver" with no driver
/// installed). Everything else is kFailedPrecondition naming CUDA's reason and both versions:
/// a driver older than the runtime, a broken installation or busy devices on a GPU machine
/// is a failure, not a skip. `cuda_error` 0 with `device_count` 0 is "no GPU" as well.
/// Inline: alpa-profile's microbenchmarks use it without linking alpasim_exec.
inline core::Status cuda_device_query_failure(int cuda_error, const std::string& cuda_message, int device_count,
                                              int driver_version, int runtime_version) {
  if (cuda_error == 0 && device_count == 0) return core::unavailable("no usable CUDA device: the driver reports none");
  const bool no_driver = cuda_error == kCudaErrorStubLibrary ||
                         (cuda_error == kCudaErrorInsufficientDriver && driver_version == 0);
  if (cuda_error == kCudaErrorNoDevice || no_driver) return core::unavailable("no usable CUDA device: " + cuda_message);
  auto version = [](int v) {
    return v == 0 ? std::string("none") : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  return core::failed_precondition("CUDA device query failed: " + cuda_message + " (error " +
                                   std::to_string(cuda_error) + "; the driver supports CUDA " +
                                   version(driver_version) + ", the runtime is " + version(runtime_version) +
                                   "): this machine has a CUDA driver but cannot use it");
}

}  // namespace alpasim::exec

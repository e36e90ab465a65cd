#pragma once

#include <vector>

#include "core/status.h"
#include "exec/gpu_device_info.h"

namespace alpasim::exec::cuda {

/// The CUDA devices of this machine. kUnavailable (with the CUDA runtime's reason) when
/// there is no driver or no device: the caller decides whether that is a skip or an error.
core::Result<std::vector<GpuDeviceInfo>> list_cuda_devices();

/// Launches a kernel on `device` that writes a known pattern and checks it on the host:
/// proves that the kernels compiled for this build run on that GPU.
core::Status run_kernel_self_test(int device);

}  // namespace alpasim::exec::cuda

#pragma once

// Kernels compiled by nvcc. nvcc builds .cu files as C++17, so this header and the .cu
// files use only plain types; the C++20 code in exec/cuda/*.cc wraps them in Status.

#include <cuda_runtime_api.h>

namespace alpasim::exec::cuda::kernels {

/// Writes out[i] = 3·i + 1 for i < n on the current device's default stream.
cudaError_t launch_fill_pattern(int* out, int n);

}  // namespace alpasim::exec::cuda::kernels

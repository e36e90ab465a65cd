#pragma once

// Kernels of alpa-profile, compiled by nvcc. nvcc builds .cu files as C++17, so this header
// uses only plain types (STYLE.md 9.6); the C++20 code around it turns errors into Status.

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace alpasim::exec::microbench::kernels {

/// Fills `bytes` bytes (a multiple of elem_bytes, elem_bytes in {1, 2, 4}) with hashed
/// values: element i = (hash(i, seed) & keep_mask) | set_bits. Callers choose the masks so
/// every element is a finite number of moderate magnitude in its dtype (never NaN or Inf),
/// because all-zero data lowers power draw and flatters timings.
cudaError_t fill_pattern(void* data, std::size_t bytes, int elem_bytes, std::uint32_t keep_mask,
                         std::uint32_t set_bits, std::uint32_t seed, cudaStream_t stream);

/// HBM copy: dst[i] = src[i] for i < n floats (reads and writes 8n bytes).
cudaError_t launch_copy(float* dst, const float* src, std::size_t n, cudaStream_t stream);

/// STREAM triad: a[i] = b[i] + scalar * c[i] for i < n floats (moves 12n bytes).
cudaError_t launch_triad(float* a, const float* b, const float* c, float scalar, std::size_t n,
                         cudaStream_t stream);

}  // namespace alpasim::exec::microbench::kernels

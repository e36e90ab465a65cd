#pragma once

// The executor's initial values (parameters and synthetic inputs), one definition for the CPU
// backend and the CUDA backend's init kernel (exec/cuda/exec_kernels.cu), so the two
// backends start from bit-identical tensors. Plain integer and fp32 arithmetic only: every
// function compiles as host code and, under nvcc, as device code.
//
// A value depends only on (the tensor's name, its global element index): a block of a sharded
// tensor holds the same values as the whole tensor at those indices.

#include <cstdint>

#if defined(__CUDACC__)
#define ALPASIM_HOST_DEVICE __host__ __device__
#else
#define ALPASIM_HOST_DEVICE
#endif

namespace alpasim::exec::init {

/// splitmix64: a stateless hash.
ALPASIM_HOST_DEVICE inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Uniform in [0, 1) from the top 24 bits (exact in fp32).
ALPASIM_HOST_DEVICE inline float unit(std::uint64_t seed, std::int64_t i) {
  return static_cast<float>(mix(seed ^ mix(static_cast<std::uint64_t>(i))) >> 40) / 16777216.0f;
}

/// How a parameter's values are drawn: base + scale·(2u − 1), u = unit(seed, index).
struct ParameterInit {
  std::uint64_t seed = 0;
  float base = 0.0f;
  float scale = 0.1f;
};

/// A parameter's value at global index i. 2u − 1 is exact in fp32 (u has 24 bits); the
/// product and the sum are rounded separately, never fused into one FMA (the device path
/// uses explicitly rounded intrinsics; the host path stores the product through a volatile,
/// which no compiler may contract, on any target or -ffp-contract setting), so both
/// backends round the same way.
ALPASIM_HOST_DEVICE inline float parameter_value(const ParameterInit& p, std::int64_t i) {
  const float centred = 2.0f * unit(p.seed, i) - 1.0f;
#if defined(__CUDA_ARCH__)
  return __fadd_rn(p.base, __fmul_rn(p.scale, centred));
#else
  volatile float product = p.scale * centred;
  return p.base + product;
#endif
}

/// A synthetic input's value at global index i (i counts from the first sample of the batch):
/// an index in [0, index_range) when `is_index`, else uniform in [-1, 1).
ALPASIM_HOST_DEVICE inline float input_value(std::uint64_t seed, std::int64_t i, bool is_index,
                                             std::int64_t index_range) {
  const float u = unit(seed, i);
  if (!is_index) return 2.0f * u - 1.0f;
  const auto k = static_cast<std::int64_t>(u * static_cast<float>(index_range));
  return static_cast<float>(k < index_range - 1 ? k : index_range - 1);
}

}  // namespace alpasim::exec::init

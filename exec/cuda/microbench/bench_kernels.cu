#include "exec/cuda/microbench/bench_kernels.h"

namespace alpasim::exec::microbench::kernels {
namespace {

__device__ std::uint32_t hash32(std::uint64_t i, std::uint32_t seed) {
  // splitmix64 finaliser: cheap, well mixed, deterministic.
  std::uint64_t z = i + 0x9E3779B97F4A7C15ull * (seed + 1ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::uint32_t>(z ^ (z >> 31));
}

__global__ void fill_kernel(void* data, std::size_t count, int elem_bytes, std::uint32_t keep,
                            std::uint32_t set, std::uint32_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const std::uint32_t v = (hash32(i, seed) & keep) | set;
    if (elem_bytes == 4) {
      static_cast<std::uint32_t*>(data)[i] = v;
    } else if (elem_bytes == 2) {
      static_cast<std::uint16_t*>(data)[i] = static_cast<std::uint16_t>(v);
    } else {
      static_cast<std::uint8_t*>(data)[i] = static_cast<std::uint8_t>(v);
    }
  }
}

__global__ void copy_kernel(float* dst, const float* src, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    dst[i] = src[i];
  }
}

__global__ void triad_kernel(float* a, const float* b, const float* c, float s, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    a[i] = b[i] + s * c[i];
  }
}

// Grid: enough blocks to fill every SM several times over (grid-stride loops cover the rest).
unsigned blocks_for(std::size_t n) {
  const std::size_t want = (n + 255) / 256;
  return static_cast<unsigned>(want < 65536 ? (want == 0 ? 1 : want) : 65536);
}

}  // namespace

cudaError_t fill_pattern(void* data, std::size_t bytes, int elem_bytes, std::uint32_t keep_mask,
                         std::uint32_t set_bits, std::uint32_t seed, cudaStream_t stream) {
  const std::size_t count = bytes / static_cast<std::size_t>(elem_bytes);
  fill_kernel<<<blocks_for(count), 256, 0, stream>>>(data, count, elem_bytes, keep_mask, set_bits,
                                                      seed);
  return cudaGetLastError();
}

cudaError_t launch_copy(float* dst, const float* src, std::size_t n, cudaStream_t stream) {
  copy_kernel<<<blocks_for(n), 256, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}

cudaError_t launch_triad(float* a, const float* b, const float* c, float scalar, std::size_t n,
                         cudaStream_t stream) {
  triad_kernel<<<blocks_for(n), 256, 0, stream>>>(a, b, c, scalar, n);
  return cudaGetLastError();
}

}  // namespace alpasim::exec::microbench::kernels

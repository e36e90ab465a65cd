#pragma once

// Internal helpers of the microbenchmarks: CUDA/cuBLASLt/cuDNN/NCCL status codes to
// core::Status, owning device buffers, and the event timer every benchmark uses.

#include <cstddef>
#include <functional>
#include <string>

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace alpasim::exec::microbench {

/// kInternal "<what>: <cudaGetErrorString>" unless ok.
core::Status cuda_status(cudaError_t err, const std::string& what);

/// ALPASIM_RETURN_IF_ERROR for a cudaError_t.
#define ALPASIM_CUDA_TRY(expr, what) ALPASIM_RETURN_IF_ERROR(::alpasim::exec::microbench::cuda_status((expr), (what)))

/// One cudaMalloc'ed block, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// Frees the old block and allocates `bytes` (at least 1).
  core::Status allocate(std::size_t bytes, const std::string& what);
  /// The device pointer (nullptr before allocate).
  void* get() const { return ptr_; }
  /// The size asked for in allocate.
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// How long to time: a launch is repeated `iters` times between two events (one "rep"),
/// iters chosen so a rep lasts about target_rep_s; the result is the median over `reps`.
struct TimingPolicy {
  double target_rep_s = 2e-3;  ///< seconds one timed loop should last
  int reps = 5;                ///< timed loops; the median is reported
  int warmup = 3;              ///< untimed launches first
  int max_iters = 1000;        ///< cap on launches per loop (NCCL: the fixed count)
};

/// Median seconds per launch of `launch` on `stream` (nccl-tests style: warm-up, then
/// event-timed loops of many launches, median over repetitions).
core::Result<double> time_launches(cudaStream_t stream, const TimingPolicy& policy,
                                   const std::function<core::Status()>& launch);

}  // namespace alpasim::exec::microbench

#include "exec/cuda/microbench/cuda_util.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec/cuda/microbench/sweep.h"

namespace alpasim::exec::microbench {

core::Status cuda_status(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return core::Status();
  return core::internal_error(what + ": " + cudaGetErrorString(err));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

core::Status DeviceBuffer::allocate(std::size_t bytes, const std::string& what) {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  ALPASIM_CUDA_TRY(cudaMalloc(&ptr_, std::max<std::size_t>(bytes, 1)), "cudaMalloc " + what);
  bytes_ = bytes;
  return core::Status();
}

namespace {
// RAII pair of events.
struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};
}  // namespace

core::Result<double> time_launches(cudaStream_t stream, const TimingPolicy& policy,
                                   const std::function<core::Status()>& launch) {
  Events ev;
  ALPASIM_CUDA_TRY(cudaEventCreate(&ev.start), "cudaEventCreate");
  ALPASIM_CUDA_TRY(cudaEventCreate(&ev.stop), "cudaEventCreate");
  for (int i = 0; i < policy.warmup; ++i) ALPASIM_RETURN_IF_ERROR(launch());
  ALPASIM_CUDA_TRY(cudaStreamSynchronize(stream), "warm-up");
  auto timed = [&](int iters) -> core::Result<double> {
    ALPASIM_CUDA_TRY(cudaEventRecord(ev.start, stream), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) ALPASIM_RETURN_IF_ERROR(launch());
    ALPASIM_CUDA_TRY(cudaEventRecord(ev.stop, stream), "cudaEventRecord");
    ALPASIM_CUDA_TRY(cudaEventSynchronize(ev.stop), "cudaEventSynchronize");
    float ms = 0;
    ALPASIM_CUDA_TRY(cudaEventElapsedTime(&ms, ev.start, ev.stop), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3 / iters;
  };
  ALPASIM_ASSIGN_OR_RETURN(double probe_s, timed(1));
  const int iters = static_cast<int>(std::clamp<double>(
      std::ceil(policy.target_rep_s / std::max(probe_s, 1e-7)), 1.0, policy.max_iters));
  std::vector<double> reps;
  for (int r = 0; r < policy.reps; ++r) {
    ALPASIM_ASSIGN_OR_RETURN(double s, timed(iters));
    reps.push_back(s);
  }
  return median(reps);
}

}  // namespace alpasim::exec::microbench

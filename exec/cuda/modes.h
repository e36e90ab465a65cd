#pragma once

// Internal to exec/cuda/: the CUDA backend's two execution modes, chosen by run_cuda()
// (run_cuda.h). Plain types in the signatures; CUDA types stay in the .cc files.

#include "core/status.h"
#include "exec/backend.h"
#include "exec/launch/rank_env.h"
#include "exec/launch/rendezvous.h"

namespace alpasim::exec::cuda {

/// A cuDNN handle on the current device (as void*: no cuDNN header here), or null when the
/// build has no cuDNN or cudnnCreate fails (conv ops then report why).
class DnnHandle {
 public:
  DnnHandle();
  ~DnnHandle();
  DnnHandle(const DnnHandle&) = delete;
  DnnHandle& operator=(const DnnHandle&) = delete;
  void* get() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

/// Virtual-device mode (virtual_devices.cc): every device of `program` on GPU 0.
core::Result<ExecutionResult> run_virtual(const Program& program, const RunOptions& options);

/// One rank of the one-process-per-GPU mode (nccl_rank.cc): runs Program device index
/// env.rank on CUDA device env.local_rank with NCCL. Returns the rank's result (its `error`
/// set when the run failed after the communicators existed, so rank 0 can report it);
/// a Status error only when the rank could not start. kUnavailable in a build without NCCL.
core::Result<launch::RankResult> run_rank(const Program& program, const RunOptions& options,
                                          const launch::RankEnv& env);

}  // namespace alpasim::exec::cuda

#pragma once
// alpa-exec's exit codes (docs/executor.md), apart from main.cc so that a unit test
// (tests/unit/exec/exit_codes_test.cc) checks the mapping without a GPU.

#include "core/status.h"

namespace alpasim::apps::alpa_exec {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUserError = 1;  ///< bad input or a failed run
inline constexpr int kExitInternalError = 2;
inline constexpr int kExitNoDevice = 77;  ///< CTest's "skipped"

/// Where a failure happened: creating the backend (the step that finds out whether this
/// machine has a GPU, apps/alpa-exec/backends.h) or any other step (reading, lowering,
/// running, writing).
enum class Step { kCreateBackend, kOther };

/// 77 only for kUnavailable from creating the backend: there exec/cuda reports "no GPU" or
/// "no driver" (exec/gpu_device_info.h, cuda_device_query_failure), and a CPU-only build
/// "built without CUDA". A kUnavailable from a run (a device timing out waiting for its
/// peers, cuDNN failing to start, a launcher that cannot fork) is a failed run: 1, like
/// every other error but kInternal (2).
constexpr int exit_code_for(core::StatusCode code, Step step) {
  if (code == core::StatusCode::kOk) return kExitOk;
  if (code == core::StatusCode::kUnavailable && step == Step::kCreateBackend) return kExitNoDevice;
  return code == core::StatusCode::kInternal ? kExitInternalError : kExitUserError;
}

}  // namespace alpasim::apps::alpa_exec

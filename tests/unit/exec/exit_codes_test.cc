// alpa-exec exits 77 (skipped) only where the machine has no GPU or no CUDA driver; every
// other CUDA failure is a failure with its message (apps/alpa-exec/exit_codes.h,
// exec/gpu_device_info.h). Before, every kUnavailable status exited 77, including a run
// timing out and cuDNN failing to start, and a driver older than the runtime read "no usable
// CUDA device" (kUnavailable) and so was skipped as well.
#include "apps/alpa-exec/exit_codes.h"

#include <doctest/doctest.h>

#include "exec/gpu_device_info.h"

namespace alpasim::apps::alpa_exec {
namespace {

using core::StatusCode;

TEST_CASE("alpa-exec: 77 only for kUnavailable from creating the backend") {
  CHECK(exit_code_for(StatusCode::kOk, Step::kOther) == 0);
  CHECK(exit_code_for(StatusCode::kUnavailable, Step::kCreateBackend) == 77);
  // A run's kUnavailable (the CPU backend's and the CUDA backend's "timed out", cuDNN's
  // "no cuDNN handle", a launcher that cannot fork) fails the run.
  CHECK(exit_code_for(StatusCode::kUnavailable, Step::kOther) == 1);
  CHECK(exit_code_for(StatusCode::kFailedPrecondition, Step::kCreateBackend) == 1);
  CHECK(exit_code_for(StatusCode::kInvalidArgument, Step::kOther) == 1);
  CHECK(exit_code_for(StatusCode::kUnimplemented, Step::kOther) == 1);
  CHECK(exit_code_for(StatusCode::kInternal, Step::kCreateBackend) == 2);
  CHECK(exit_code_for(StatusCode::kInternal, Step::kOther) == 2);
}

int exit_for_device_query(int cuda_error, int count, int driver, int runtime) {
  const core::Status s = exec::cuda_device_query_failure(cuda_error, "CUDA's text", count, driver, runtime);
  return exit_code_for(s.code(), Step::kCreateBackend);
}

TEST_CASE("alpa-exec: a failed CUDA device query skips only for no GPU or no driver") {
  // No GPU: cudaErrorNoDevice (e.g. CUDA_VISIBLE_DEVICES empty), or a count of 0.
  CHECK(exit_for_device_query(exec::kCudaErrorNoDevice, 0, 12040, 12040) == 77);
  CHECK(exit_for_device_query(0, 0, 12040, 12040) == 77);
  // No driver: "insufficient driver" with no driver installed (version 0), or the stub.
  CHECK(exit_for_device_query(exec::kCudaErrorInsufficientDriver, 0, 0, 12040) == 77);
  CHECK(exit_for_device_query(exec::kCudaErrorStubLibrary, 0, 0, 12040) == 77);
  // A driver older than the runtime: a GPU machine that cannot run, a failure.
  CHECK(exit_for_device_query(exec::kCudaErrorInsufficientDriver, 0, 11040, 12040) == 1);
  // Anything else (46 cudaErrorDevicesUnavailable: exclusive-mode GPUs busy; 999 unknown).
  CHECK(exit_for_device_query(46, 0, 12040, 12040) == 1);
  CHECK(exit_for_device_query(999, 0, 12040, 12040) == 1);
}

TEST_CASE("alpa-exec: the device-query messages name CUDA's reason and the versions") {
  const core::Status none = exec::cuda_device_query_failure(exec::kCudaErrorNoDevice, "no CUDA-capable device is detected", 0, 12040, 12040);
  CHECK(none.code() == StatusCode::kUnavailable);
  CHECK(none.message() == "no usable CUDA device: no CUDA-capable device is detected");
  const core::Status old = exec::cuda_device_query_failure(exec::kCudaErrorInsufficientDriver,
      "CUDA driver version is insufficient for CUDA runtime version", 0, 11040, 12040);
  CHECK(old.code() == StatusCode::kFailedPrecondition);
  CHECK(old.message() ==
        "CUDA device query failed: CUDA driver version is insufficient for CUDA runtime version (error 35; the "
        "driver supports CUDA 11.4, the runtime is 12.4): this machine has a CUDA driver but cannot use it");
}

}  // namespace
}  // namespace alpasim::apps::alpa_exec

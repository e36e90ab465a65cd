// GPU smoke test: lists the devices and runs the self-test kernel on each.
// Exits 77 (CTest: skipped) when there is no GPU or no driver, so a CPU-only machine reports
// a skip, never a pass.
#include <cstdio>

#include "exec/cuda/cuda_devices.h"

int main() {
  auto devices = alpasim::exec::cuda::list_cuda_devices();
  // 77 (skipped) only for "no GPU / no driver"; a GPU machine whose CUDA cannot start fails.
  if (!devices.ok()) {
    const bool no_gpu = devices.status().code() == alpasim::core::StatusCode::kUnavailable;
    std::printf("%s: %s\n", no_gpu ? "SKIPPED" : "FAILED", devices.status().message().c_str());
    return no_gpu ? 77 : 1;
  }
  int failures = 0;
  for (const auto& d : *devices) {
    std::printf("device %s\n", alpasim::exec::describe(d).c_str());
    auto st = alpasim::exec::cuda::run_kernel_self_test(d.index);
    std::printf("  kernel self-test: %s\n", st.ok() ? "ok" : st.message().c_str());
    if (!st.ok()) ++failures;
  }
  std::printf("%d passed, %d failed\n", static_cast<int>(devices->size()) - failures, failures);
  return failures == 0 ? 0 : 1;
}

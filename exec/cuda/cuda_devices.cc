#include "exec/cuda/cuda_devices.h"

#include <cuda_runtime_api.h>

#include <string>

namespace alpasim::exec::cuda {

static_assert(cudaErrorStubLibrary == kCudaErrorStubLibrary);
static_assert(cudaErrorInsufficientDriver == kCudaErrorInsufficientDriver);
static_assert(cudaErrorNoDevice == kCudaErrorNoDevice);

core::Result<std::vector<GpuDeviceInfo>> list_cuda_devices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the sticky error so later calls are not poisoned
    // Versions tell "no driver" (0) from "driver older than the runtime"; a failed query
    // leaves 0, which only weakens the message.
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    return cuda_device_query_failure(static_cast<int>(err), cudaGetErrorString(err), count, driver, runtime);
  }
  std::vector<GpuDeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess) {
      // The driver counted this device: failing to describe it is a broken setup, not "no GPU".
      return core::failed_precondition("cudaGetDeviceProperties(" + std::to_string(i) +
                                       "): " + cudaGetErrorString(err));
    }
    devices.push_back(GpuDeviceInfo{i, prop.name, core::Bytes(static_cast<std::int64_t>(prop.totalGlobalMem)),
                                    prop.major, prop.minor, prop.multiProcessorCount});
  }
  return devices;
}

}  // namespace alpasim::exec::cuda

#include <vector>

#include "exec/cuda/kernels.h"

namespace alpasim::exec::cuda {
namespace {

core::Status cuda_error(const char* call, cudaError_t err) {
  (void)cudaGetLastError();
  return core::internal_error(std::string(call) + ": " + cudaGetErrorString(err));
}

}  // namespace

core::Status run_kernel_self_test(int device) {
  constexpr int kElements = 1 << 16;
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return cuda_error("cudaSetDevice", e);
  int* buffer = nullptr;
  void* raw = nullptr;
  if (cudaError_t e = cudaMalloc(&raw, kElements * sizeof(int)); e != cudaSuccess) {
    return cuda_error("cudaMalloc", e);
  }
  buffer = static_cast<int*>(raw);
  cudaError_t launched = kernels::launch_fill_pattern(buffer, kElements);
  std::vector<int> host(kElements);
  cudaError_t copied =
      cudaMemcpy(host.data(), buffer, kElements * sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(buffer);
  if (launched != cudaSuccess) return cuda_error("fill_pattern launch", launched);
  if (copied != cudaSuccess) return cuda_error("fill_pattern kernel", copied);
  for (int i = 0; i < kElements; ++i) {
    if (host[i] != 3 * i + 1) {
      return core::internal_error("kernel self-test: element " + std::to_string(i) + " is " +
                                  std::to_string(host[i]) + ", expected " +
                                  std::to_string(3 * i + 1));
    }
  }
  return core::Status();
}

}  // namespace alpasim::exec::cuda
